#include "sparse/cuda/csr_view.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparse/bsr.h"
#include "sparse/csr.h"
#include "sparse/cuda/compressed_index.h"
#include "sparse/cuda/compressed_transpose.h"
#include "sparse/cuda/pattern_cache.h"
#include "sparse/format_cells.h"
#include "sparse/formats.h"
#include "sparse/index_util.h"
#include "sparse/nm.h"
#include "sparse/stored_positions.h"
#include "tensor/cuda/stream.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

// One pattern's CSR form and how the format's slots land on its entries.
struct CsrMap {
  Tensor pointers, indices;  // i32 CSR pattern on the device
  Tensor slots;              // i64: the slots of values(t).reshape(-1) that store something
  Tensor entries;            // i64: the CSR entry each of those slots lands on
  Tensor positions;          // i64: every slot's flat position, -1 for none
  int64_t nnz = 0;           // CSR entries
  int64_t slot_count = 0;    // values(t).numel()
  uint64_t version = 0;      // the views' pattern version
};

// A CSR's or CSC's map, formed on the device rather than walked on the
// host: an activation made CSR has a new pattern every step. A CSR is its
// own view, each entry's row expanded from its pointers; a CSC's view is the
// matrix's CSR, made by one csr2csc (compressed_transpose.h), which also
// tells the CSR entry of each slot.
std::shared_ptr<const CsrMap> compressed_map(const Tensor& t, const CompressedImpl& c, std::string_view op) {
  const int64_t cols = t.size(1), nnz = c.nnz();
  const Device device = t.device();
  const TensorOptions i64(DType::kI64, device);
  ProfileScope scope("csr view of a compressed pattern", device);
  cuda::DeviceGuard guard(device.index);  // the kernels below launch on the device's stream
  const cudaStream_t stream = cuda::current_stream(device.index);
  auto map = std::make_shared<CsrMap>();
  map->slots = empty({nnz}, i64);
  iota(map->slots.data<int64_t>(), nnz, stream);
  // Each slot's outer index (row of a CSR, column of a CSC) and inner one.
  Tensor outer_of_slot = empty({nnz}, i64);
  expand_pointers(c.pointers().data<int32_t>(), c.compressed_size(), outer_of_slot.data<int64_t>(), stream);
  const Tensor inner_of_slot = c.indices().to(DType::kI64);
  if (c.is_csr()) {
    map->pointers = c.pointers();
    map->indices = c.indices();
    map->entries = map->slots;
    map->positions = add(mul(outer_of_slot, static_cast<double>(cols)), inner_of_slot);
  } else {
    // The arrays are the CSR of t^T [cols, rows]; their transpose is t's CSR.
    const CompressedTranspose csr =
        transpose_compressed_arrays(c.pointers(), c.indices(), c.compressed_size(), c.uncompressed_size(), op);
    map->pointers = csr.pointers;
    map->indices = csr.indices;
    map->entries = scatter_add(zeros({nnz}, i64), 0, csr.source, map->slots);
    map->positions = add(mul(inner_of_slot, static_cast<double>(cols)), outer_of_slot);
  }
  map->nnz = nnz;
  map->slot_count = nnz;
  map->version = new_pattern_version();
  return map;
}

std::shared_ptr<const CsrMap> build_map(const Tensor& t, std::string_view op) {
  COPPICE_CHECK(t.dim() == 2, op, ": sparse operand must be 2-D, got shape ", shape_to_string(t.shape()));
  const int64_t rows = t.size(0), cols = t.size(1);
  COPPICE_CHECK(rows < (int64_t{1} << 31) && cols < (int64_t{1} << 31), op, ": shape ", shape_to_string(t.shape()),
                " exceeds cuSPARSE's 32-bit index limit");
  if (const auto* c = t.impl_as<CompressedImpl>()) return compressed_map(t, *c, op);
  ProfileScope scope("csr view from stored positions (host walk)", t.device());
  const std::vector<int64_t> pos = stored_positions(t);
  std::vector<int64_t> stored;  // slot indices with a position
  for (size_t s = 0; s < pos.size(); ++s) {
    if (pos[s] >= 0) stored.push_back(static_cast<int64_t>(s));
  }
  std::vector<int64_t> unique(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) unique[i] = pos[static_cast<size_t>(stored[i])];
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  COPPICE_CHECK(unique.size() < (size_t{1} << 31), op, ": ", unique.size(),
                " stored entries exceed cuSPARSE's 32-bit index limit");
  std::vector<int64_t> entries(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    const int64_t p = pos[static_cast<size_t>(stored[i])];
    entries[i] = std::lower_bound(unique.begin(), unique.end(), p) - unique.begin();
  }
  std::vector<int32_t> crow(static_cast<size_t>(rows) + 1, 0), col(unique.size());
  for (size_t e = 0; e < unique.size(); ++e) {
    ++crow[static_cast<size_t>(unique[e] / cols) + 1];
    col[e] = static_cast<int32_t>(unique[e] % cols);
  }
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) crow[r + 1] += crow[r];

  auto map = std::make_shared<CsrMap>();
  const Device device = t.device();
  const auto n = static_cast<int64_t>(stored.size());
  map->pointers = from_vector(crow, {rows + 1}).to(device);
  map->indices = from_vector(col, {static_cast<int64_t>(col.size())}).to(device);
  map->slots = from_vector(stored, {n}).to(device);
  map->entries = from_vector(entries, {n}).to(device);
  map->positions = from_vector(pos, {static_cast<int64_t>(pos.size())}).to(device);
  map->nnz = static_cast<int64_t>(unique.size());
  map->slot_count = static_cast<int64_t>(pos.size());
  map->version = new_pattern_version();
  return map;
}

// Built outside the cache's lock: it synchronizes the device. The cache is
// never destroyed: kernels may run during exit.
std::shared_ptr<const CsrMap> map_for(const Tensor& t, std::string_view op) {
  static auto* cache = new PatternCache<std::shared_ptr<const CsrMap>>();
  return cache->get(t, [&] { return build_map(t, op); });
}

}  // namespace

Tensor csr_view(const Tensor& t, std::string_view op) {
  const std::shared_ptr<const CsrMap> map = map_for(t, op);
  const Tensor flat = values(t).contiguous().reshape({map->slot_count});
  const Tensor kept = index_select_trusted(flat, 0, map->slots);
  const Tensor csr_values = scatter_add_trusted(zeros({map->nnz}, flat.options()), 0, map->entries, kept);
  return Tensor(
      std::make_shared<CompressedImpl>(Layout::kCsr, map->pointers, map->indices, csr_values, t.shape(), map->version));
}

Tensor values_from_csr_order(const Tensor& t, const Tensor& csr_values, std::string_view op) {
  const std::shared_ptr<const CsrMap> map = map_for(t, op);
  COPPICE_CHECK(csr_values.numel() == map->nnz, op, ": internal: ", csr_values.numel(), " values for a CSR view of ",
                map->nnz, " entries");
  const Tensor gathered = index_select_trusted(csr_values.contiguous(), 0, map->entries);
  const Tensor flat = scatter_add_trusted(zeros({map->slot_count}, csr_values.options()), 0, map->slots, gathered);
  return flat.reshape(values(t).shape());
}

namespace {

// A BSR pattern's positions formed on the device: each block's first entry,
// plus the offsets of a block's entries.
Tensor bsr_device_positions(const Tensor& t, std::string_view op) {
  const BsrImpl& b = bsr_impl(t, op);
  const int64_t bh = b.block_rows(), bw = b.block_cols(), cols = t.size(1);
  const std::vector<int> crow = b.crow_indices().to_vector<int>(), col = b.col_indices().to_vector<int>();
  std::vector<int64_t> first(col.size());
  for (size_t r = 0; r + 1 < crow.size(); ++r) {
    for (int s = crow[r]; s < crow[r + 1]; ++s) {
      first[static_cast<size_t>(s)] = static_cast<int64_t>(r) * bh * cols + col[static_cast<size_t>(s)] * bw;
    }
  }
  const TensorOptions i64(DType::kI64, t.device());
  const Tensor offsets = add(mul(arange(bh, i64).reshape({bh, 1}), static_cast<double>(cols)), arange(bw, i64));
  const auto nb = static_cast<int64_t>(first.size());
  return add(from_vector(first).to(t.device()).reshape({nb, 1, 1}), offsets.reshape({1, bh, bw}))
      .reshape({nb * bh * bw})
      .contiguous();
}

using PositionsCell = Tensor (*)(const Tensor&, std::string_view);

// The formats whose positions are formed on the device; every other format's
// come from the cached map.
const FormatCells<PositionsCell>& device_position_cells() {
  static const auto* cells = new FormatCells<PositionsCell>({{format_name(Layout::kBsr), bsr_device_positions}});
  return *cells;
}

}  // namespace

Tensor device_positions(const Tensor& t, std::string_view op) {
  if (const PositionsCell* cell = device_position_cells().find(t)) return (*cell)(t, op);
  return map_for(t, op)->positions;
}

bool multiplies_densely(const Tensor& t) {
  const NmImpl* s = t.impl_as<NmImpl>();  // only n:m has a one-kernel dense form
  return s != nullptr && s->n() * 8 >= s->m();
}

}  // namespace coppice::sparse_cuda
