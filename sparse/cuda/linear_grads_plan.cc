#include "sparse/cuda/linear_grads_plan.h"

#include <algorithm>

namespace coppice::sparse_cuda {

std::vector<uint32_t> linear_grads_sum_masks(const std::vector<int32_t>& col_ptr, const std::vector<int32_t>& col_row,
                                             int64_t block_rows) {
  const size_t cols = col_ptr.empty() ? 0 : col_ptr.size() - 1;
  // Each block row's blocks: (column, position in the column), columns ascending.
  std::vector<std::vector<std::pair<int32_t, int32_t>>> by_row(static_cast<size_t>(block_rows));
  for (size_t c = 0; c < cols; ++c) {
    for (int32_t e = col_ptr[c]; e < col_ptr[c + 1]; ++e) {
      by_row[static_cast<size_t>(col_row[static_cast<size_t>(e)])].emplace_back(static_cast<int32_t>(c),
                                                                                e - col_ptr[c]);
    }
  }
  std::vector<uint32_t> masks(cols, 0u);
  std::vector<int> taken(cols, 0);
  for (const auto& blocks : by_row) {
    if (blocks.empty()) continue;
    auto best = blocks.begin();
    for (auto it = blocks.begin(); it != blocks.end(); ++it) {
      if (taken[static_cast<size_t>(it->first)] < taken[static_cast<size_t>(best->first)]) best = it;
    }
    masks[static_cast<size_t>(best->first)] |= 1u << best->second;
    ++taken[static_cast<size_t>(best->first)];
  }
  return masks;
}

std::vector<int32_t> empty_block_rows(const std::vector<int32_t>& col_row, int64_t block_rows) {
  std::vector<bool> stored(static_cast<size_t>(block_rows), false);
  for (int32_t r : col_row) stored[static_cast<size_t>(r)] = true;
  std::vector<int32_t> empty;
  for (int64_t r = 0; r < block_rows; ++r) {
    if (!stored[static_cast<size_t>(r)]) empty.push_back(static_cast<int32_t>(r));
  }
  return empty;
}

int linear_grads_splits(int64_t block_cols, int64_t n, int step, int64_t sms) {
  const int64_t steps = (n + step - 1) / step;
  if (steps <= 0 || block_cols <= 0 || sms <= 0) return 1;
  // About two thread blocks an SM, rounded; ranges of at least four steps.
  int64_t want = (2 * sms + block_cols / 2) / block_cols;
  want = std::max<int64_t>(1, std::min<int64_t>({want, 16, steps / 4}));
  const int64_t range_steps = (steps + want - 1) / want;
  return static_cast<int>((steps + range_steps - 1) / range_steps);
}

}  // namespace coppice::sparse_cuda
