// Pattern views and rebuilding a parameter on a new pattern (mask_change.h).
#include "optim/mask_change.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <tuple>
#include <utility>

#include "sparse/bsr.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/nm.h"
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

// kept must be a subset of the old positions, grown disjoint from kept.
void check_kept_grown(const std::vector<int64_t>& old, const std::vector<int64_t>& kept,
                      const std::vector<int64_t>& grown, int64_t numel, std::string_view op) {
  check_ascending(kept, numel, "kept", op);
  check_ascending(grown, numel, "grown", op);
  for (int64_t p : kept) COPPICE_CHECK(contains(old, p), op, ": kept position ", p, " is not stored");
  for (int64_t p : grown) COPPICE_CHECK(!contains(kept, p), op, ": grown position ", p, " is also kept");
}

// The regrow init's values for `positions` (flat, ascending), one each, flat,
// in the parameter's dtype and on its device; zeros without an init.
Tensor regrown_values(const Tensor& param, const std::vector<int64_t>& positions, const RegrowInit& init,
                      std::string_view op) {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (!init || n == 0) return zeros({n}, param.options());
  const Tensor v = init(param, positions);
  COPPICE_CHECK(v.defined() && v.numel() == n, op, ": the regrow init returned ", v.defined() ? v.numel() : 0,
                " values for ", n, " grown positions");
  return to_dense(v).reshape({-1}).to(param.dtype()).to(param.device());
}

}  // namespace

PatternView pattern_view(const Tensor& param, std::string_view op) {
  COPPICE_CHECK(param.defined(), op, ": the parameter is undefined");
  // Formats whose stored positions are known (sparse/'s own, a user's that gives them) and whose unit of
  // change is the format's to say (mask_update_unit).
  const FormatSpec* spec = find_format(param.format());
  COPPICE_CHECK(spec != nullptr && knows_stored_positions(*spec), op,
                ": mask updates need a sparse parameter whose stored positions are known (one of sparse/'s formats (",
                str_join(builtin_sparse_format_names(), ", "), ") or a format declared by its levels), got ",
                param.format(), param.is_dense() ? " (store the weight as \"masked\" to prune a dense one)" : "");
  PatternView view;
  view.shape = param.shape();
  std::tie(view.block_rows, view.block_cols) = mask_update_unit(param);
  const std::vector<int64_t> pos = stored_positions(param);
  view.value_slots = static_cast<int64_t>(pos.size());
  std::vector<std::pair<int64_t, int64_t>> entries;
  entries.reserve(pos.size());
  for (size_t s = 0; s < pos.size(); ++s) {
    if (pos[s] >= 0) entries.emplace_back(pos[s], static_cast<int64_t>(s));
  }
  // Most formats store in position order already (CSR, n:m): a check is cheaper than a sort.
  if (!std::is_sorted(entries.begin(), entries.end())) std::sort(entries.begin(), entries.end());
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
  // Ascending without a sort: the blocks of one block row (a run of
  // `blocks`), row by row of entries, each row left to right.
  for (size_t first = 0; first < blocks.size();) {
    size_t last = first;
    while (last < blocks.size() && blocks[last] / grid_cols == blocks[first] / grid_cols) ++last;
    const int64_t r0 = (blocks[first] / grid_cols) * e.block_rows;
    for (int64_t r = r0; r < r0 + e.block_rows; ++r) {
      for (size_t i = first; i < last; ++i) {
        const int64_t c0 = (blocks[i] % grid_cols) * e.block_cols;
        for (int64_t c = c0; c < c0 + e.block_cols; ++c) out.push_back(r * cols + c);
      }
    }
    first = last;
  }
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
  check_kept_grown(old.positions, kept, grown, old.numel(), op);

  MaskChange change;
  change.grown = grown;
  std::set_difference(old.positions.begin(), old.positions.end(), kept.begin(), kept.end(),
                      std::back_inserter(change.dropped));
  std::vector<int64_t> next;
  next.reserve(kept.size() + grown.size());
  std::merge(kept.begin(), kept.end(), grown.begin(), grown.end(), std::back_inserter(next));

  // The new pattern, in the parameter's own format, then its slots filled.
  const Tensor mask = mask_from_positions(old.shape, next).to(param.device());
  const FormatSpec& spec = format_spec(param.format(), op);
  const FormatOptions options = spec.options_of ? spec.options_of(param) : FormatOptions();
  const Tensor pattern = sparse_from_mask(zeros(old.shape, param.options()), mask, param.format(), options);
  const std::vector<int64_t> new_pos = stored_positions(pattern);

  const Tensor old_values = values(param).reshape({-1});
  const int64_t n_old = old_values.numel();
  const int64_t n_grown = static_cast<int64_t>(grown.size());
  // The last one is the zero of padding slots.
  const Tensor grown_values = cat({regrown_values(param, grown, init, op), zeros({1}, param.options())});

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

PatternView bsr_block_view(const Tensor& param, std::string_view op) {
  const BsrImpl& b = bsr_impl(param, op);
  PatternView view;
  view.shape = {b.block_row_count(), b.block_col_count()};
  const std::vector<int> crow = b.crow_indices().to_vector<int>();
  const std::vector<int> col = b.col_indices().to_vector<int>();
  view.positions.reserve(col.size());
  for (int64_t r = 0; r + 1 < static_cast<int64_t>(crow.size()); ++r) {
    for (int s = crow[static_cast<size_t>(r)]; s < crow[static_cast<size_t>(r + 1)]; ++s) {
      view.positions.push_back(r * view.shape[1] + col[static_cast<size_t>(s)]);
    }
  }
  // Block columns rise within a block row (sparse/bsr.h), so storage order is position order.
  view.slots.resize(view.positions.size());
  std::iota(view.slots.begin(), view.slots.end(), 0);
  view.value_slots = view.nnz();
  return view;
}

bool is_blocked_bsr(const Tensor& param) {
  if (param.layout() != Layout::kBsr) return false;
  const BsrImpl& b = bsr_impl(param, "mask update");
  return b.block_rows() > 1 || b.block_cols() > 1;
}

MaskChange rebuild_bsr_blocks(const Tensor& param, const PatternView& blocks, const std::vector<int64_t>& kept,
                              const std::vector<int64_t>& grown, const RegrowInit& init, std::string_view op) {
  const BsrImpl& b = bsr_impl(param, op);
  check_kept_grown(blocks.positions, kept, grown, blocks.numel(), op);
  const int64_t bh = b.block_rows(), bw = b.block_cols(), area = bh * bw;
  const int64_t grid_rows = b.block_row_count(), grid_cols = b.block_col_count(), cols = param.size(1);
  PatternView elements;  // what expand_blocks needs of the entries' view
  elements.shape = param.shape();
  elements.block_rows = bh;
  elements.block_cols = bw;

  std::vector<int64_t> dropped_blocks, next;
  std::set_difference(blocks.positions.begin(), blocks.positions.end(), kept.begin(), kept.end(),
                      std::back_inserter(dropped_blocks));
  std::merge(kept.begin(), kept.end(), grown.begin(), grown.end(), std::back_inserter(next));
  MaskChange change;
  change.dropped = dropped_blocks;
  change.grown = grown;

  // The new block indices.
  std::vector<int32_t> crow(static_cast<size_t>(grid_rows + 1), 0), col(next.size());
  for (size_t i = 0; i < next.size(); ++i) {
    ++crow[static_cast<size_t>(next[i] / grid_cols + 1)];
    col[i] = static_cast<int32_t>(next[i] % grid_cols);
  }
  for (size_t r = 1; r < crow.size(); ++r) crow[r] += crow[r - 1];

  // Values: the old blocks, then the grown ones, picked block by block.
  const int64_t n_old = b.nblocks(), n_grown = static_cast<int64_t>(grown.size());
  Tensor grown_values = zeros({n_grown, area}, param.options());
  if (init && n_grown > 0) {
    const std::vector<int64_t> grown_entries = expand_blocks(grown, elements);
    const Tensor v = regrown_values(param, grown_entries, init, op);
    // init's values follow the flat positions; blocks hold them block by block.
    std::vector<int64_t> from(static_cast<size_t>(n_grown * area));
    for (size_t j = 0; j < grown_entries.size(); ++j) {
      const int64_t p = grown_entries[j], r = p / cols, c = p % cols;
      const int64_t g = std::lower_bound(grown.begin(), grown.end(), (r / bh) * grid_cols + c / bw) - grown.begin();
      from[static_cast<size_t>(g * area + (r % bh) * bw + c % bw)] = static_cast<int64_t>(j);
    }
    grown_values = index_select(v, 0, from_vector(from).to(param.device())).reshape({n_grown, area});
  }
  // Per new block: where its values come from (an old block, or n_old + its
  // index among the grown ones) and the old block it keeps (-1: grown).
  std::vector<int64_t> idx(next.size()), keep_block(next.size());
  for (size_t s = 0; s < next.size(); ++s) {
    auto g = std::lower_bound(grown.begin(), grown.end(), next[s]);
    const bool is_grown = g != grown.end() && *g == next[s];
    // A kept block's slot is its index among the old positions (bsr_block_view's slots are 0, 1, ...).
    const int64_t old_slot = is_grown ? -1
                                      : std::lower_bound(blocks.positions.begin(), blocks.positions.end(), next[s]) -
                                            blocks.positions.begin();
    idx[s] = is_grown ? n_old + (g - grown.begin()) : blocks.slots[static_cast<size_t>(old_slot)];
    keep_block[s] = is_grown ? -1 : idx[s];
  }
  const Device device = param.device();
  const Tensor old_values = values(param).reshape({n_old, area});
  const Tensor src = n_old == 0 ? grown_values : n_grown == 0 ? old_values : cat({old_values, grown_values});
  const int64_t n_new = static_cast<int64_t>(next.size());
  const Tensor new_values = n_new == 0
                                ? zeros({0, bh, bw}, param.options())
                                : index_select(src, 0, from_vector(idx, {n_new}).to(device)).reshape({n_new, bh, bw});
  // Shapes given: from_vector makes one value a 0-d tensor, and a weight pruned to one block has one.
  change.param = sparse_bsr(from_vector(crow, {grid_rows + 1}).to(device), from_vector(col, {n_new}).to(device),
                            new_values, param.shape());
  // keep_from entry by entry, formed on the device from the blocks' (a 4096² layer has millions of entries).
  const Tensor kb = from_vector(keep_block, {n_new, 1}).to(device);
  const Tensor entries = add(mul(kb, static_cast<double>(area)), arange(area, TensorOptions(DType::kI64, device)));
  change.keep_from = where(lt(kb, 0.0), full_like(entries, -1.0), entries).reshape({-1}).contiguous();
  return change;
}

MaskChange rebuild_nm(const Tensor& param, const PatternView& old, const std::vector<int64_t>& kept,
                      const std::vector<int64_t>& grown, const RegrowInit& init, std::string_view op) {
  const NmImpl& nm = nm_impl(param, op);
  const int64_t n = nm.n(), m = nm.m();
  COPPICE_CHECK(kept.size() + grown.size() == old.positions.size(), op, ": ", kept.size(), " kept and ", grown.size(),
                " grown entries for an n:m pattern of ", old.positions.size());
  MaskChange change;
  change.grown = grown;
  std::set_difference(old.positions.begin(), old.positions.end(), kept.begin(), kept.end(),
                      std::back_inserter(change.dropped));
  // New slot s holds the s-th position of kept and grown merged; its source
  // is an old slot (kept: walked in step with the old positions) or a grown
  // value after all of them.
  const int64_t n_old = old.value_slots, n_grown = static_cast<int64_t>(grown.size());
  const size_t slots = old.positions.size();
  std::vector<int64_t> idx(slots), keep_from(slots);
  std::vector<uint8_t> in_group(slots);
  size_t k = 0, g = 0, o = 0;
  for (size_t s = 0; s < slots; ++s) {
    const bool from_kept = g == grown.size() || (k < kept.size() && kept[k] < grown[g]);
    const int64_t p = from_kept ? kept[k] : grown[g];
    COPPICE_CHECK(static_cast<int64_t>(s) / n == p / m, op, ": group ", p / m, " would not keep exactly ", n,
                  " entries");
    in_group[s] = static_cast<uint8_t>(p % m);
    if (from_kept) {
      while (o < slots && old.positions[o] < p) ++o;
      COPPICE_CHECK(o < slots && old.positions[o] == p, op, ": kept position ", p, " is not stored");
      idx[s] = keep_from[s] = old.slots[o];
      ++k;
    } else {
      idx[s] = n_old + static_cast<int64_t>(g);
      keep_from[s] = -1;
      ++g;
    }
  }
  const Tensor old_values = values(param).reshape({-1});
  const Tensor src = n_grown > 0 ? cat({old_values, regrown_values(param, grown, init, op)}) : old_values;
  const Tensor new_values = index_select(src, 0, from_vector(idx).to(param.device())).reshape(values(param).shape());
  Tensor indices = Tensor::empty(nm.indices().shape(), TensorOptions(DType::kU8, Device::cpu()));
  std::copy(in_group.begin(), in_group.end(), indices.data<uint8_t>());
  change.param = sparse_nm(new_values, indices.to(param.device()), param.shape(), n, m);
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
