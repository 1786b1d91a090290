// The host's part of a sparse linear's one-pass gradients
// (bsr_wgmma32_grads.h), worked out once per pattern from W's blocks listed
// by block column (col_ptr [block columns + 1], col_row: each entry's block
// row, rows ascending within a column): which block of each block row gives
// its bias gradient, which block rows have none, and how many ranges to
// split the tokens into.
#pragma once

#include <cstdint>
#include <vector>

namespace coppice::sparse_cuda {

// Per block column, bit q set where the column's q-th block sums its block
// row's slice of dy for db: one block of each block row that has one, taken
// from the column with the fewest so far (ties: the lowest column), so that
// no thread block carries many more of the sums than the others.
std::vector<uint32_t> linear_grads_sum_masks(const std::vector<int32_t>& col_ptr, const std::vector<int32_t>& col_row,
                                             int64_t block_rows);

// The block rows without a stored block, ascending.
std::vector<int32_t> empty_block_rows(const std::vector<int32_t>& col_row, int64_t block_rows);

// How many ranges of the n tokens (each a multiple of `step` tokens) the
// kernel's thread blocks split into, 1 to 16: about two thread blocks an SM
// (one resident at a time), with ranges of at least four steps; ranges of
// ceil(steps / count) steps then make exactly `count` of them. Measured on
// an H100 at the GPT's shapes (16384 tokens, 90 %) over 1 to 16 ranges, the
// best counts gave 256 thread blocks (fc2's 128 columns in 2 ranges; 3072
// and 4096 x 1024 in 8) or 128 (1024 x 1024 in 4, 2 % ahead of 8): one wave
// leaves the SMs of short columns idle while the longest finish, and more
// waves pay each thread block's start and its partial sums again.
int linear_grads_splits(int64_t block_cols, int64_t n, int step, int64_t sms);

}  // namespace coppice::sparse_cuda
