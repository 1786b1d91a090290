// What a thread block of the BSR SDDMM kernels (bsr_mma.cu, bsr_wgmma.cu)
// takes on: a run of stored blocks of one block row (BsrSddmmArgs::
// group_begin), or, past the runs, a block row without a stored block whose
// rows of a only get summed (BsrSddmmArgs::row_sums); the end of those row
// sums, and the end of a split inner dimension, which both kernels share.
#pragma once

#include <cstdint>

#include "sparse/cuda/bsr_tiles.h"
#include "sparse/cuda/tile_values.cuh"

namespace coppice::sparse_cuda {

struct SddmmRun {
  int32_t begin;      // its first stored block
  int count;          // its stored blocks (0: an empty block row's sums alone)
  int32_t block_row;  // of the pattern
  bool sums_rows;     // whether it sums a's rows of its block row (the row's first run does)
};

template <typename T>
__device__ __forceinline__ SddmmRun sddmm_run(const BsrSddmmArgs<T>& p) {
  SddmmRun r;
  const bool stored = blockIdx.x < p.ngroups;
  r.begin = stored ? p.group_begin[blockIdx.x] : 0;
  r.count = stored ? p.group_begin[blockIdx.x + 1] - r.begin : 0;
  r.block_row = stored ? p.group_row[blockIdx.x] : p.empty_rows[blockIdx.x - p.ngroups];
  r.sums_rows = p.row_sums != nullptr && (!stored || r.begin == p.crow[r.block_row]);
  return r;
}

// The row sums of the B rows from r0: lanes[l * B + r] holds lane l's sum of
// row r over its tokens; thread r < B adds the lanes in order and stores the
// row's sum (rounded once), or its range's partial where k is split.
template <typename T, int B, int kLanes>
__device__ __forceinline__ void write_row_sums(const BsrSddmmArgs<T>& p, const float* lanes, int64_t r0) {
  const int r = static_cast<int>(threadIdx.x);
  if (r >= B) return;
  float sum = 0.f;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l * B + r];
  if (p.splits > 1) {
    p.row_sum_partial[blockIdx.y * p.block_rows * B + r0 + r] = sum;
  } else {
    p.row_sums[r0 + r] = from_float<T>(sum);
  }
}

// values[i] for i in [0, n) = the sum of ranges 0, 1, ... splits - 1 of
// partial (range r at partial + r * stride), added in that order and rounded
// once; thread tid of kThreads takes every kThreads-th group of 4. n, stride
// and the partial's offset are multiples of 4 (whole rows of a block).
template <typename T, int kThreads>
__device__ __forceinline__ void add_ranges(const float* partial, int64_t stride, int splits, int64_t n, T* values,
                                           int tid) {
  for (int64_t i = 4 * static_cast<int64_t>(tid); i < n; i += 4 * kThreads) {
    // __ldcg: from L2, where the other thread blocks' stores are, never a stale L1 line.
    float4 sum = __ldcg(reinterpret_cast<const float4*>(partial + i));
    for (int r = 1; r < splits; ++r) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(partial + r * stride + i));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    values[i] = from_float<T>(sum.x);
    values[i + 1] = from_float<T>(sum.y);
    values[i + 2] = from_float<T>(sum.z);
    values[i + 3] = from_float<T>(sum.w);
  }
}

// The end of a split SDDMM (p.splits > 1), called by each of the kThreads
// threads that wrote this thread block's partial sums (`sync`: their
// barrier), after their stores: the last of the task's p.splits thread blocks
// to get here adds every range's partials in range order and writes the
// values of its run and, where it sums rows, its rows' sums, each rounded
// once. Those are the sums, in the order, of a pass of its own after the
// kernel, which this replaces: no launch, and the partials are read from L2
// right after they were written. p.arrivals (one count a task) is zero before
// the launch.
template <typename T, int B, int kThreads, typename Sync>
__device__ __forceinline__ void finish_split(const BsrSddmmArgs<T>& p, const SddmmRun& task, int tid, Sync sync) {
  __shared__ int arrived_before;
  __threadfence();  // this thread's partial sums are seen device-wide before the count says so
  sync();
  if (tid == 0) arrived_before = atomicAdd(p.arrivals + blockIdx.x, 1);
  sync();
  if (arrived_before != p.splits - 1) return;
  __threadfence();  // and the other ranges' before this one reads them
  if (task.count > 0) {
    const int64_t first = static_cast<int64_t>(task.begin) * B * B;
    add_ranges<T, kThreads>(p.partial + first, p.nblocks * B * B, p.splits, static_cast<int64_t>(task.count) * B * B,
                            p.values + first, tid);
  }
  if (task.sums_rows) {
    const int64_t r0 = static_cast<int64_t>(task.block_row) * B;
    add_ranges<T, kThreads>(p.row_sum_partial + r0, p.block_rows * B, p.splits, B, p.row_sums + r0, tid);
  }
}

}  // namespace coppice::sparse_cuda
