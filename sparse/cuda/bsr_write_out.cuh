// The write-out of the wgmma BSR product's output tile (bsr_wgmma.cu), where
// y is contiguous along its rows (the token-major y of a linear): the tile's
// f32 sums, staged in shared memory as [token][row] with a pitch of P floats,
// become y = tile + bias, relu'd when asked, a gelu form, rounded once
// (epilogue.cuh: the arithmetic of bsr_mma.cu's write-out, so the same bits
// for the same sums), in runs of R = 16 / sizeof(T) rows of one token: one
// 16-byte store of y (and one of z under a gelu form) a run.
//
// Which thread takes which run. A 16-byte shared load is served 8 threads at
// a time; with P = 4 (mod 32) words, run k of token m starts at bank
// 4m + R k (mod 32). The 8 consecutive threads of a phase take Q = 32 / R
// runs of 8 / Q tokens (bf16: 4 runs of 2 tokens, the banks 4m + 8k; f32: 8
// runs of one token), so each of their 16-byte loads lands on banks of its
// own. Handing a token's runs to consecutive threads in order, as bsr_mma.cu
// does, made 4-way conflicts: 78 % of the persistent wgmma product's shared
// wavefronts (H200, Nsight Compute). A warp still stores whole 128-byte lines
// of y. (The mma.sync kernel, with four thread blocks an SM to hide its
// write-out, measured slower inside the GPT step with this one, z loads
// batched: its 64x64 products took 5.3 against 4.6 ms a step, so it keeps
// its own.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "sparse/cuda/bsr_tiles.h"
#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/tile_values.cuh"

namespace coppice::sparse_cuda {

// y's rows r0 .. r0 + B - 1 for tokens n0 .. n0 + kTileN - 1 (those below
// p.n) from `tile` (16-byte aligned), by threads tid = 0 .. kThreads - 1 of
// the thread block. vec: y (and aux) contiguous along the rows, 16-byte
// aligned, the token pitch a multiple of R.
//
// Under a gradient gelu form each run reads z from global memory. A thread
// loads the z of up to 8 of its runs before it finishes the first, so that
// their latencies overlap: the wgmma product has 8 warps an SM to hide them,
// and reading one run's z at a time made its write-out wait on each
// (the GPT step's dY @ W of fc2 ran slower on wgmma than on mma.sync).
template <typename T, int B, int kTileN, int P, int kThreads>
__device__ __forceinline__ void write_out_token_rows(const float* tile, const BsrProductArgs<T>& p, int64_t r0,
                                                     int64_t n0, bool vec, int tid) {
  constexpr int R = 16 / static_cast<int>(sizeof(T));
  constexpr int kRuns = B / R;                        // runs a token
  constexpr int Q = 32 / R < kRuns ? 32 / R : kRuns;  // runs a phase of 8 threads takes of one token
  constexpr int kTokens = 8 / Q;                      // tokens a phase takes
  constexpr int kTotal = kTileN * kRuns;
  constexpr int kPer = (kTotal + kThreads - 1) / kThreads;  // runs a thread
  constexpr int kBatch = kPer < 8 ? kPer : 8;               // runs whose z is loaded together
  static_assert(P % 4 == 0 && R % 4 == 0, "runs of whole 16-byte shared loads");
  static_assert(kRuns % Q == 0 && kTileN % kTokens == 0, "phases tile the output");
  struct Run {
    int m, rr;   // the token in the tile, the run's first row
    int64_t at;  // the run's first element in y and aux
    bool in;     // a token below p.n
  };
  auto run_of = [&](int c) {
    const int phase = c / 8, lane8 = c % 8;
    Run run;
    run.m = (phase / (kRuns / Q)) * kTokens + lane8 / Q;
    run.rr = ((phase % (kRuns / Q)) * Q + lane8 % Q) * R;
    run.at = (r0 + run.rr) * p.y.row_stride + (n0 + run.m) * p.y.col_stride;
    run.in = c < kTotal && n0 + run.m < p.n;
    return run;
  };
  const bool preload = vec && is_gelu_gradient(p.gelu);
  for (int b0 = 0; b0 < kPer; b0 += kBatch) {
    uint4 z[kBatch];
    if (preload) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const Run run = run_of(tid + (b0 + b) * kThreads);
        if (run.in) z[b] = *reinterpret_cast<const uint4*>(p.aux.data + run.at);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const Run run = run_of(tid + (b0 + b) * kThreads);
      if (!run.in) continue;
      float v[R];
      const float4* src = reinterpret_cast<const float4*>(tile + run.m * P + run.rr);
#pragma unroll
      for (int q = 0; q < R / 4; ++q) {
        const float4 f = src[q];
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
      }
      add_bias_run<T, R>(v, p.bias, r0 + run.rr);
      if (p.relu) {
#pragma unroll
        for (float& x : v) x = relu(x);
      }
      if (preload) {
        T zs[R];
        memcpy(zs, &z[b], sizeof(zs));
        gelu_gradient_of<T, R>(p.gelu, zs, v);
        store_run<T, R>(p.y.data + run.at, p.y.row_stride, true, v, R);
      } else {
        gelu_and_store_run<T, R>(p.gelu, p.y.data, p.aux.data, run.at, p.y.row_stride, vec, v, R);
      }
    }
  }
}

}  // namespace coppice::sparse_cuda
