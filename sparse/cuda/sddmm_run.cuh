// What a thread block of the BSR SDDMM kernels (bsr_mma.cu, bsr_wgmma.cu)
// takes on: a run of stored blocks of one block row (BsrSddmmArgs::
// group_begin), or, past the runs, a block row without a stored block whose
// rows of a only get summed (BsrSddmmArgs::row_sums); and the end of those
// row sums, which both kernels share.
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

}  // namespace coppice::sparse_cuda
