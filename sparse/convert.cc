#include "sparse/convert.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>
#include <vector>

#include "sparse/index_util.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

using sparse_detail::host_i64;
using sparse_detail::index_tensor;

void check_target_shape(const Tensor& t, const FormatSpec& spec, std::string_view op) {
  if (spec.rank == FormatRank::kMatrix) {
    COPPICE_CHECK(t.dim() == 2, op, ": format '", spec.name, "' needs a 2-D tensor, got shape ",
                  shape_to_string(t.shape()));
  } else if (spec.rank == FormatRank::kAtLeast1) {
    COPPICE_CHECK(t.dim() >= 1, op, ": format '", spec.name, "' needs at least one dimension, got a 0-d tensor");
  }
}

// The options of `source` when it is a tensor of a format with options of
// the same family (a block for a block format, n and m for n:m), else none.
std::optional<FormatOptions> source_options(const Tensor& source, FormatOptionKind kind) {
  if (source.is_dense()) return std::nullopt;
  const FormatSpec* spec = find_format(source.format());
  if (spec == nullptr || !spec->options_of) return std::nullopt;
  const bool same_family = has_block_shape(kind) ? has_block_shape(spec->options) : spec->options == kind;
  if (!same_family) return std::nullopt;
  return spec->options_of(source);
}

FormatOptions resolve_block(const Tensor& source, const FormatOptions& o, const FormatSpec& spec, std::string_view op) {
  COPPICE_CHECK(o.block_rows >= 0 && o.block_cols >= 0, op, ": block shape [", o.block_rows, ", ", o.block_cols,
                "] must be positive");
  FormatOptions block;
  if (o.block_rows > 0 || o.block_cols > 0) {
    block = FormatOptions::block(o.block_rows > 0 ? o.block_rows : o.block_cols,
                                 o.block_cols > 0 ? o.block_cols : o.block_rows);
  } else if (auto own = source_options(source, spec.options)) {
    block = FormatOptions::block(own->block_rows, own->block_cols);
  } else {
    fail(op, ": format '", spec.name, "' needs a block shape (FormatOptions::block), and the source (format '",
         source.format(), "') has none");
  }
  COPPICE_CHECK(spec.options != FormatOptionKind::kSquareBlock || block.block_rows == block.block_cols, op,
                ": Blocked-ELL needs square blocks, got ", block.block_rows, "x", block.block_cols);
  return block;
}

FormatOptions resolve_nm(const Tensor& source, const FormatOptions& o, std::string_view op) {
  if (o.n != 0 || o.m != 0) {
    COPPICE_CHECK(o.n > 0 && o.m > 0, op, ": n:m needs both n and m, got n = ", o.n, ", m = ", o.m);
    return FormatOptions::nm(o.n, o.m);
  }
  if (auto own = source_options(source, FormatOptionKind::kNm)) return *own;
  return FormatOptions::nm(2, 4);
}

// The options the format reads, with zeros filled in from the source or the
// defaults (see FormatOptions); fields the format does not read are zero.
FormatOptions resolve_options(const FormatSpec& spec, const Tensor& source, const FormatOptions& o,
                              std::string_view op) {
  switch (spec.options) {
    case FormatOptionKind::kNone: return {};
    case FormatOptionKind::kBlock:
    case FormatOptionKind::kSquareBlock: return resolve_block(source, o, spec, op);
    case FormatOptionKind::kNm: return resolve_nm(source, o, op);
  }
  return {};
}

void check_mask(const Tensor& dense, const Tensor& mask, std::string_view op) {
  sparse_detail::check_values(dense, op);
  check_dense(mask, op, "mask");
  COPPICE_CHECK(mask.dtype() == DType::kBool, op, ": mask must be bool, got ", dtype_name(mask.dtype()));
  COPPICE_CHECK(mask.shape() == dense.shape(), op, ": mask of shape ", shape_to_string(mask.shape()),
                " for a tensor of shape ", shape_to_string(dense.shape()));
  check_same_device({dense, mask}, op);
}

// Stable order of entries by key in [0, nkeys); `pointers` gets the key ranges.
std::vector<int64_t> counting_sort(const std::vector<int64_t>& key, int64_t nkeys, std::vector<int64_t>* pointers) {
  pointers->assign(static_cast<size_t>(nkeys) + 1, 0);
  for (int64_t k : key) ++(*pointers)[static_cast<size_t>(k) + 1];
  for (size_t i = 1; i < pointers->size(); ++i) (*pointers)[i] += (*pointers)[i - 1];
  std::vector<int64_t> next(pointers->begin(), pointers->end() - 1), order(key.size());
  for (size_t i = 0; i < key.size(); ++i) order[static_cast<size_t>(next[static_cast<size_t>(key[i])]++)] = int64_t(i);
  return order;
}

std::vector<int64_t> gather(const std::vector<int64_t>& v, const std::vector<int64_t>& order) {
  std::vector<int64_t> out(order.size());
  for (size_t i = 0; i < order.size(); ++i) out[i] = v[static_cast<size_t>(order[i])];
  return out;
}

// Expands compressed pointers to the outer index of every entry.
std::vector<int64_t> expand(const std::vector<int64_t>& ptr) {
  std::vector<int64_t> out(ptr.empty() ? 0 : static_cast<size_t>(ptr.back()));
  for (size_t r = 0; r + 1 < ptr.size(); ++r) {
    std::fill(out.begin() + ptr[r], out.begin() + ptr[r + 1], static_cast<int64_t>(r));
  }
  return out;
}

void check_i32_range(int64_t nnz, std::string_view op) {
  COPPICE_CHECK(nnz < (int64_t{1} << 31), op, ": ", nnz, " entries exceed the i32 index range");
}

Tensor make_coo(std::vector<int64_t> flat, const Tensor& values, const Shape& shape) {
  const int64_t nnz = static_cast<int64_t>(flat.size()), ndim = static_cast<int64_t>(shape.size());
  std::vector<int64_t> idx(static_cast<size_t>(ndim * nnz));
  for (int64_t d = ndim - 1; d >= 0; --d) {
    for (int64_t k = 0; k < nnz; ++k) {
      idx[static_cast<size_t>(d * nnz + k)] = flat[static_cast<size_t>(k)] % shape[static_cast<size_t>(d)];
      flat[static_cast<size_t>(k)] /= shape[static_cast<size_t>(d)];
    }
  }
  return Tensor(std::make_shared<CooImpl>(index_tensor(idx, {ndim, nnz}, DType::kI64, values.device()), values, shape,
                                          true, new_pattern_version()));
}

// CSR (CSC) of the entries of a 2-D `dense` where `mask` holds, by the
// dense_mask_to_csr kernel of the tensors' device, which keeps them where
// they are (the COO path goes through the host). CSC is the CSR of the
// transpose, whose rows are the columns with their rows ascending, as
// coo_to_csc's stable sort leaves them. Undefined where this build has no
// such kernel (sparse/cpu, sparse/cuda not linked) or the tensor is too large
// for i32 positions: the caller takes the COO path, which gives the same.
Tensor compressed_from_mask(const Tensor& dense, const Tensor& mask, Layout layout) {
  constexpr std::string_view kKernel = op::kDenseMaskToCsr;
  if (dense.dim() != 2 || dense.numel() > INT32_MAX ||
      !Dispatcher::instance().has_kernel(kKernel, dense.device().type)) {
    return Tensor();
  }
  const bool csr = layout == Layout::kCsr;
  Tensor v = csr ? dense.contiguous() : dense.t().contiguous();
  Tensor m = csr ? mask.contiguous() : mask.t().contiguous();
  std::vector<Tensor> parts = dispatch(kKernel, {v, m});
  return Tensor(std::make_shared<CompressedImpl>(layout, std::move(parts[0]), std::move(parts[1]), std::move(parts[2]),
                                                 dense.shape(), new_pattern_version()));
}

}  // namespace

namespace sparse_detail {

// The entries of `dense` where `mask` holds, as a coalesced COO tensor.
Tensor mask_to_coo(const Tensor& dense, const Tensor& mask) {
  std::vector<uint8_t> keep = host_mask(mask);
  std::vector<int64_t> flat;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i]) flat.push_back(static_cast<int64_t>(i));
  }
  Tensor values = index_select(dense.contiguous().reshape({-1}), 0, index_tensor(flat, DType::kI64, dense.device()));
  return make_coo(std::move(flat), values, dense.shape());
}

Tensor mask_to_compressed(const Tensor& dense, const Tensor& mask, Layout layout) {
  if (Tensor t = compressed_from_mask(dense, mask, layout); t.defined()) return t;
  return layout == Layout::kCsr ? coo_to_csr(mask_to_coo(dense, mask)) : coo_to_csc(mask_to_coo(dense, mask));
}

Tensor mask_to_bsr(const Tensor& dense, const Tensor& mask, int64_t bh, int64_t bw, std::string_view op) {
  check_block_shape(dense.shape(), bh, bw, op);
  const int64_t rows = dense.size(0), cols = dense.size(1), nbr = rows / bh, nbc = cols / bw;
  std::vector<uint8_t> keep = host_mask(mask);
  std::vector<uint8_t> present(static_cast<size_t>(nbr * nbc), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (keep[static_cast<size_t>(r * cols + c)]) present[static_cast<size_t>((r / bh) * nbc + c / bw)] = 1;
    }
  }
  std::vector<int64_t> crow(static_cast<size_t>(nbr) + 1, 0), col, ids;
  for (int64_t br = 0; br < nbr; ++br) {
    for (int64_t bc = 0; bc < nbc; ++bc) {
      if (!present[static_cast<size_t>(br * nbc + bc)]) continue;
      col.push_back(bc);
      ids.push_back(br * nbc + bc);
    }
    crow[static_cast<size_t>(br) + 1] = static_cast<int64_t>(col.size());
  }
  check_i32_range(static_cast<int64_t>(ids.size()), op);
  Tensor kept = where(mask, dense, zeros({}, dense.options()));
  Tensor all_blocks = kept.view({nbr, bh, nbc, bw}).permute({0, 2, 1, 3}).contiguous().view({nbr * nbc, bh, bw});
  Tensor values = index_select(all_blocks, 0, index_tensor(ids, DType::kI64, dense.device()));
  return Tensor(std::make_shared<BsrImpl>(
      index_tensor(crow, DType::kI32, dense.device()), index_tensor(col, DType::kI32, dense.device()),
      values.view({static_cast<int64_t>(ids.size()), bh, bw}), dense.shape(), new_pattern_version()));
}

Tensor coo_to_masked(const Tensor& t) {
  Tensor coo = coalesce(t);
  const CooImpl& c = coo_impl(coo, "to_format");
  Tensor host = Tensor::empty(t.shape(), TensorOptions(DType::kBool, Device::cpu()));
  bool* m = host.data<bool>();
  std::fill(m, m + host.numel(), false);
  const int64_t nnz = c.nnz(), ndim = t.dim();
  std::vector<int64_t> idx = host_i64(c.indices());
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t f = 0;
    for (int64_t d = 0; d < ndim; ++d)
      f = f * t.shape()[static_cast<size_t>(d)] + idx[static_cast<size_t>(d * nnz + k)];
    m[f] = true;
  }
  return Tensor(std::make_shared<MaskedImpl>(c.to_dense(), host.to(t.device()), nnz, new_pattern_version()));
}

Tensor nm_to_coo(const Tensor& t) {
  const NmImpl& s = nm_impl(t, "to_format");
  const int64_t n = s.n(), m = s.m(), groups = s.groups_per_row(), cols = t.shape().back();
  std::vector<int64_t> flat = host_i64(s.indices());
  for (size_t k = 0; k < flat.size(); ++k) {
    const int64_t slot = static_cast<int64_t>(k), row = slot / (groups * n), g = (slot / n) % groups;
    flat[k] += row * cols + g * m;  // ascending: groups in order, positions increasing within each
  }
  return make_coo(std::move(flat), s.values().reshape({-1}), t.shape());
}

}  // namespace sparse_detail

namespace {

// Every stored entry of `t`, as a coalesced COO tensor.
// Every stored entry of `t`, whose row gives its stored positions, as a
// coalesced COO: explicit zeros kept, padding slots left out, repeated
// positions summed.
Tensor positions_to_coo(const Tensor& t, const FormatSpec& spec) {
  const std::vector<int64_t> pos = spec.stored_positions(t);
  const Shape& shape = t.shape();
  const int64_t rank = t.dim();
  std::vector<int64_t> slots;
  for (size_t s = 0; s < pos.size(); ++s) {
    if (pos[s] >= 0) slots.push_back(static_cast<int64_t>(s));
  }
  const auto nnz = static_cast<int64_t>(slots.size());
  std::vector<int64_t> indices(static_cast<size_t>(rank * nnz));
  for (int64_t e = 0; e < nnz; ++e) {
    int64_t p = pos[static_cast<size_t>(slots[static_cast<size_t>(e)])];
    for (int64_t d = rank; d-- > 0;) {
      indices[static_cast<size_t>(d * nnz + e)] = p % shape[static_cast<size_t>(d)];
      p /= shape[static_cast<size_t>(d)];
    }
  }
  const Tensor stored = index_select(values(t).reshape({-1}), 0, from_vector(slots).to(t.device()));
  return coalesce(sparse_coo(from_vector(indices, {rank, nnz}).to(t.device()), stored, shape));
}

Tensor to_coo(const Tensor& t) {
  const FormatSpec* spec = find_format(t.format());
  if (spec != nullptr && spec->to_coo) return spec->to_coo(t);
  if (spec != nullptr && spec->stored_positions) return positions_to_coo(t, *spec);
  return dense_to_coo(to_dense(t));  // a user format that says neither: its dense form's non-zeros
}

// The entries of `dense` where `mask` holds, in the format.
Tensor from_mask(const Tensor& dense, const Tensor& mask, const FormatSpec& spec, const FormatOptions& options,
                 std::string_view op) {
  check_target_shape(dense, spec, op);
  return spec.from_mask(dense, mask, resolve_options(spec, dense, options, op), op);
}

// A coalesced COO tensor in the format: its own from_coo, else from_mask
// over the stored positions (explicit zeros kept).
Tensor from_coo(const Tensor& coo, const FormatSpec& spec, const FormatOptions& resolved, std::string_view op) {
  if (spec.from_coo) return spec.from_coo(coo, resolved, op);
  Tensor masked = sparse_detail::coo_to_masked(coo);
  const MaskedImpl& m = masked_impl(masked, op);
  return spec.from_mask(m.values(), m.mask(), resolved, op);
}

// Conversions between two formats that share their arrays, taken when the
// options agree (the same block).
struct DirectPath {
  Layout from, to;
  Tensor (*convert)(const Tensor&);
};
constexpr DirectPath kDirectPaths[] = {
    {Layout::kCsr, Layout::kCsc, csr_to_csc},
    {Layout::kCsc, Layout::kCsr, csc_to_csr},
    {Layout::kBsr, Layout::kBlockedEll, bsr_to_blocked_ell},
    {Layout::kBlockedEll, Layout::kBsr, blocked_ell_to_bsr},
};

FormatOptions options_of(const Tensor& t) {
  const FormatSpec* spec = find_format(t.format());
  return spec != nullptr && spec->options_of ? spec->options_of(t) : FormatOptions{};
}

}  // namespace

Tensor dense_to_coo(const Tensor& dense) {
  sparse_detail::check_values(dense, "dense_to_coo");
  COPPICE_CHECK(dense.dim() >= 1, "dense_to_coo: needs at least one dimension, got a 0-d tensor");
  return sparse_detail::mask_to_coo(dense, ne(dense, 0.0));
}

Tensor coo_to_csr(const Tensor& t) {
  Tensor coo = coalesce(t);
  const CooImpl& c = coo_impl(coo, "coo_to_csr");
  COPPICE_CHECK(t.dim() == 2, "coo_to_csr: needs a 2-D tensor, got shape ", shape_to_string(t.shape()));
  check_i32_range(c.nnz(), "coo_to_csr");
  std::vector<int64_t> idx = host_i64(c.indices());
  const int64_t nnz = c.nnz();
  std::vector<int64_t> rows(idx.begin(), idx.begin() + nnz), cols(idx.begin() + nnz, idx.end()), crow;
  counting_sort(rows, t.size(0), &crow);  // already sorted: only the pointers are needed
  return Tensor(std::make_shared<CompressedImpl>(Layout::kCsr, index_tensor(crow, DType::kI32, t.device()),
                                                 index_tensor(cols, DType::kI32, t.device()), c.values(), t.shape(),
                                                 new_pattern_version()));
}

Tensor coo_to_csc(const Tensor& t) {
  Tensor coo = coalesce(t);
  const CooImpl& c = coo_impl(coo, "coo_to_csc");
  COPPICE_CHECK(t.dim() == 2, "coo_to_csc: needs a 2-D tensor, got shape ", shape_to_string(t.shape()));
  check_i32_range(c.nnz(), "coo_to_csc");
  std::vector<int64_t> idx = host_i64(c.indices());
  const int64_t nnz = c.nnz();
  std::vector<int64_t> rows(idx.begin(), idx.begin() + nnz), cols(idx.begin() + nnz, idx.end()), ccol;
  std::vector<int64_t> order = counting_sort(cols, t.size(1), &ccol);
  Tensor values = index_select(c.values(), 0, index_tensor(order, DType::kI64, t.device()));
  return Tensor(std::make_shared<CompressedImpl>(Layout::kCsc, index_tensor(ccol, DType::kI32, t.device()),
                                                 index_tensor(gather(rows, order), DType::kI32, t.device()), values,
                                                 t.shape(), new_pattern_version()));
}

Tensor compressed_to_coo(const Tensor& t) {
  const CompressedImpl& c = csr_impl(t, "compressed_to_coo");
  std::vector<int64_t> outer = expand(host_i64(c.pointers())), inner = host_i64(c.indices());
  const int64_t nnz = c.nnz();
  if (c.is_csr()) {
    std::vector<int64_t> idx(outer);
    idx.insert(idx.end(), inner.begin(), inner.end());
    return Tensor(std::make_shared<CooImpl>(index_tensor(idx, {2, nnz}, DType::kI64, t.device()), c.values(), t.shape(),
                                            true, new_pattern_version()));
  }
  // CSC entries run column by column: a stable sort by row makes them row-major.
  std::vector<int64_t> row_ptr;
  std::vector<int64_t> order = counting_sort(inner, t.size(0), &row_ptr);
  std::vector<int64_t> idx = gather(inner, order), cols = gather(outer, order);
  idx.insert(idx.end(), cols.begin(), cols.end());
  Tensor values = index_select(c.values(), 0, index_tensor(order, DType::kI64, t.device()));
  return Tensor(std::make_shared<CooImpl>(index_tensor(idx, {2, nnz}, DType::kI64, t.device()), values, t.shape(), true,
                                          new_pattern_version()));
}

namespace {
// CSR <-> CSC of the same matrix: entries sorted stably by their inner index.
Tensor recompress(const Tensor& t, Layout from, std::string_view op) {
  const CompressedImpl& c = csr_impl(t, op);
  COPPICE_CHECK(c.layout() == from, op, ": expected a ", layout_name(from), " tensor, got '", t.format(), "'");
  std::vector<int64_t> outer = expand(host_i64(c.pointers())), inner = host_i64(c.indices()), pointers;
  std::vector<int64_t> order = counting_sort(inner, c.uncompressed_size(), &pointers);
  Tensor values = index_select(c.values(), 0, index_tensor(order, DType::kI64, t.device()));
  return Tensor(std::make_shared<CompressedImpl>(
      from == Layout::kCsr ? Layout::kCsc : Layout::kCsr, index_tensor(pointers, DType::kI32, t.device()),
      index_tensor(gather(outer, order), DType::kI32, t.device()), values, t.shape(), new_pattern_version()));
}
}  // namespace

Tensor csr_to_csc(const Tensor& csr) { return recompress(csr, Layout::kCsr, "csr_to_csc"); }
Tensor csc_to_csr(const Tensor& csc) { return recompress(csc, Layout::kCsc, "csc_to_csr"); }

Tensor dense_to_bsr(const Tensor& dense, int64_t block_rows, int64_t block_cols) {
  constexpr std::string_view op = "dense_to_bsr";
  sparse_detail::check_values(dense, op);
  COPPICE_CHECK(dense.dim() == 2, op, ": needs a 2-D tensor, got shape ", shape_to_string(dense.shape()));
  return sparse_detail::mask_to_bsr(dense, ne(dense, 0.0), block_rows, block_cols, op);
}

Tensor bsr_to_dense(const Tensor& bsr) { return bsr_impl(bsr, "bsr_to_dense").to_dense(); }

Tensor coo_to_bsr(const Tensor& t, int64_t bh, int64_t bw) {
  constexpr std::string_view op = "coo_to_bsr";
  Tensor coo = coalesce(t);
  const CooImpl& c = coo_impl(coo, op);
  COPPICE_CHECK(t.dim() == 2, op, ": needs a 2-D tensor, got shape ", shape_to_string(t.shape()));
  check_block_shape(t.shape(), bh, bw, op);
  const int64_t nnz = c.nnz(), nbr = t.size(0) / bh, nbc = t.size(1) / bw;
  std::vector<int64_t> idx = host_i64(c.indices());
  std::vector<int64_t> keys(static_cast<size_t>(nnz));
  for (int64_t k = 0; k < nnz; ++k) {
    const int64_t r = idx[static_cast<size_t>(k)], col = idx[static_cast<size_t>(nnz + k)];
    keys[static_cast<size_t>(k)] = (r / bh) * nbc + col / bw;
  }
  std::vector<int64_t> blocks(keys);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  const int64_t nblocks = static_cast<int64_t>(blocks.size());
  check_i32_range(nblocks, op);
  std::vector<int64_t> flat(static_cast<size_t>(nnz));
  for (int64_t k = 0; k < nnz; ++k) {
    const int64_t b = std::lower_bound(blocks.begin(), blocks.end(), keys[static_cast<size_t>(k)]) - blocks.begin();
    const int64_t r = idx[static_cast<size_t>(k)], col = idx[static_cast<size_t>(nnz + k)];
    flat[static_cast<size_t>(k)] = b * bh * bw + (r % bh) * bw + col % bw;
  }
  std::vector<int64_t> crow(static_cast<size_t>(nbr) + 1, 0), cols(static_cast<size_t>(nblocks));
  for (int64_t b = 0; b < nblocks; ++b) {
    ++crow[static_cast<size_t>(blocks[static_cast<size_t>(b)] / nbc) + 1];
    cols[static_cast<size_t>(b)] = blocks[static_cast<size_t>(b)] % nbc;
  }
  for (size_t i = 1; i < crow.size(); ++i) crow[i] += crow[i - 1];
  Tensor values =
      sparse_detail::scatter_to_dense(index_tensor(flat, DType::kI64, t.device()), c.values(), {nblocks, bh, bw});
  return Tensor(std::make_shared<BsrImpl>(index_tensor(crow, DType::kI32, t.device()),
                                          index_tensor(cols, DType::kI32, t.device()), values, t.shape(),
                                          new_pattern_version()));
}

Tensor bsr_to_coo(const Tensor& t) {
  const BsrImpl& s = bsr_impl(t, "bsr_to_coo");
  const int64_t bh = s.block_rows(), bw = s.block_cols(), nbr = s.block_row_count(), cols = t.size(1);
  std::vector<int64_t> crow = host_i64(s.crow_indices()), bcol = host_i64(s.col_indices());
  std::vector<int64_t> flat, source;
  flat.reserve(static_cast<size_t>(s.nnz()));
  source.reserve(static_cast<size_t>(s.nnz()));
  // Row-major: for each row, the blocks of its block row in order, each block's row slice.
  for (int64_t br = 0; br < nbr; ++br) {
    for (int64_t i = 0; i < bh; ++i) {
      const int64_t r = br * bh + i;
      for (int64_t k = crow[static_cast<size_t>(br)]; k < crow[static_cast<size_t>(br) + 1]; ++k) {
        for (int64_t j = 0; j < bw; ++j) {
          flat.push_back(r * cols + bcol[static_cast<size_t>(k)] * bw + j);
          source.push_back((k * bh + i) * bw + j);
        }
      }
    }
  }
  Tensor values = index_select(s.values().reshape({-1}), 0, index_tensor(source, DType::kI64, t.device()));
  return make_coo(std::move(flat), values, t.shape());
}

Tensor to_format(const Tensor& t, std::string_view format, const FormatOptions& options) {
  constexpr std::string_view op = "to_format";
  const FormatSpec& spec = format_spec(format, op);
  if (spec.layout == Layout::kDense) return to_dense(t);
  check_target_shape(t, spec, op);
  if (t.is_dense()) {
    sparse_detail::check_values(t, op);
    return from_mask(t, ne(t, 0.0), spec, options, op);
  }
  const FormatOptions resolved = resolve_options(spec, t, options, op);
  const bool same_options = options_of(t) == resolved;
  if (t.format() == format && same_options) return t;
  if (has_block_shape(spec.options)) check_block_shape(t.shape(), resolved.block_rows, resolved.block_cols, op);
  for (const DirectPath& path : kDirectPaths) {
    if (t.layout() == path.from && spec.layout == path.to && same_options) return path.convert(t);
  }
  return from_coo(to_coo(t), spec, resolved, op);
}

Tensor sparse_from_mask(const Tensor& dense, const Tensor& mask, std::string_view format,
                        const FormatOptions& options) {
  constexpr std::string_view op = "sparse_from_mask";
  const FormatSpec& spec = format_spec(format, op);
  check_mask(dense, mask, op);
  return from_mask(dense, mask, spec, options, op);
}

Tensor sparse_from_threshold(const Tensor& dense, double threshold, std::string_view format,
                             const FormatOptions& options) {
  constexpr std::string_view op = "sparse_from_threshold";
  const FormatSpec& spec = format_spec(format, op);
  sparse_detail::check_values(dense, op);
  return from_mask(dense, gt(abs(dense), threshold), spec, options, op);
}

Tensor sparse_transpose(const Tensor& t) {
  constexpr std::string_view op = "sparse_transpose";
  COPPICE_CHECK(t.dim() == 2, op, ": needs a 2-D tensor, got shape ", shape_to_string(t.shape()));
  const Shape shape{t.size(1), t.size(0)};
  switch (t.layout()) {
    case Layout::kDense: return t.t();
    case Layout::kCsr:
    case Layout::kCsc: return transpose_compressed(t);
    case Layout::kCoo: {
      const CooImpl& c = coo_impl(t, op);
      Tensor swapped = index_select(c.indices(), 0, index_tensor({1, 0}, DType::kI64, t.device()));
      return Tensor(std::make_shared<CooImpl>(swapped, c.values(), shape, c.nnz() <= 1, new_pattern_version()));
    }
    case Layout::kBsr: {
      const BsrImpl& b = bsr_impl(t, op);
      return coo_to_bsr(sparse_transpose(bsr_to_coo(t)), b.block_cols(), b.block_rows());
    }
    case Layout::kBlockedEll: return bsr_to_blocked_ell(sparse_transpose(blocked_ell_to_bsr(t)));
    case Layout::kNm: {
      const NmImpl& s = nm_impl(t, op);
      Tensor dense = to_dense(t).t().contiguous();
      return sparse_detail::nm_from_mask(dense, ne(dense, 0.0), s.n(), s.m(), op);
    }
    case Layout::kMasked: {
      const MaskedImpl& s = masked_impl(t, op);
      return Tensor(std::make_shared<MaskedImpl>(s.values().t().contiguous(), s.mask().t().contiguous(), s.nnz(),
                                                 new_pattern_version()));
    }
    case Layout::kCustom: break;
  }
  fail(op, ": format '", t.format(), "' has no transpose; convert it first");
}

}  // namespace coppice
