// sparse/cuda/sddmm_dispatch.h: the SDDMM's runs and the wgmma SDDMM's count
// of ranges of k, on the host (no GPU needed).
#include "sparse/cuda/sddmm_dispatch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tools/bench/bench_util.h"
#include "tools/bench/suites.h"

namespace coppice {
namespace {

using sparse_cuda::sddmm_dispatch_splits;
using sparse_cuda::sddmm_dispatch_time;
using sparse_cuda::sddmm_runs;
using sparse_cuda::SddmmRuns;

// Block rows of 3, 0, 1 and 5 stored blocks in runs of at most 2: 3 -> 1 + 2
// (as even as the row allows), 5 -> 1 + 2 + 2; the empty row listed apart.
TEST(SddmmDispatchTest, RunsCutEachBlockRowEvenly) {
  const SddmmRuns runs = sddmm_runs({0, 3, 3, 4, 9}, 2);
  EXPECT_EQ(runs.begin, (std::vector<int32_t>{0, 1, 3, 4, 5, 7, 9}));
  EXPECT_EQ(runs.row, (std::vector<int32_t>{0, 0, 2, 3, 3, 3}));
  EXPECT_EQ(runs.empty, (std::vector<int32_t>{1}));
  EXPECT_EQ(runs.count(), 6);
  EXPECT_EQ(runs.blocks(0), 1);
  EXPECT_EQ(runs.blocks(1), 2);
  const SddmmRuns whole = sddmm_runs({0, 3, 3, 4, 9}, 8);
  EXPECT_EQ(whole.begin, (std::vector<int32_t>{0, 3, 4, 9}));
  EXPECT_EQ(sddmm_runs({0}, 2).count(), 0);  // no block rows
}

// Ranges are multiples of 64 of k; asking for 7 of 16384 gives 7 (2368 each,
// the last shorter), asking for 16 of 1000 gives 1000 / 64 rounded.
TEST(SddmmDispatchTest, RangesAreMultiplesOf64) {
  static_assert(sparse_cuda::sddmm_split_k(16384, 7) == 2368 && sparse_cuda::sddmm_ranges(16384, 2368) == 7);
  static_assert(sparse_cuda::sddmm_split_k(16384, 4) == 4096 && sparse_cuda::sddmm_ranges(16384, 4096) == 4);
  static_assert(sparse_cuda::sddmm_split_k(1000, 16) == 64 && sparse_cuda::sddmm_ranges(1000, 64) == 16);
}

// One full wave of two-block runs: a whole-k run takes 1 + 0.05; halving k
// twice over as many thread blocks takes two waves of half, 2 x 0.55, so the
// count stays 1. Half the SMs' worth of runs: two ranges fill the GPU once.
TEST(SddmmDispatchTest, FullWavesAreNotSplit) {
  std::vector<int32_t> crow{0};
  for (int r = 0; r < 132; ++r) crow.push_back(crow.back() + 2);
  const SddmmRuns full = sddmm_runs(crow, 2);
  EXPECT_DOUBLE_EQ(sddmm_dispatch_time(full, false, 2, 16384, 1, 132), 1.05);
  EXPECT_DOUBLE_EQ(sddmm_dispatch_time(full, false, 2, 16384, 2, 132), 1.1);
  EXPECT_EQ(sddmm_dispatch_splits(full, false, 2, 16384, 16, 132), 1);
  crow.resize(67);
  const SddmmRuns half = sddmm_runs(crow, 2);
  EXPECT_DOUBLE_EQ(sddmm_dispatch_time(half, false, 2, 16384, 2, 132), 0.55);
  EXPECT_EQ(sddmm_dispatch_splits(half, false, 2, 16384, 16, 132), 2);
}

// A one-block run costs two thirds of a two-block one, an empty row's
// thread block (row sums alone) one third; the empty rows join only when
// row sums are asked for.
TEST(SddmmDispatchTest, ThreadBlocksCostByTheirBlocks) {
  const SddmmRuns runs = sddmm_runs({0, 1, 1}, 2);
  EXPECT_DOUBLE_EQ(sddmm_dispatch_time(runs, false, 2, 1024, 1, 1), 2.0 / 3.0 + 0.05);
  EXPECT_DOUBLE_EQ(sddmm_dispatch_time(runs, true, 2, 1024, 1, 1), 1.0 + 0.1);
  EXPECT_DOUBLE_EQ(sddmm_dispatch_time(runs, true, 2, 1024, 1, 2), 2.0 / 3.0 + 0.05);
}

// Nothing to split: no runs, no SMs, or one range allowed; and two waves
// of thread blocks or more without a split.
TEST(SddmmDispatchTest, NothingToSplitTakesOneRange) {
  std::vector<int32_t> crow{0};
  for (int r = 0; r < 300; ++r) crow.push_back(crow.back() + 1);  // 300 runs of one block
  EXPECT_EQ(sddmm_dispatch_splits(sddmm_runs(crow, 2), false, 2, 16384, 16, 132), 1);
  EXPECT_EQ(sddmm_dispatch_splits(sddmm_runs({0, 0, 0}, 2), true, 2, 16384, 16, 132), 1);
  EXPECT_EQ(sddmm_dispatch_splits(sddmm_runs({0, 1}, 2), false, 2, 16384, 16, 0), 1);
  EXPECT_EQ(sddmm_dispatch_splits(sddmm_runs({0, 1}, 2), false, 2, 511, 0, 132), 1);
  EXPECT_EQ(sddmm_dispatch_splits(sddmm_runs({0, 1}, 2), false, 2, 1023, 1, 132), 1);
}

// The counts on the patterns they were measured on: bench bsr's 90 %, 64x64
// patterns of the GPT's weights, 16384 tokens, 132 SMs (H100 SXM and H200).
// Measured best (sparse/cuda/sddmm_dispatch.h, docs/benchmarks.md, "The
// SDDMM's waves"): 5, 2, 6 and 5 ranges; 7 for 1024 x 1024 measured within
// the noise of 6. The rule before took 3, 4, 14 and 5.
TEST(SddmmDispatchTest, PicksOnTheGptsWeightsAsMeasured) {
  struct Case {
    int64_t out, in;
    int64_t runs;
    int splits;
  };
  for (const Case& c :
       {Case{4096, 1024, 68, 5}, Case{1024, 4096, 53, 2}, Case{1024, 1024, 18, 7}, Case{3072, 1024, 51, 5}}) {
    const int64_t rows = c.out / 64, cols = c.in / 64;
    const std::vector<uint8_t> blocks = bench::random_pattern(rows, cols, 0.9, bench::pattern_seed(0.9));
    std::vector<int32_t> crow{0};
    for (int64_t r = 0; r < rows; ++r) {
      int32_t n = 0;
      for (int64_t j = 0; j < cols; ++j) n += blocks[static_cast<size_t>(r * cols + j)];
      crow.push_back(crow.back() + n);
    }
    const SddmmRuns runs = sddmm_runs(crow, 2);
    EXPECT_EQ(runs.count(), c.runs) << c.out << " x " << c.in;
    EXPECT_EQ(sddmm_dispatch_splits(runs, false, 2, 16384, 16, 132), c.splits) << c.out << " x " << c.in;
  }
}

}  // namespace
}  // namespace coppice
