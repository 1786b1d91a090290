// Transposable n:m masks: a mask that is n:m along the rows of a matrix and
// along its columns too, so that both W and W^T can run on n:m sparse tensor
// cores (the forward pass multiplies by W, the backward pass by W^T).
//
// Such a mask is chosen per m x m tile: among the tile's patterns with exactly
// n kept entries in every row and in every column, the one keeping the largest
// sum of |w|. The patterns are enumerated (90 for 2:4), which is what limits m.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace coppice {

// The largest m this supports: the number of patterns grows fast with m
// (2:4 has 90, 3:6 already 297,200, 4:8 about 1.2e11).
inline constexpr int64_t kMaxTransposableM = 4;

// A bool mask of w's shape and device for a 2-D floating tensor w [rows, cols]
// (m dividing both): on every m x m tile, every row and every column keep
// exactly n entries, and the kept |w| (summed in f64) is the largest such a
// pattern can keep. Needs 1 <= n <= m <= kMaxTransposableM.
//
// NaN counts as largest, as in nm_compress: a tile's patterns are ranked by
// the number of NaNs kept, then of infinities kept, then by the sum of the
// finite |w| kept. Ties go to the first pattern in a fixed order: each row's
// choice of n columns, listed lexicographically (for 2:4: {0,1}, {0,2},
// {0,3}, {1,2}, {1,3}, {2,3}), and patterns ordered by row 0's choice, then
// row 1's, and so on (an all-zero 2:4 tile keeps {0,1}, {0,1}, {2,3}, {2,3}).
// 2:4 on a CUDA tensor runs on the device (the same selection, bit for bit);
// otherwise computed on the CPU: a tensor on another device comes back, and
// its mask goes there.
Tensor transposable_nm_mask(const Tensor& w, int64_t n = 2, int64_t m = 4);

}  // namespace coppice
