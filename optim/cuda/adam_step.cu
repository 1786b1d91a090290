// One thread per element (grid-stride), the arithmetic of adam_step_math.h.
#include "optim/cuda/adam_step.h"

namespace coppice::optim_cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, int64_t n,
                            AdamStepConstants<T> c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T pi = p[i], mi = m[i], vi = v[i];
    adam_step_element<T>(pi, g[i], mi, vi, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

template <typename T>
void adam_step(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  adam_kernel<T><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, AdamStepConstants<T>::make(args));
}

template void adam_step<float>(float*, const float*, float*, float*, int64_t, const AdamStepArgs&, cudaStream_t);
template void adam_step<double>(double*, const double*, double*, double*, int64_t, const AdamStepArgs&, cudaStream_t);

}  // namespace coppice::optim_cuda
