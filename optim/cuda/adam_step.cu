// One thread per element (grid-stride), the arithmetic of adam_step_math.h;
// with a flag, the gradient's non-finite test on the read the step makes
// anyway (as in sgd_step.cu); with a clip factor, the gradient multiplied by
// it as it is read (step_variants.h).
#include "optim/cuda/adam_step.h"
#include "optim/cuda/step_variants.h"
#include "optim/finite_check_math.h"

namespace coppice::optim_cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, bool kCheck, bool kScale>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, int64_t n,
                            AdamStepConstants<T> c, float* flag, const float* factor) {
  T f;
  if (!read_clip_factor<kScale>(factor, &f)) return;
  bool hit = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T gi = g[i];
    if constexpr (kCheck) hit |= is_nonfinite_value(gi);
    T pi = p[i], mi = m[i], vi = v[i];
    adam_step_element<T>(pi, scale_gradient<kScale>(gi, f), mi, vi, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
  // A store only where an inf or a NaN was read (the same NaN from every
  // such thread: a benign race); no barrier on finite steps.
  if constexpr (kCheck) {
    if (hit) *flag = __int_as_float(0x7fc00000);  // a quiet NaN
  }
}

}  // namespace

template <typename T>
void adam_step(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args, float* nonfinite, const float* factor,
               cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  const AdamStepConstants<T> c = AdamStepConstants<T>::make(args);
  with_step_variant(nonfinite != nullptr, factor != nullptr, [&](auto check, auto scale) {
    adam_kernel<T, decltype(check)::value, decltype(scale)::value>
        <<<grid, kThreads, 0, stream>>>(p, g, m, v, n, c, nonfinite, factor);
  });
}

template void adam_step<float>(float*, const float*, float*, float*, int64_t, const AdamStepArgs&, float*, const float*,
                               cudaStream_t);
template void adam_step<double>(double*, const double*, double*, double*, int64_t, const AdamStepArgs&, float*,
                                const float*, cudaStream_t);

}  // namespace coppice::optim_cuda
