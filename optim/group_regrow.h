// N:M prune and regrow: an update of an n:m parameter (sparse/nm.h) that
// keeps every group of m consecutive entries of a row at exactly n stored
// entries, so that the pattern stays one the n:m kernels (and 2:4 sparse
// tensor cores) run. A group regrows, inside itself, as many entries as it
// dropped: RigL within groups (drop the weakest kept entry, grow the
// strongest gradient) when the growth scores are |dense gradient|, SET
// within groups when they are random keys.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "optim/mask_change.h"
#include "tensor/tensor.h"

namespace coppice {

struct GroupRegrow {
  std::vector<int64_t> kept;   // flat positions, ascending
  std::vector<int64_t> grown;  // flat positions, ascending, none of them kept
};

// `view`: the n:m parameter's pattern (pattern_view: positions ascending,
// slots into its values); `keys`: one per slot, smaller dropped first (by |key|
// when `magnitude`), ties to the lower position. Drops `k` stored entries, at
// most m - n per group when dropped entries may not regrow at once (a group
// has only m - n other positions), else at most n; fewer than k when the caps
// leave no more. `scores`: dense of the parameter's shape (any device and
// floating dtype), larger grown first, ties to the lower position; each group
// grows as many as it dropped among its positions that are neither kept nor
// (unless `allow_regrow_dropped`) just dropped. Throws naming `op` when a
// group does not store the same count as the others, and NonfiniteError
// (optim/finite_check.h) when a key or score is inf or NaN.
GroupRegrow regrow_within_groups(const PatternView& view, const Tensor& keys, bool magnitude, int64_t k, int64_t m,
                                 const Tensor& scores, bool allow_regrow_dropped, std::string_view op);

}  // namespace coppice
