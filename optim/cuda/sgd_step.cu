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

// The mixed-precision step: f32 master and buffer, the 16-bit gradient
// widened on the way in and the master rounded into the 16-bit parameter on
// the way out (2 + 4 + 4 + 4 + 2 bytes per element with momentum, against
// 2 + 4 + 4 (cast) + 12 + 4 (step) + 4 + 2 (copy back) unfused).
template <typename G>
__global__ void sgd_mixed_kernel(float* __restrict__ master, const G* __restrict__ g16, float* __restrict__ buf,
                                 G* __restrict__ p16, int64_t n, SgdStepConstants<float> c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float pi = master[i];
    float bi = c.reads_buffer() ? buf[i] : 0.0f;
    sgd_step_element<float>(pi, static_cast<float>(g16[i]), bi, c);
    master[i] = pi;
    if (c.has_momentum) buf[i] = bi;
    p16[i] = G(pi);
  }
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

}  // namespace

template <typename G>
void sgd_step_mixed(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepArgs& args,
                    cudaStream_t stream) {
  if (n <= 0) return;
  sgd_mixed_kernel<G>
      <<<grid_for(n), kThreads, 0, stream>>>(master, g16, buf, p16, n, SgdStepConstants<float>::make(args));
}

template void sgd_step_mixed<BFloat16>(float*, const BFloat16*, float*, BFloat16*, int64_t, const SgdStepArgs&,
                                       cudaStream_t);
template void sgd_step_mixed<Half>(float*, const Half*, float*, Half*, int64_t, const SgdStepArgs&, cudaStream_t);

template <typename T>
void sgd_step(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p, g, buf, n, SgdStepConstants<T>::make(args));
}

template void sgd_step<float>(float*, const float*, float*, int64_t, const SgdStepArgs&, cudaStream_t);
template void sgd_step<double>(double*, const double*, double*, int64_t, const SgdStepArgs&, cudaStream_t);

}  // namespace coppice::optim_cuda
