// The write-out of the sparse product kernels (bsr_mma.cu, bsr_tiles.cu,
// bsr_wgmma.cu, nm24_mma.cu, nm24_wgmma.cu): what a product applies to its f32
// accumulators on the way out, in this order, each step optional:
//   1. + bias: a linear's bias, one value per output feature (add_bias; a
//      run's at once: add_bias_run);
//   2. relu (relu: a NaN stays NaN, so that the non-finite checks see it);
//   3. a gelu form (gelu_write_out.h: forward, z stored; gradient, z read;
//      each in the erf form or GPT-2's tanh approximation);
//   4. the one rounding to the output's type and the store (store_run);
//   5. after the rounding, a residual r added, the sum rounded once: the
//      bits of add(r, y) (linear_add; the wgmma BSR products' plain form
//      only, a pair at a time: add_residual_pair).
// Everything before the rounding stays in f32, so that a fused form gives
// the bits of the separate ops it replaces (tensor's linear, relu, gelu,
// gelu_tanh, gelu_backward and gelu_tanh_backward round once each, and so do
// these, at the same points).
//
// A run is kN consecutive outputs of one thread, kN * sizeof(T) = 16 bytes:
// where the run is whole, contiguous and 16-byte aligned it moves as one
// 16-byte access (vec); otherwise element by element at its stride.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "sparse/cuda/gelu_write_out.cuh"
#include "sparse/cuda/tile_values.cuh"

namespace coppice::sparse_cuda {

// v plus the bias of output feature `row`; v itself without a bias (no
// addition at all: v + 0 would turn a -0 into +0).
template <typename T>
__device__ __forceinline__ float add_bias(float v, const T* bias, int64_t row) {
  return bias != nullptr ? v + to_float(bias[row]) : v;
}

// v[j] += the bias of output feature row + j, one 16-byte load where the run
// of the bias is 16-byte aligned; no addition at all without a bias (as
// add_bias: v + 0 would turn a -0 into +0).
template <typename T, int kN>
__device__ __forceinline__ void add_bias_run(float (&v)[kN], const T* bias, int64_t row) {
  if (bias == nullptr) return;
  const T* b = bias + row;
  if constexpr (kN * sizeof(T) == 16) {
    if (reinterpret_cast<uintptr_t>(b) % 16 == 0) {
      T vals[kN];
      const uint4 packed = *reinterpret_cast<const uint4*>(b);
      memcpy(vals, &packed, sizeof(packed));
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] += to_float(vals[j]);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) v[j] += to_float(b[j]);
}

// The bias of output feature `row`, 0 without one: bsr_tiles.cu adds it
// whether or not there is a bias, and keeps doing so for its bits.
template <typename T>
__device__ __forceinline__ float bias_or_zero(const T* bias, int64_t row) {
  return bias != nullptr ? to_float(bias[row]) : 0.0f;
}

// relu as tensor's relu computes it (v <= 0 ? 0 : v: NaN stays NaN, -0
// becomes +0); rounding keeps signs, so the result is relu applied to the
// rounded product bit for bit. (The 2:4 products once used fmaxf(v, 0),
// which turns a NaN into 0 and so hid a diverging step from the trainer's
// non-finite checks.)
__device__ __forceinline__ float relu(float v) { return v <= 0.0f ? 0.0f : v; }

// The run's values rounded to T and stored: element j at dst[j * step]. vec:
// all kN as one 16-byte store (dst contiguous and 16-byte aligned); else the
// first `count` one by one.
template <typename T, int kN>
__device__ __forceinline__ void store_run(T* dst, int64_t step, bool vec, const float (&v)[kN], int count) {
  static_assert(kN * sizeof(T) == 16, "a run is one 16-byte access");
  if (vec) {
    T out[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) out[j] = from_float<T>(v[j]);
    uint4 packed;
    memcpy(&packed, out, sizeof(packed));
    *reinterpret_cast<uint4*>(dst) = packed;
    return;
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    if (j < count) dst[j * step] = from_float<T>(v[j]);
  }
}

// Steps 3 and 4 for a run whose bias and relu are applied: the gelu form,
// then the rounding and the store. The run starts at element `at` of the
// output y and of the auxiliary matrix aux (z: y's shape and strides; read
// only under a gelu form, null otherwise).
template <typename T, int kN>
__device__ __forceinline__ void gelu_and_store_run(GeluWriteOut gelu, T* y, T* aux, int64_t at, int64_t step, bool vec,
                                                   float (&v)[kN], int count) {
  if (gelu != GeluWriteOut::kNone) gelu_run<T, kN>(gelu, aux + at, step, vec, v, count);
  store_run<T, kN>(y + at, step, vec, v, count);
}

// Step 5 for a register of two 16-bit values: y2 (already rounded) plus the
// residual's pair r2, each sum rounded once, as add(r, y) rounds it.
template <typename T>
__device__ __forceinline__ uint32_t add_residual_pair(uint32_t y2, uint32_t r2) {
  float y0, y1, r0, r1;
  cuda::unpack2<T>(y2, y0, y1);
  cuda::unpack2<T>(r2, r0, r1);
  return cuda::pack2<T>(r0 + y0, r1 + y1);
}

}  // namespace coppice::sparse_cuda
