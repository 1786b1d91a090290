// What the per-element arithmetic of the fused optimizer steps
// (optim/adam_step_math.h, optim/sgd_step_math.h) shares: the host/device
// qualifier, and products and sums rounded one at a time. Plain C++ that
// nvcc also compiles, so it includes no tensor headers.
#pragma once

#if defined(__CUDACC__)
#define COPPICE_OPTIM_HD __host__ __device__
#else
#define COPPICE_OPTIM_HD
#endif

namespace coppice {

// a * b, a + b and a - b each rounded to nearest on their own. nvcc contracts
// a * b + c into one fused multiply-add (one rounding) unless told not to;
// the tensor-op path rounds the product and the sum separately, and so does
// the CPU (the project builds for x86-64-v2, which has no FMA), so with these
// the CUDA kernel agrees with its CPU twin bit for bit.
#if defined(__CUDA_ARCH__)
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
#else
template <typename T>
inline T mul_rn(T a, T b) {
  return a * b;
}
template <typename T>
inline T add_rn(T a, T b) {
  return a + b;
}
template <typename T>
inline T sub_rn(T a, T b) {
  return a - b;
}
#endif

}  // namespace coppice
