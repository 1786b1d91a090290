// Pattern views and rebuilding a parameter on a new pattern (mask_change.h).
#include "optim/mask_change.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

bool contains(const std::vector<int64_t>& sorted, int64_t x) {
  return std::binary_search(sorted.begin(), sorted.end(), x);
}

void check_ascending(const std::vector<int64_t>& v, int64_t numel, std::string_view what, std::string_view op) {
  for (size_t i = 0; i < v.size(); ++i) {
    COPPICE_CHECK(v[i] >= 0 && v[i] < numel, op, ": ", what, " position ", v[i], " is outside [0, ", numel, ")");
    COPPICE_CHECK(i == 0 || v[i - 1] < v[i], op, ": ", what, " positions must be strictly ascending (", v[i - 1],
                  " then ", v[i], ")");
  }
}

}  // namespace

PatternView pattern_view(const Tensor& param, std::string_view op) {
  COPPICE_CHECK(param.defined(), op, ": the parameter is undefined");
  const Layout layout = param.layout();
  COPPICE_CHECK(layout == Layout::kCoo || layout == Layout::kCsr || layout == Layout::kCsc ||
                    layout == Layout::kMasked || layout == Layout::kBsr || layout == Layout::kBlockedEll,
                op, ": mask updates need a sparse parameter in coo, csr, csc, masked, bsr or blocked_ell, got ",
                param.format(),
                layout == Layout::kDense ? " (store the weight as \"masked\" to prune a dense one)" : "");
  PatternView view;
  view.shape = param.shape();
  if (layout == Layout::kBsr) {
    view.block_rows = bsr_impl(param, op).block_rows();
    view.block_cols = bsr_impl(param, op).block_cols();
  } else if (layout == Layout::kBlockedEll) {
    const auto* ell = param.impl_as<BlockedEllImpl>();
    COPPICE_CHECK(ell != nullptr, op, ": a blocked_ell parameter without its impl");
    view.block_rows = view.block_cols = ell->block_size();
  }
  const std::vector<int64_t> pos = stored_positions(param);
  view.value_slots = static_cast<int64_t>(pos.size());
  std::vector<std::pair<int64_t, int64_t>> entries;
  entries.reserve(pos.size());
  for (size_t s = 0; s < pos.size(); ++s) {
    if (pos[s] >= 0) entries.emplace_back(pos[s], static_cast<int64_t>(s));
  }
  std::sort(entries.begin(), entries.end());
  view.positions.reserve(entries.size());
  view.slots.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    COPPICE_CHECK(i == 0 || entries[i - 1].first != entries[i].first, op, ": position ", entries[i].first,
                  " is stored twice (coalesce the COO parameter first)");
    view.positions.push_back(entries[i].first);
    view.slots.push_back(entries[i].second);
  }
  return view;
}

PatternView block_view(const PatternView& e) {
  COPPICE_CHECK(e.shape.size() == 2, "block_view: needs a 2-D pattern, got ", shape_to_string(e.shape));
  PatternView b;
  b.shape = {e.shape[0] / e.block_rows, e.shape[1] / e.block_cols};
  const int64_t cols = e.shape[1], grid_cols = b.shape[1];
  for (int64_t p : e.positions) {
    const int64_t block = (p / cols / e.block_rows) * grid_cols + (p % cols) / e.block_cols;
    b.positions.push_back(block);
  }
  std::sort(b.positions.begin(), b.positions.end());
  b.positions.erase(std::unique(b.positions.begin(), b.positions.end()), b.positions.end());
  b.slots.resize(b.positions.size());
  std::iota(b.slots.begin(), b.slots.end(), 0);
  b.value_slots = b.nnz();
  return b;
}

std::vector<int64_t> expand_blocks(const std::vector<int64_t>& blocks, const PatternView& e) {
  const int64_t cols = e.shape[1], grid_cols = cols / e.block_cols;
  std::vector<int64_t> out;
  out.reserve(blocks.size() * static_cast<size_t>(e.block_rows * e.block_cols));
  for (int64_t b : blocks) {
    const int64_t r0 = (b / grid_cols) * e.block_rows, c0 = (b % grid_cols) * e.block_cols;
    for (int64_t r = 0; r < e.block_rows; ++r) {
      for (int64_t c = 0; c < e.block_cols; ++c) out.push_back((r0 + r) * cols + c0 + c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Tensor mask_from_positions(const Shape& shape, const std::vector<int64_t>& positions) {
  Tensor mask = Tensor::empty(shape, TensorOptions(DType::kBool, Device::cpu()));
  bool* m = mask.data<bool>();
  std::fill(m, m + mask.numel(), false);
  for (int64_t p : positions) m[p] = true;
  return mask;
}

MaskChange rebuild_pattern(const Tensor& param, const PatternView& old, const std::vector<int64_t>& kept,
                           const std::vector<int64_t>& grown, const RegrowInit& init, std::string_view op) {
  const int64_t numel = old.numel();
  check_ascending(kept, numel, "kept", op);
  check_ascending(grown, numel, "grown", op);
  for (int64_t p : kept) COPPICE_CHECK(contains(old.positions, p), op, ": kept position ", p, " is not stored");
  for (int64_t p : grown) COPPICE_CHECK(!contains(kept, p), op, ": grown position ", p, " is also kept");

  MaskChange change;
  change.grown = grown;
  std::set_difference(old.positions.begin(), old.positions.end(), kept.begin(), kept.end(),
                      std::back_inserter(change.dropped));
  std::vector<int64_t> next;
  next.reserve(kept.size() + grown.size());
  std::merge(kept.begin(), kept.end(), grown.begin(), grown.end(), std::back_inserter(next));

  // The new pattern, in the parameter's own format, then its slots filled.
  const Tensor mask = mask_from_positions(old.shape, next).to(param.device());
  const bool block_format = param.layout() == Layout::kBsr || param.layout() == Layout::kBlockedEll;
  const FormatOptions options = block_format ? FormatOptions::block(old.block_rows, old.block_cols) : FormatOptions();
  const Tensor pattern = sparse_from_mask(zeros(old.shape, param.options()), mask, param.format(), options);
  const std::vector<int64_t> new_pos = stored_positions(pattern);

  const Tensor old_values = values(param).reshape({-1});
  const int64_t n_old = old_values.numel();
  const int64_t n_grown = static_cast<int64_t>(grown.size());
  Tensor grown_values = zeros({n_grown + 1}, param.options());  // the last one is the zero of padding slots
  if (init && n_grown > 0) {
    Tensor v = init(param, grown);
    COPPICE_CHECK(v.defined() && v.numel() == n_grown, op, ": the regrow init returned ", v.defined() ? v.numel() : 0,
                  " values for ", n_grown, " grown positions");
    v = to_dense(v).reshape({-1}).to(param.dtype()).to(param.device());
    grown_values = cat({v, zeros({1}, param.options())});
  }

  std::vector<int64_t> idx(new_pos.size()), keep_from(new_pos.size());
  for (size_t s = 0; s < new_pos.size(); ++s) {
    const int64_t p = new_pos[s];
    if (p < 0) {
      idx[s] = n_old + n_grown;
      keep_from[s] = -1;
      continue;
    }
    auto it = std::lower_bound(old.positions.begin(), old.positions.end(), p);
    if (it != old.positions.end() && *it == p && contains(kept, p)) {
      const int64_t slot = old.slots[static_cast<size_t>(it - old.positions.begin())];
      idx[s] = slot;
      keep_from[s] = slot;
    } else {
      auto g = std::lower_bound(grown.begin(), grown.end(), p);
      COPPICE_CHECK(g != grown.end() && *g == p, op, ": the ", param.format(), " pattern stores position ", p,
                    ", which is neither kept nor grown (block formats keep and grow whole blocks)");
      idx[s] = n_old + (g - grown.begin());
      keep_from[s] = -1;
    }
  }
  const Tensor src = n_old > 0 ? cat({old_values, grown_values}) : grown_values;
  const Tensor index = from_vector(idx).to(param.device());
  const Tensor new_values = index_select(src, 0, index).reshape(values(pattern).shape());
  change.param = with_values(pattern, new_values);
  change.keep_from = from_vector(keep_from);
  return change;
}

uint64_t name_purpose(std::string_view name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t pattern_checksum(const Tensor& param) {
  const PatternView view = pattern_view(param, "pattern_checksum");
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (int64_t d : view.shape) mix(static_cast<uint64_t>(d));
  for (int64_t p : view.positions) mix(static_cast<uint64_t>(p));
  return h;
}

}  // namespace coppice
