// Grid-stride, one read of every word: the pass is bound by memory traffic
// (2 to 8 bytes per element, nothing written but the one flag). Blocks that
// found a non-finite value all store the same NaN, so the race is benign and
// no atomic is needed; a block with none stores nothing.
#include "optim/cuda/finite_check.h"
#include "optim/finite_check_math.h"

namespace coppice::optim_cuda {
namespace {

constexpr int kThreads = 256;

template <typename Word>
__global__ void flag_nonfinite_kernel(const Word* __restrict__ words, int64_t n, Word mask, float* flag) {
  bool hit = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    hit |= is_nonfinite_bits<Word>(words[i], mask);
  }
  if (__syncthreads_or(hit) && threadIdx.x == 0) *flag = __int_as_float(0x7fc00000);  // a quiet NaN
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

}  // namespace

template <typename Word>
void flag_nonfinite(const Word* words, int64_t n, Word exponent_mask, float* flag, cudaStream_t stream) {
  if (n <= 0) return;
  flag_nonfinite_kernel<Word><<<grid_for(n), kThreads, 0, stream>>>(words, n, exponent_mask, flag);
}

template void flag_nonfinite<uint16_t>(const uint16_t*, int64_t, uint16_t, float*, cudaStream_t);
template void flag_nonfinite<uint32_t>(const uint32_t*, int64_t, uint32_t, float*, cudaStream_t);
template void flag_nonfinite<uint64_t>(const uint64_t*, int64_t, uint64_t, float*, cudaStream_t);

}  // namespace coppice::optim_cuda
