// Grid-stride kernels with the arithmetic of sgd_step_math.h: one element a
// thread, and four a thread for the mixed-precision step (sgd_mixed4_kernel,
// where the arrays are aligned for it). The step is bound by memory traffic
// (3 or 5 arrays of 2 to 8 bytes per element), so the kernels only make sure
// they read nothing they do not need: no buffer on the first step or without
// momentum. The non-finite test of the gradient (a flag given) rides on the
// read the step makes anyway: a few integer instructions per element and a
// store only where an inf or NaN was read. A clip factor (step_variants.h)
// multiplies each gradient element as it is read, or skips the step.
#include "optim/cuda/sgd_step.h"
#include "optim/cuda/step_variants.h"
#include "optim/finite_check_math.h"

namespace coppice::optim_cuda {
namespace {

constexpr int kThreads = 256;

// With kCheck, also whether any gradient element read is inf or NaN: a
// thread that saw one stores a NaN into *flag (every such thread stores the
// same NaN, so the race is benign and needs no atomic). No barrier and no
// vote: a finite step, the only one that matters for speed, stores nothing
// and pays a few integer instructions per element (a block-wide
// __syncthreads_or here cost 60 us a step on the MLP-4096's 50 M values, H100).
template <bool kCheck>
__device__ inline void raise_nonfinite(bool hit, float* flag) {
  if constexpr (kCheck) {
    if (hit) *flag = __int_as_float(0x7fc00000);  // a quiet NaN
  }
}

template <typename T, bool kCheck, bool kScale>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t n,
                           SgdStepConstants<T> c, float* flag, const float* factor) {
  T f;
  if (!read_clip_factor<kScale>(factor, &f)) return;
  bool hit = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T gi = g[i];
    if constexpr (kCheck) hit |= is_nonfinite_value(gi);
    T pi = p[i];
    T bi = c.reads_buffer() ? buf[i] : T(0);
    sgd_step_element<T>(pi, scale_gradient<kScale>(gi, f), bi, c);
    p[i] = pi;
    if (c.has_momentum) buf[i] = bi;
  }
  raise_nonfinite<kCheck>(hit, flag);
}

// The mixed-precision step: f32 master and buffer, the 16-bit gradient
// widened on the way in (and tested as widened: inf or NaN exactly when the
// 16-bit value was) and the master rounded into the 16-bit parameter on
// the way out (2 + 4 + 4 + 4 + 2 bytes per element with momentum, against
// 2 + 4 + 4 (cast) + 12 + 4 (step) + 4 + 2 (copy back) unfused).
template <typename G, bool kCheck, bool kScale>
__global__ void sgd_mixed_kernel(float* __restrict__ master, const G* __restrict__ g16, float* __restrict__ buf,
                                 G* __restrict__ p16, int64_t n, SgdStepConstants<float> c, float* flag,
                                 const float* factor) {
  float f;
  if (!read_clip_factor<kScale>(factor, &f)) return;
  bool hit = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = static_cast<float>(g16[i]);
    if constexpr (kCheck) hit |= is_nonfinite_value(gi);
    float pi = master[i];
    float bi = c.reads_buffer() ? buf[i] : 0.0f;
    sgd_step_element<float>(pi, scale_gradient<kScale>(gi, f), bi, c);
    master[i] = pi;
    if (c.has_momentum) buf[i] = bi;
    p16[i] = G(pi);
  }
  raise_nonfinite<kCheck>(hit, flag);
}

// The same step four elements a thread at a time: 16-byte loads and stores
// of the master and buffer, 8-byte ones of the 16-bit gradient and
// parameter. One element per thread left the kernel bound by instruction
// issue rather than memory (the non-finite test alone made it 12 % slower
// on the H100); four share the index arithmetic and the loads' latency. Each
// element's arithmetic is the scalar kernel's, so the results are the same
// bits. For pointers aligned to those widths; the scalar kernel takes the
// rest.
template <typename G, bool kCheck, bool kScale>
__global__ void sgd_mixed4_kernel(float4* __restrict__ master, const uint2* __restrict__ g16, float4* __restrict__ buf,
                                  uint2* __restrict__ p16, int64_t n4, SgdStepConstants<float> c, float* flag,
                                  const float* factor) {
  static_assert(sizeof(G) == 2, "a 16-bit gradient");
  float f;
  if (!read_clip_factor<kScale>(factor, &f)) return;
  bool hit = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint2 g_raw = g16[i];
    G g4[4];
    memcpy(g4, &g_raw, sizeof g_raw);
    const float4 m = master[i];
    const float4 b = c.reads_buffer() ? buf[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float pm[4] = {m.x, m.y, m.z, m.w};
    float pb[4] = {b.x, b.y, b.z, b.w};
    G out[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float gi = static_cast<float>(g4[k]);
      if constexpr (kCheck) hit |= is_nonfinite_value(gi);
      sgd_step_element<float>(pm[k], scale_gradient<kScale>(gi, f), pb[k], c);
      out[k] = G(pm[k]);
    }
    master[i] = make_float4(pm[0], pm[1], pm[2], pm[3]);
    if (c.has_momentum) buf[i] = make_float4(pb[0], pb[1], pb[2], pb[3]);
    uint2 p_raw;
    memcpy(&p_raw, out, sizeof p_raw);
    p16[i] = p_raw;
  }
  raise_nonfinite<kCheck>(hit, flag);
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

}  // namespace

template <typename G>
void sgd_step_mixed(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepArgs& args,
                    float* nonfinite, const float* factor, cudaStream_t stream) {
  if (n <= 0) return;
  const SgdStepConstants<float> c = SgdStepConstants<float>::make(args);
  // Four at a time where every array allows it, the tail one at a time.
  const bool wide = aligned(master, 16) && aligned(g16, 8) && aligned(p16, 8) && (buf == nullptr || aligned(buf, 16));
  const int64_t n4 = wide ? n / 4 : 0;
  if (n4 > 0) {
    auto* m4 = reinterpret_cast<float4*>(master);
    const auto* g4 = reinterpret_cast<const uint2*>(g16);
    auto* b4 = reinterpret_cast<float4*>(buf);
    auto* p4 = reinterpret_cast<uint2*>(p16);
    with_step_variant(nonfinite != nullptr, factor != nullptr, [&](auto check, auto scale) {
      sgd_mixed4_kernel<G, decltype(check)::value, decltype(scale)::value>
          <<<grid_for(n4), kThreads, 0, stream>>>(m4, g4, b4, p4, n4, c, nonfinite, factor);
    });
  }
  const int64_t done = n4 * 4, rest = n - done;
  if (rest == 0) return;
  float* b_rest = buf == nullptr ? nullptr : buf + done;
  with_step_variant(nonfinite != nullptr, factor != nullptr, [&](auto check, auto scale) {
    sgd_mixed_kernel<G, decltype(check)::value, decltype(scale)::value><<<grid_for(rest), kThreads, 0, stream>>>(
        master + done, g16 + done, b_rest, p16 + done, rest, c, nonfinite, factor);
  });
}

template void sgd_step_mixed<BFloat16>(float*, const BFloat16*, float*, BFloat16*, int64_t, const SgdStepArgs&, float*,
                                       const float*, cudaStream_t);
template void sgd_step_mixed<Half>(float*, const Half*, float*, Half*, int64_t, const SgdStepArgs&, float*,
                                   const float*, cudaStream_t);

template <typename T>
void sgd_step(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, float* nonfinite, const float* factor,
              cudaStream_t stream) {
  if (n <= 0) return;
  const SgdStepConstants<T> c = SgdStepConstants<T>::make(args);
  with_step_variant(nonfinite != nullptr, factor != nullptr, [&](auto check, auto scale) {
    sgd_kernel<T, decltype(check)::value, decltype(scale)::value>
        <<<grid_for(n), kThreads, 0, stream>>>(p, g, buf, n, c, nonfinite, factor);
  });
}

template void sgd_step<float>(float*, const float*, float*, int64_t, const SgdStepArgs&, float*, const float*,
                              cudaStream_t);
template void sgd_step<double>(double*, const double*, double*, int64_t, const SgdStepArgs&, float*, const float*,
                               cudaStream_t);

}  // namespace coppice::optim_cuda
