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
// kernel's thread blocks split into, 1 to 16: the count whose modelled time
// is least. The model: thread blocks in launch order (range by range, the
// columns longest first within each, `order`), each to the first of `sms`
// SMs free; one costs (2 + its blocks) a step of its range plus a start
// (linear_grads_plan.cc's kStart); splitting adds the partial sums' traffic
// (a block a range, spread over the SMs) and the pass that adds them (10).
int linear_grads_splits(const std::vector<int32_t>& col_ptr, const std::vector<int32_t>& order, int64_t nblocks,
                        int64_t n, int step, int64_t sms);

}  // namespace coppice::sparse_cuda
