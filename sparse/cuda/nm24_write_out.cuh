// The write-out the 2:4 products share (nm24_mma.cu, nm24_wgmma.cu): their
// f32 sums, transposed into a [kTileM x rows] tile in shared memory (x rows
// down, S rows along; kPitch floats a row, rows 16-byte aligned), leave as
// runs of 8 along out's rows with epilogue.cuh's steps: the bias, relu or a
// gelu form, one rounding, 16-byte stores where the run is whole.
//
// Each run's 8 sums are read as two 16-byte loads and its bias as one (where
// the run is whole): read element by element, the write-out took as many
// shared-memory and L1 wavefronts as a tile's whole main loop at K = 1024
// (eight 4-byte loads a run, 32 bytes apart across the lanes: 8 wavefronts
// each; and eight 2-byte bias loads), and the sparse wgmma kernel, bound by
// that pipe (Nsight Compute, H200, x W^T at [16384, 1024] x [3072, 1024]:
// L1/TEX 88 % busy, tensor pipe 31 %), ran at 0.83x cuBLAS's dense time.
#pragma once

#include <cstdint>

#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/nm24_mma.h"

namespace coppice::sparse_cuda {

// Thread `tid` of kThreads writes its runs of the tile at out rows m0.. and
// columns r0.. (rows or columns past p.m and p.rows are not stored).
template <typename T, int kTileM, int kTileR, int kPitch, int kThreads>
__device__ __forceinline__ void nm24_write_out(const float* tile, const Nm24ProductArgs<T>& p, int64_t m0, int64_t r0,
                                               int tid) {
  static_assert(kTileR % 8 == 0 && kPitch % 4 == 0 && kPitch >= kTileR, "runs of 8 in 16-byte aligned rows");
  constexpr int kRuns = kTileR / 8;
  const bool vec_rows = p.rows % 8 == 0;
  for (int c = tid; c < kTileM * kRuns; c += kThreads) {
    const int m = c / kRuns, rr = (c % kRuns) * 8;
    if (m0 + m >= p.m || r0 + rr >= p.rows) continue;
    const int count = static_cast<int>(p.rows - r0 - rr < 8 ? p.rows - r0 - rr : 8);
    const float4* src = reinterpret_cast<const float4*>(tile + m * kPitch + rr);
    const float4 lo = src[0], hi = src[1];
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    if (count == 8) {
      add_bias_run<T, 8>(v, p.bias, r0 + rr);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (j < count) v[j] = add_bias(v[j], p.bias, r0 + rr + j);
      }
    }
    if (p.relu) {
#pragma unroll
      for (float& x : v) x = relu(x);
    }
    const bool whole = vec_rows && r0 + rr + 8 <= p.rows;
    gelu_and_store_run<T, 8>(p.gelu, p.out, p.aux, (m0 + m) * p.rows + r0 + rr, 1, whole, v, count);
  }
}

}  // namespace coppice::sparse_cuda
