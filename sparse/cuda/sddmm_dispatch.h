// How the BSR SDDMM of a linear's weight gradient is cut into thread blocks,
// on the host: its runs (a few stored blocks of one block row that share
// the staged rows of a) and, for the wgmma kernel, how many ranges of the
// inner dimension k they split into, chosen by simulating the thread
// blocks' dispatch. Host code alone, so that the CPU tests can check the
// choices on the patterns they were measured on.
#pragma once

#include <cstdint>
#include <vector>

namespace coppice::sparse_cuda {

// Every block row of crow (a BSR's block-row pointers) cut into runs of at
// most `most` stored blocks, as even as the row allows: begin [runs + 1]
// (offsets into the stored blocks), the block row of each run, and the block
// rows without a stored block. Runs are in block-row order, which is the
// order the SDDMM launches them (the empty rows' thread blocks after them).
struct SddmmRuns {
  std::vector<int32_t> begin, row, empty;
  int64_t count() const { return static_cast<int64_t>(row.size()); }
  int32_t blocks(int64_t run) const { return begin[run + 1] - begin[run]; }
  // Thread blocks a range launches: a run each, and with row sums an empty row each.
  int64_t launched(bool row_sums) const { return count() + (row_sums ? static_cast<int64_t>(empty.size()) : 0); }
};
SddmmRuns sddmm_runs(const std::vector<int32_t>& crow, int most);

// The length of each range when k is split about `splits` ways: a multiple
// of 64 (the kernels step k by 64), so the ranges that result are
// sddmm_ranges(k, that length), which may be fewer than asked.
constexpr int64_t sddmm_split_k(int64_t k, int64_t splits) { return (k / splits + 63) / 64 * 64; }
constexpr int64_t sddmm_ranges(int64_t k, int64_t split_k) { return (k + split_k - 1) / split_k; }

// The wgmma SDDMM's thread blocks for `splits` ranges, each run (and, with
// row sums, each empty row) once a range, dispatched in launch order (runs
// fastest, then ranges) each to the first of `sms` SMs free (an SM holds one
// of them): the time the last one ends. A thread block's time is that of a
// run of `most` blocks over all of k, times (1 + its blocks) / (1 + most)
// (staging a's rows is one block's worth, each block's product one more),
// times its range's share of k, plus 0.05 for its start and write-out.
double sddmm_dispatch_time(const SddmmRuns& runs, bool row_sums, int most, int64_t k, int64_t splits, int64_t sms);

// The count of ranges, 1 to most_splits, whose sddmm_dispatch_time is least
// (the fewest on a tie); 1 without simulating where one range's thread
// blocks already fill two waves. What it replaced, two thread blocks an SM's worth,
// ignored how full the last wave is, which is what the measured times
// follow (H200, bf16, 90 %, 64x64 blocks, 16384 tokens, bench bsr's
// patterns: the GPT's 4096 x 1024 weight gradient 0.071-0.073 ms with 3
// ranges, 0.064 with the 5 this picks; 1024 x 4096 0.060-0.061 with 4,
// 0.054 with 2; 1024 x 1024 0.028 with 14, 0.025-0.027 with 7; the model's
// times track the measured ones within 5 % at 2 to 8 ranges). The model
// prices thread blocks, not bytes: it favoured a stream-K split and counts
// of ranges that differ by run by 7-31 % at the GPT's weights, and on the
// H100 they measured 0.43x and 0.85-1.05x, since thread blocks that do not
// step through the same tokens together read x and dy from DRAM again
// (branch sddmm-plans; docs/benchmarks.md, "The weight gradients' split
// four ways").
int sddmm_dispatch_splits(const SddmmRuns& runs, bool row_sums, int most, int64_t k, int64_t most_splits, int64_t sms);

}  // namespace coppice::sparse_cuda
