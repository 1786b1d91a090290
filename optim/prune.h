// Prune criteria: which stored entries of a sparse parameter survive a mask
// update (mask_updater.h) or a pruning step (gmp.h).
//
// Every criterion gives a key per stored entry (per stored block for BSR and
// Blocked-ELL); the entries with the largest keys survive, exactly as many as
// asked, ties to the lower flat position. Keys that are inf or NaN are
// refused (NonfiniteError naming the op, optim/finite_check.h): a diverged
// weight has no order to keep. The selection runs through sparsifiers' exact
// top-k op (sparsify::topk_mask), on the device that holds the keys.
//
// Movement scores are kept here rather than in sparsifiers'
// MovementSparsifier, whose scores are dense-shaped: a sparse weight's
// training state stays nnz-sized (docs/architecture.md, Compact training state).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "optim/mask_change.h"
#include "tensor/tensor.h"

namespace coppice {

enum class PruneCriterion {
  kMagnitude,  // |w|
  kMovement,   // accumulated -w * grad (MovementScores), Sanh et al. 2020
  kCustom,     // a user's PruneScoreFn
};
const char* prune_criterion_name(PruneCriterion c);  // "magnitude", "movement", "custom"
// Parses "magnitude", "movement" or "custom"; throws listing them.
PruneCriterion parse_prune_criterion(std::string_view name);

// A user's criterion: scores for the parameter's entries, larger survives.
// Returns a tensor of the parameter's shape (dense; only the stored
// positions are read) or one score per slot of values(param).
using PruneScoreFn = std::function<Tensor(const Tensor& param, int64_t step)>;

// The `keep` stored entries of largest key (|key| when `magnitude`), as
// ascending flat positions; throws NonfiniteError when a key of a stored
// entry is inf or NaN. `keys` holds one key per slot of values(param)
// (view.value_slots elements in any shape) or is a dense tensor of the
// parameter's shape read at the stored positions.
std::vector<int64_t> select_survivors(const Tensor& keys, const PatternView& view, int64_t keep, bool magnitude,
                                      std::string_view op);

// Per stored block of a BSR parameter, its sum of squares (f64, one per
// block slot), on the parameter's device: sparsify::block_scores of the
// stored blocks stacked ([nblocks * bh, bw]), so the same sums in the same
// order as of the dense weight, on either device, without the dense detour.
// The keys by which BSR weights are pruned (mask updates and GMP).
Tensor stored_block_scores(const Tensor& param, std::string_view op);

// Movement scores in the compact layout (one per slot of values(param)):
// accumulate() adds -w * grad every step, remap() follows a mask change
// (survivors keep their score, new entries start at 0). f64 for f64
// weights, else f32, on the parameter's device.
class MovementScores {
 public:
  // grad: a tensor of the parameter's pattern (the same pattern version, or
  // the same format and nnz) or dense of its shape (read at stored positions).
  void accumulate(const Tensor& param, const Tensor& grad);
  // new_version: the pattern version of the parameter the scores now align with.
  void remap(const Tensor& keep_from, uint64_t new_version);
  void reset() {
    scores_ = Tensor();
    steps_ = 0;
    version_ = 0;
  }
  // Restores scores saved from scores() (a checkpoint); their pattern is then
  // taken on trust (pattern_version() 0) until the next accumulate or remap.
  void load(const Tensor& scores, int64_t steps);
  const Tensor& scores() const { return scores_; }  // undefined before accumulate
  int64_t steps() const { return steps_; }
  uint64_t pattern_version() const { return version_; }  // of the parameter last accumulated or remapped to

 private:
  Tensor scores_;
  int64_t steps_ = 0;
  uint64_t version_ = 0;
};

// One-shot pruning by magnitude: keeps the round(density * numel) stored
// entries of largest |w|; density in [0, 1]. Survivors keep their values bit
// for bit. BSR and Blocked-ELL keep round(density * blocks) whole blocks of
// largest sum of squares; a BSR weight is pruned from its block indices and
// stored blocks alone (stored_block_scores, rebuild_bsr_blocks: a GPT's
// 4096 x 1024 weight has 4M entries but 1K blocks of 64 x 64), and its
// change.dropped then holds block indices of the grid (expand_blocks gives
// the entries), as rebuild_bsr_blocks says. When nothing needs to go,
// change.param is `param` itself and keep_from is undefined.
MaskChange prune_to_density(const Tensor& param, double density);
// The same with the keys of any criterion (see select_survivors; for a block
// format, one key per block of the grid, or the grid's shape).
MaskChange prune_to_density(const Tensor& param, double density, const Tensor& keys, bool magnitude);

}  // namespace coppice
