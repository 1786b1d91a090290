#include "sparse/cuda/linear_grads_plan.h"

#include <algorithm>
#include <functional>
#include <queue>

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

namespace {
// A thread block's start and end (its blocks loaded, its rings filled and
// drained, its dW written), in steps of one block: fitted to the H100's
// timings of the GPT's shapes over 1 to 16 ranges.
constexpr double kStart = 128.0;
}  // namespace

int linear_grads_splits(const std::vector<int32_t>& col_ptr, const std::vector<int32_t>& order, int64_t nblocks,
                        int64_t n, int step, int64_t sms) {
  const int64_t steps = (n + step - 1) / step;
  if (steps <= 1 || sms <= 0) return 1;
  int best = 1;
  double best_time = 0.0;
  for (int64_t want = 1; want <= 16 && want <= steps; ++want) {
    const int64_t range_steps = (steps + want - 1) / want;
    const int64_t ranges = (steps + range_steps - 1) / range_steps;
    if (ranges != want) continue;  // the same split as a smaller count
    std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
    for (int64_t s = 0; s < sms; ++s) free_at.push(0.0);
    double end = 0.0;
    for (int64_t r = 0; r < ranges; ++r) {
      const int64_t its_steps = std::min(range_steps, steps - r * range_steps);
      for (int32_t c : order) {
        const int blocks = col_ptr[static_cast<size_t>(c) + 1] - col_ptr[static_cast<size_t>(c)];
        const double t = free_at.top() + kStart + (2.0 + blocks) * static_cast<double>(its_steps);
        free_at.pop();
        free_at.push(t);
        end = std::max(end, t);
      }
    }
    if (ranges > 1) end += 10.0 + static_cast<double>(nblocks * ranges) / static_cast<double>(sms);
    if (want == 1 || end < best_time) {
      best = static_cast<int>(ranges);
      best_time = end;
    }
  }
  return best;
}

}  // namespace coppice::sparse_cuda
