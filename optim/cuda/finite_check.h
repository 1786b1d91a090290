// The "nonfinite_flag" kernel on CUDA (the CPU twin is in
// optim/finite_check.cc; the test of one element in
// optim/finite_check_math.h): n words of the values' width on the device;
// *flag (f32, on the device) is set to NaN when one of them is inf or NaN.
// No host read: the caller reads the flag when it reads anyway.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppice::optim_cuda {

template <typename Word>
void flag_nonfinite(const Word* words, int64_t n, Word exponent_mask, float* flag, cudaStream_t stream);

}  // namespace coppice::optim_cuda
