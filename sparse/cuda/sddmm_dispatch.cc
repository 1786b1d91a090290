#include "sparse/cuda/sddmm_dispatch.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "tensor/error.h"

namespace coppice::sparse_cuda {

SddmmRuns sddmm_runs(const std::vector<int32_t>& crow, int most) {
  COPPICE_CHECK(!crow.empty() && most > 0, "sddmm_runs: internal: ", crow.size(), " block-row pointers, runs of ",
                most);
  SddmmRuns out;
  for (size_t r = 0; r + 1 < crow.size(); ++r) {
    const int32_t len = crow[r + 1] - crow[r];
    if (len == 0) out.empty.push_back(static_cast<int32_t>(r));
    const int32_t runs = (len + most - 1) / most;
    for (int32_t j = 0; j < runs; ++j) {
      out.begin.push_back(crow[r] + static_cast<int32_t>(static_cast<int64_t>(len) * j / runs));
      out.row.push_back(static_cast<int32_t>(r));
    }
  }
  out.begin.push_back(crow.back());
  return out;
}

double sddmm_dispatch_time(const SddmmRuns& runs, bool row_sums, int most, int64_t k, int64_t splits, int64_t sms) {
  COPPICE_CHECK(most > 0 && k > 0 && splits > 0 && sms > 0, "sddmm_dispatch_time: internal: runs of ", most, ", k ", k,
                ", ", splits, " ranges, ", sms, " SMs");
  constexpr double kFixed = 0.05;
  const int64_t split_k = splits > 1 ? sddmm_split_k(k, splits) : k;
  const int64_t ranges = sddmm_ranges(k, split_k), launched = runs.launched(row_sums);
  // Each SM's time free, earliest first.
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int64_t s = 0; s < sms; ++s) free_at.push(0.0);
  double last = 0.0;
  for (int64_t y = 0; y < ranges; ++y) {
    const double share = static_cast<double>(std::min(split_k, k - y * split_k)) / static_cast<double>(k);
    for (int64_t x = 0; x < launched; ++x) {
      const int32_t blocks = x < runs.count() ? runs.blocks(x) : 0;
      const double start = free_at.top();
      const double end = start + share * (1.0 + blocks) / (1.0 + most) + kFixed;
      free_at.pop();
      free_at.push(end);
      last = std::max(last, end);
    }
  }
  return last;
}

int sddmm_dispatch_splits(const SddmmRuns& runs, bool row_sums, int most, int64_t k, int64_t most_splits, int64_t sms) {
  if (runs.count() == 0 || sms <= 0 || most_splits <= 1) return 1;
  // Two waves or more whole: a split adds a start to every thread block and
  // evens out only the last wave (and the simulation, runs x ranges heap
  // steps for each count, would cost the host milliseconds at every new
  // pattern of a large weight: 9 ms for 4096 runs on one EPYC core, 0.4 ms
  // for 263).
  if (runs.launched(row_sums) >= 2 * sms) return 1;
  int best = 1;
  double best_time = sddmm_dispatch_time(runs, row_sums, most, k, 1, sms);
  for (int64_t s = 2; s <= most_splits; ++s) {
    const double t = sddmm_dispatch_time(runs, row_sums, most, k, s, sms);
    if (t < best_time * (1.0 - 1e-9)) {
      best = static_cast<int>(s);
      best_time = t;
    }
  }
  return best;
}

}  // namespace coppice::sparse_cuda
