// One thread per element (grid-stride), the arithmetic of sgd_step_math.h.
// The step is bound by memory traffic (3 or 5 arrays of 4 or 8 bytes per
// element), so the kernel only makes sure it reads nothing it does not need:
// no buffer on the first step or without momentum.
#include "optim/cuda/sgd_step.h"

namespace coppice::optim_cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t n,
                           SgdStepConstants<T> c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T pi = p[i];
    T bi = c.reads_buffer() ? buf[i] : T(0);
    sgd_step_element<T>(pi, g[i], bi, c);
    p[i] = pi;
    if (c.has_momentum) buf[i] = bi;
  }
}

}  // namespace

template <typename T>
void sgd_step(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  sgd_kernel<T><<<grid, kThreads, 0, stream>>>(p, g, buf, n, SgdStepConstants<T>::make(args));
}

template void sgd_step<float>(float*, const float*, float*, int64_t, const SgdStepArgs&, cudaStream_t);
template void sgd_step<double>(double*, const double*, double*, int64_t, const SgdStepArgs&, cudaStream_t);

}  // namespace coppice::optim_cuda
