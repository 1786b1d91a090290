// Prune criteria and one-shot pruning (prune.h).
#include "optim/prune.h"

#include <algorithm>
#include <cmath>

#include "optim/finite_check.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/ops.h"

namespace coppice {

const char* prune_criterion_name(PruneCriterion c) {
  switch (c) {
    case PruneCriterion::kMagnitude: return "magnitude";
    case PruneCriterion::kMovement: return "movement";
    default: return "custom";
  }
}

PruneCriterion parse_prune_criterion(std::string_view name) {
  if (name == "magnitude") return PruneCriterion::kMagnitude;
  if (name == "movement") return PruneCriterion::kMovement;
  if (name == "custom") return PruneCriterion::kCustom;
  fail("prune criterion: unknown name '", name, "'; known: custom, magnitude, movement");
}

namespace {

// The keys of the stored entries, in ascending position order, on the keys' device.
Tensor compact_keys(const Tensor& keys, const PatternView& view, std::string_view op) {
  COPPICE_CHECK(keys.defined(), op, ": the prune keys are undefined");
  COPPICE_CHECK(is_floating(keys.dtype()), op, ": prune keys must be floating, got ", dtype_name(keys.dtype()));
  const Tensor k = to_dense(keys).contiguous().reshape({-1});
  if (keys.shape() == view.shape) { return index_select(k, 0, from_vector(view.positions).to(k.device())); }
  COPPICE_CHECK(k.numel() == view.value_slots, op, ": prune keys of shape ", shape_to_string(keys.shape()),
                " are neither the parameter's shape ", shape_to_string(view.shape), " nor one per stored slot (",
                view.value_slots, ")");
  return index_select(k, 0, from_vector(view.slots).to(k.device()));
}

}  // namespace

std::vector<int64_t> select_survivors(const Tensor& keys, const PatternView& view, int64_t keep, bool magnitude,
                                      std::string_view op) {
  COPPICE_CHECK(keep >= 0 && keep <= view.nnz(), op, ": cannot keep ", keep, " of ", view.nnz(), " stored entries");
  if (keep == view.nnz()) return view.positions;
  if (keep == 0) return {};
  const Tensor compact = compact_keys(keys, view, op);
  check_finite_scores(compact, op, "the prune keys");
  const std::vector<int> chosen = sparsify::topk_mask(compact, keep, magnitude, op).to_vector<int>();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(keep));
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (chosen[i]) out.push_back(view.positions[i]);
  }
  return out;
}

void MovementScores::accumulate(const Tensor& param, const Tensor& grad) {
  constexpr std::string_view op = "MovementScores::accumulate";
  COPPICE_CHECK(param.defined() && grad.defined(), op, ": parameter or gradient undefined");
  COPPICE_CHECK(is_floating(param.dtype()) && is_floating(grad.dtype()), op,
                ": needs floating-point weight and gradient");
  const Tensor w = values(param).reshape({-1});
  Tensor g;
  if (grad.is_dense() && grad.shape() == param.shape() && param.is_sparse()) {
    std::vector<int64_t> idx(static_cast<size_t>(w.numel()), 0);
    const PatternView view = pattern_view(param, op);
    for (size_t i = 0; i < view.slots.size(); ++i) idx[static_cast<size_t>(view.slots[i])] = view.positions[i];
    g = index_select(grad.contiguous().reshape({-1}), 0, from_vector(idx).to(grad.device()));
  } else {
    COPPICE_CHECK(grad.shape() == param.shape() && grad.format() == param.format() && values(grad).numel() == w.numel(),
                  op, ": gradient (", grad.format(), ", ", shape_to_string(grad.shape()), ", ", nnz(grad),
                  " stored) does not match the parameter's pattern (", param.format(), ", ",
                  shape_to_string(param.shape()), ", ", nnz(param), " stored)");
    g = values(grad).reshape({-1});
  }
  const DType dtype = param.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  if (!scores_.defined()) {
    scores_ = zeros({w.numel()}, TensorOptions(dtype, w.device()));
  } else {
    COPPICE_CHECK(scores_.numel() == w.numel(), op, ": the scores hold ", scores_.numel(),
                  " entries but the parameter stores ", w.numel(), " (remap() after a mask change)");
  }
  scores_ = sub(scores_, mul(w.to(dtype), g.to(dtype).to(w.device())));
  version_ = coppice::pattern_version(param);
  ++steps_;
}

void MovementScores::remap(const Tensor& keep_from, uint64_t new_version) {
  if (!scores_.defined()) return;
  std::vector<int64_t> idx = keep_from.to(DType::kI64).to_vector<int64_t>();
  const int64_t zero_slot = scores_.numel();
  for (int64_t& i : idx) {
    COPPICE_CHECK(i >= -1 && i < zero_slot, "MovementScores::remap: old slot ", i, " is outside [-1, ", zero_slot, ")");
    if (i < 0) i = zero_slot;
  }
  const Tensor src = cat({scores_, zeros({1}, scores_.options())});
  scores_ = index_select(src, 0, from_vector(idx).to(scores_.device()));
  version_ = new_version;
}

void MovementScores::load(const Tensor& scores, int64_t steps) {
  COPPICE_CHECK(scores.defined() && scores.is_dense() && scores.dim() == 1 && is_floating(scores.dtype()),
                "MovementScores::load: needs 1-D dense floating scores");
  scores_ = scores;
  steps_ = steps;
  version_ = 0;
}

MaskChange prune_to_density(const Tensor& param, double density, const Tensor& keys, bool magnitude) {
  constexpr std::string_view op = "prune_to_density";
  COPPICE_CHECK(density >= 0.0 && density <= 1.0, op, ": density must be in [0, 1], got ", density);
  const PatternView elements = pattern_view(param, op);
  const PatternView units = elements.blocked() ? block_view(elements) : elements;
  const int64_t target = std::llround(density * static_cast<double>(units.numel()));
  const int64_t keep = std::min(target, units.nnz());
  if (keep == units.nnz()) {
    MaskChange none;
    none.param = param;
    return none;
  }
  const std::vector<int64_t> kept = select_survivors(keys, units, keep, magnitude, op);
  return rebuild_pattern(param, elements, elements.blocked() ? expand_blocks(kept, elements) : kept, {}, RegrowInit(),
                         op);
}

namespace {

// A BSR weight by its blocks: the same survivors as the entry walk of
// prune_to_density(param, density, keys, false) over the dense weight's
// block scores (the same sums, ties to the lower block alike), without
// visiting an entry on the host.
MaskChange prune_bsr_blocks(const Tensor& param, double density, std::string_view op) {
  COPPICE_CHECK(density >= 0.0 && density <= 1.0, op, ": density must be in [0, 1], got ", density);
  const PatternView blocks = bsr_block_view(param, op);
  const int64_t keep = std::min<int64_t>(std::llround(density * static_cast<double>(blocks.numel())), blocks.nnz());
  if (keep == blocks.nnz()) {
    MaskChange none;
    none.param = param;
    return none;
  }
  const std::vector<int64_t> kept = select_survivors(stored_block_scores(param, op), blocks, keep, false, op);
  return rebuild_bsr_blocks(param, blocks, kept, {}, RegrowInit(), op);
}

}  // namespace

Tensor stored_block_scores(const Tensor& param, std::string_view op) {
  const Tensor v = values(param);  // [nblocks, bh, bw]
  const int64_t bh = v.size(1), bw = v.size(2);
  return sparsify::block_scores(v.reshape({v.size(0) * bh, bw}), bh, bw, false, op).reshape({-1});
}

MaskChange prune_to_density(const Tensor& param, double density) {
  if (is_blocked_bsr(param)) return prune_bsr_blocks(param, density, "prune_to_density");
  const PatternView elements = pattern_view(param, "prune_to_density");
  if (elements.blocked()) {
    const Tensor scores = sparsify::block_scores(to_dense(param).contiguous(), elements.block_rows, elements.block_cols,
                                                 false, "prune_to_density");
    return prune_to_density(param, density, scores, false);
  }
  return prune_to_density(param, density, values(param), true);
}

}  // namespace coppice
