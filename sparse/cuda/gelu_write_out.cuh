// The device side of gelu_write_out.h: the gelu forms applied to a run of
// output values in a product kernel's write-out (step 3 of epilogue.cuh,
// which kernels include instead of this).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "sparse/cuda/gelu_write_out.h"
#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/mma_sync.cuh"

namespace coppice::sparse_cuda {

// v rounded to T, into t, and v set to those values read back in f32: the
// rounding a product's output gets. 16-bit values go a pair at a time: one
// cvt a pair, read back from the halves of the packed register, and t
// already packed for the store (1.5 instructions a value; one cvt a value,
// a shift back and a pack took 2.5).
template <typename T, int kN>
__device__ __forceinline__ void round_through(float (&v)[kN], T (&t)[kN]) {
  if constexpr (sizeof(T) == 2 && kN % 2 == 0) {
#pragma unroll
    for (int m = 0; m < kN / 2; ++m) {
      const uint32_t pair = cuda::pack2<T>(v[2 * m], v[2 * m + 1]);
      memcpy(&t[2 * m], &pair, sizeof(pair));
      cuda::unpack2<T>(pair, v[2 * m], v[2 * m + 1]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      t[j] = from_float<T>(v[j]);
      v[j] = to_float(t[j]);
    }
  }
}

// The gradient forms' step alone, for a run whose z is already in registers
// (zs: a write-out that loads several runs' z before it needs the first).
// A mode known at compile time (a kernel per form) leaves no branch.
template <typename T, int kN>
__device__ __forceinline__ void gelu_gradient_of(GeluWriteOut mode, const T (&zs)[kN], float (&v)[kN]) {
  T g[kN];
  round_through<T, kN>(v, g);
  if (is_gelu_tanh(mode)) {
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = cuda::math::gelu_tanh_grad(v[j], to_float(zs[j]));
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = cuda::math::gelu_grad(v[j], to_float(zs[j]));
  }
}

// The forward forms' step alone: each value rounded to T is z (into zs),
// and the value becomes gelu(z) (gelu_tanh(z) in the tanh form).
template <typename T, int kN>
__device__ __forceinline__ void gelu_forward_of(GeluWriteOut mode, float (&v)[kN], T (&zs)[kN]) {
  round_through<T, kN>(v, zs);
  if (is_gelu_tanh(mode)) {
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = cuda::math::gelu_tanh(v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = cuda::math::gelu(v[j]);
  }
}

// A pair of output values v (f32, the bias and any relu applied) through
// the form kMode, as the wgmma products' write-outs take them (their
// stmatrix fragments hold pairs): forward, z (v rounded) goes into the
// packed register z2 and v becomes gelu(z); gradient, z comes from z2 and v
// becomes gelu's gradient at it; kNone leaves both. Returns y's packed pair.
template <typename T, GeluWriteOut kMode>
__device__ __forceinline__ uint32_t gelu_pair(float (&v)[2], uint32_t& z2) {
  T z[2];
  if constexpr (is_gelu_forward(kMode)) {
    gelu_forward_of<T, 2>(kMode, v, z);
    memcpy(&z2, z, sizeof(z2));
  } else if constexpr (is_gelu_gradient(kMode)) {
    memcpy(z, &z2, sizeof(z2));
    gelu_gradient_of<T, 2>(kMode, z, v);
  }
  return cuda::pack2<T>(v[0], v[1]);
}

// `count` <= kN values v (f32, the bias added) bound for a run of the output
// whose elements step by `step`; `z` points at the run's first element in
// the auxiliary matrix. kForward: each value rounded to T is z, stored there,
// and the value becomes gelu(z); kGradient: the value rounded to T becomes
// gelu's gradient at the z stored there; kForwardTanh and kGradientTanh: the
// same with gelu_tanh and its gradient (scalar_math.h's, as the elementwise
// ops compute them, in f32). `vec`: the run is kN elements, contiguous and
// 16-byte aligned in the auxiliary matrix (kN * sizeof(T) is 16), so it moves
// as one 16-byte access. `mode` is the launch's (uniform): its branches do
// not diverge, and each form's loop is its own.
template <typename T, int kN>
__device__ __forceinline__ void gelu_run(GeluWriteOut mode, T* z, int64_t step, bool vec, float (&v)[kN], int count) {
  static_assert(kN * sizeof(T) == 16, "a run is one 16-byte access");
  // Every loop unrolled, the partial runs predicated: v and zs stay in registers.
  T zs[kN];
  if (is_gelu_gradient(mode)) {
    if (vec) {
      const uint4 packed = *reinterpret_cast<const uint4*>(z);
      memcpy(zs, &packed, sizeof(packed));
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) zs[j] = j < count ? z[j * step] : from_float<T>(0.0f);
    }
    gelu_gradient_of<T, kN>(mode, zs, v);
    return;
  }
  gelu_forward_of<T, kN>(mode, v, zs);
  if (vec) {
    uint4 packed;
    memcpy(&packed, zs, sizeof(packed));
    *reinterpret_cast<uint4*>(z) = packed;
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      if (j < count) z[j * step] = zs[j];
    }
  }
}

}  // namespace coppice::sparse_cuda
