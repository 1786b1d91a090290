// The multi-tensor kernels: a thread block per chunk of kMultiChunk elements
// of one entry, the entry found by scanning the table's block_end (uniform
// across the block: a few compares). The step kernels apply the
// per-parameter kernels' element arithmetic (sgd_step_math.h,
// adam_step_math.h: every product and sum rounded on its own) to the same
// values in the same order, so they write the same bits; the gradient test,
// the clip factor and the 16-bit copy are the per-parameter kernels' too
// (sgd_step.cu, adam_step.cu). The norm kernels accumulate in f64 and
// reduce in a fixed tree, so a norm is the same bits every run (no atomics).
#include <cmath>
#include <type_traits>

#include "optim/cuda/multi_tensor.h"
#include "optim/cuda/step_variants.h"
#include "optim/finite_check_math.h"
#include "tensor/half.h"

namespace coppice::optim_cuda {
namespace {

constexpr int kThreads = 256;

// The entry of block b and the block's element range in it.
template <typename Table>
__device__ inline int entry_of_block(const Table& t, int64_t b, int64_t* begin, int64_t* end) {
  int k = 0;
  while (k + 1 < t.count && b >= t.block_end[k]) ++k;
  const int64_t first = k == 0 ? 0 : t.block_end[k - 1];
  *begin = (b - first) * kMultiChunk;
  const int64_t stop = *begin + kMultiChunk;
  *end = stop < t.n[k] ? stop : t.n[k];
  return k;
}

struct SgdOp {
  SgdStepConstants<float> c;
  __device__ void operator()(float& p, float g, float* s1, float*, int64_t i) const {
    float b = c.reads_buffer() ? s1[i] : 0.0f;
    sgd_step_element<float>(p, g, b, c);
    if (c.has_momentum) s1[i] = b;
  }
};

struct AdamOp {
  AdamStepConstants<float> c;
  __device__ void operator()(float& p, float g, float* m, float* v, int64_t i) const {
    float mi = m[i], vi = v[i];
    adam_step_element<float>(p, g, mi, vi, c);
    m[i] = mi;
    v[i] = vi;
  }
};

// G: the gradient's type (float, or BFloat16/Half with an f32 master and a
// 16-bit parameter written from it).
template <typename G, bool kCheck, bool kScale, typename Op>
__global__ void multi_step_kernel(StepTable t, Op op, const float* factor) {
  float f;
  if (!read_clip_factor<kScale>(factor, &f)) return;
  int64_t begin, end;
  const int k = entry_of_block(t, blockIdx.x, &begin, &end);
  float* __restrict__ param = t.param[k];
  const G* __restrict__ grad = static_cast<const G*>(t.grad[k]);
  float* s1 = t.state1[k];
  float* s2 = t.state2[k];
  G* __restrict__ p16 = static_cast<G*>(t.param16[k]);
  bool hit = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float gi = static_cast<float>(grad[i]);
    if constexpr (kCheck) hit |= is_nonfinite_value(gi);
    float pi = param[i];
    op(pi, scale_gradient<kScale>(gi, f), s1, s2, i);
    param[i] = pi;
    if constexpr (!std::is_same_v<G, float>) p16[i] = G(pi);
  }
  // As in sgd_step.cu: a store only where an inf or a NaN was read.
  if constexpr (kCheck) {
    if (hit && t.flag[k] != nullptr) *t.flag[k] = __int_as_float(0x7fc00000);  // a quiet NaN
  }
}

template <typename Op>
void launch_step(const StepTable& t, StepGrad grad, const Op& op, bool check, const float* factor,
                 cudaStream_t stream) {
  if (t.count <= 0) return;
  const int64_t blocks = t.block_end[t.count - 1];
  if (blocks <= 0) return;
  const auto grid = static_cast<unsigned>(blocks);
  with_step_variant(check, factor != nullptr, [&](auto c, auto s) {
    constexpr bool kCheck = decltype(c)::value, kScale = decltype(s)::value;
    switch (grad) {
      case StepGrad::kF32:
        multi_step_kernel<float, kCheck, kScale><<<grid, kThreads, 0, stream>>>(t, op, factor);
        break;
      case StepGrad::kBF16:
        multi_step_kernel<BFloat16, kCheck, kScale><<<grid, kThreads, 0, stream>>>(t, op, factor);
        break;
      case StepGrad::kF16: multi_step_kernel<Half, kCheck, kScale><<<grid, kThreads, 0, stream>>>(t, op, factor); break;
    }
  });
}

// ---- norms -------------------------------------------------------------------

template <NormKind kKind>
__device__ inline double combine(double acc, double x) {
  if constexpr (kKind == NormKind::kInf) {
    return (x > acc || x != x) ? x : acc;  // NaN wins, as in a sum
  } else {
    return acc + x;
  }
}

// |x| as the norm's term: x^2, |x|, |x|^p.
template <NormKind kKind>
__device__ inline double term(double x, double p) {
  const double a = fabs(x);
  if constexpr (kKind == NormKind::kTwo) {
    return a * a;
  } else if constexpr (kKind == NormKind::kPower) {
    return pow(a, p);
  } else {
    return a;
  }
}

// The block's values combined in a fixed tree; thread 0 returns it.
template <NormKind kKind>
__device__ inline double block_combine(double v) {
  __shared__ double s[kThreads];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] = combine<kKind>(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  return s[0];
}

template <NormKind kKind, typename V>
__device__ inline double combine_range(const void* values, int64_t begin, int64_t end, double p) {
  const V* v = static_cast<const V*>(values);
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    acc = combine<kKind>(acc, term<kKind>(static_cast<double>(static_cast<float>(v[i])), p));
  }
  return acc;
}

template <NormKind kKind>
__device__ inline double combine_range_f64(const void* values, int64_t begin, int64_t end, double p) {
  const double* v = static_cast<const double*>(values);
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) acc = combine<kKind>(acc, term<kKind>(v[i], p));
  return acc;
}

template <NormKind kKind>
__global__ void norm_blocks_kernel(NormTable t, double p, double* scratch) {
  int64_t begin, end;
  const int k = entry_of_block(t, blockIdx.x, &begin, &end);
  double acc = 0.0;
  switch (t.dtype[k]) {
    case NormDType::kF32: acc = combine_range<kKind, float>(t.values[k], begin, end, p); break;
    case NormDType::kF64: acc = combine_range_f64<kKind>(t.values[k], begin, end, p); break;
    case NormDType::kBF16: acc = combine_range<kKind, BFloat16>(t.values[k], begin, end, p); break;
    case NormDType::kF16: acc = combine_range<kKind, Half>(t.values[k], begin, end, p); break;
  }
  const double total = block_combine<kKind>(acc);
  if (threadIdx.x == 0) scratch[t.block_base + blockIdx.x] = total;
}

// Block k: entry k's block values, in a fixed order.
template <NormKind kKind>
__global__ void norm_entries_kernel(NormTable t, const double* scratch, double* partials) {
  const int k = blockIdx.x;
  const int64_t first = k == 0 ? 0 : t.block_end[k - 1];
  double acc = 0.0;
  for (int64_t b = first + threadIdx.x; b < t.block_end[k]; b += kThreads) {
    acc = combine<kKind>(acc, scratch[t.block_base + b]);
  }
  const double total = block_combine<kKind>(acc);
  if (threadIdx.x == 0) {
    partials[t.entry_base + k] = total;
    if (!isfinite(total) && t.flag[k] != nullptr) *t.flag[k] = __int_as_float(0x7fc00000);  // a quiet NaN
  }
}

template <NormKind kKind>
__global__ void norm_finish_kernel(const double* partials, int64_t count, double p, double max_norm, float* norm,
                                   float* factor) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) acc = combine<kKind>(acc, partials[i]);
  const double total = block_combine<kKind>(acc);
  if (threadIdx.x != 0) return;
  double n = total;
  if constexpr (kKind == NormKind::kTwo) {
    n = sqrt(total);
  } else if constexpr (kKind == NormKind::kPower) {
    n = pow(total, 1.0 / p);
  }
  // torch's clip_grad_norm_: max_norm / (norm + 1e-6), applied when below 1;
  // a norm that is not finite skips the step instead (NaN).
  const double coef = max_norm / (n + 1e-6);
  *norm = static_cast<float>(n);
  *factor = isfinite(n) ? static_cast<float>(coef < 1.0 ? coef : 1.0) : __int_as_float(0x7fc00000);
}

template <typename F>
void with_norm_kind(NormKind kind, F&& f) {
  switch (kind) {
    case NormKind::kTwo: f(std::integral_constant<NormKind, NormKind::kTwo>{}); break;
    case NormKind::kOne: f(std::integral_constant<NormKind, NormKind::kOne>{}); break;
    case NormKind::kInf: f(std::integral_constant<NormKind, NormKind::kInf>{}); break;
    case NormKind::kPower: f(std::integral_constant<NormKind, NormKind::kPower>{}); break;
  }
}

}  // namespace

void multi_sgd_step(const StepTable& table, StepGrad grad, const SgdStepArgs& args, bool check, const float* factor,
                    cudaStream_t stream) {
  launch_step(table, grad, SgdOp{SgdStepConstants<float>::make(args)}, check, factor, stream);
}

void multi_adam_step(const StepTable& table, StepGrad grad, const AdamStepArgs& args, bool check, const float* factor,
                     cudaStream_t stream) {
  launch_step(table, grad, AdamOp{AdamStepConstants<float>::make(args)}, check, factor, stream);
}

void multi_norm_partials(const NormTable& table, NormKind kind, double p, double* scratch, double* partials,
                         cudaStream_t stream) {
  if (table.count <= 0) return;
  const int64_t blocks = table.block_end[table.count - 1];
  with_norm_kind(kind, [&](auto k) {
    constexpr NormKind kKind = decltype(k)::value;
    if (blocks > 0)
      norm_blocks_kernel<kKind><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(table, p, scratch);
    norm_entries_kernel<kKind><<<table.count, kThreads, 0, stream>>>(table, scratch, partials);
  });
}

void multi_norm_finish(const double* partials, int64_t count, NormKind kind, double p, double max_norm, float* norm,
                       float* factor, cudaStream_t stream) {
  with_norm_kind(kind, [&](auto k) {
    norm_finish_kernel<decltype(k)::value><<<1, kThreads, 0, stream>>>(partials, count, p, max_norm, norm, factor);
  });
}

}  // namespace coppice::optim_cuda
