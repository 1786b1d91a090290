#include "optim/sgd_step.h"

#include <type_traits>

#include "optim/finite_check_math.h"
#include "optim/fused_step.h"
#include "tensor/op_table.h"

namespace coppice {
namespace {

// The loops as they were before the non-finite test; the CPU twins test a
// block's gradient after stepping it (any_nonfinite_words, optim/fused_step.h).
// kScale: each gradient element multiplied by the clip factor f as it is read.
template <typename T, bool kScale>
void sgd_loop(T* p, const T* g, T* buf, int64_t n, const SgdStepConstants<T>& c, T f) {
  for (int64_t i = 0; i < n; ++i) {
    T b = c.reads_buffer() ? buf[i] : T(0);
    sgd_step_element<T>(p[i], kScale ? mul_rn(g[i], f) : g[i], b, c);
    if (c.has_momentum) buf[i] = b;
  }
}

template <typename G, bool kScale>
void sgd_mixed_loop(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepConstants<float>& c,
                    float f) {
  for (int64_t i = 0; i < n; ++i) {
    float b = c.reads_buffer() ? buf[i] : 0.0f;
    const float gi = static_cast<float>(g16[i]);
    sgd_step_element<float>(master[i], kScale ? mul_rn(gi, f) : gi, b, c);
    if (c.has_momentum) buf[i] = b;
    p16[i] = G(master[i]);
  }
}

// The exponent bits of T, as a word of its width.
template <typename T>
auto exponent_bits() {
  if constexpr (std::is_same_v<T, double>) {
    return kF64ExponentBits;
  } else if constexpr (std::is_same_v<T, float>) {
    return kF32ExponentBits;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return kBF16ExponentBits;
  } else {
    static_assert(std::is_same_v<T, Half>);
    return kF16ExponentBits;
  }
}

}  // namespace

template <typename T>
void sgd_step_cpu(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, float* nonfinite, const float* factor) {
  const SgdStepConstants<T> c = SgdStepConstants<T>::make(args);
  if (factor != nullptr && clip_factor_skips(*factor)) return;
  const T f = factor != nullptr ? static_cast<T>(*factor) : T(1);
  fused_step_blocks(g, exponent_bits<T>(), n, nonfinite, [&](int64_t b, int64_t count) {
    T* bb = buf == nullptr ? nullptr : buf + b;
    if (factor == nullptr) {
      sgd_loop<T, false>(p + b, g + b, bb, count, c, f);
    } else {
      sgd_loop<T, true>(p + b, g + b, bb, count, c, f);
    }
  });
}

template void sgd_step_cpu<float>(float*, const float*, float*, int64_t, const SgdStepArgs&, float*, const float*);
template void sgd_step_cpu<double>(double*, const double*, double*, int64_t, const SgdStepArgs&, float*, const float*);

template <typename G>
void sgd_step_mixed_cpu(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepArgs& args,
                        float* nonfinite, const float* factor) {
  const SgdStepConstants<float> c = SgdStepConstants<float>::make(args);
  if (factor != nullptr && clip_factor_skips(*factor)) return;
  const float f = factor != nullptr ? *factor : 1.0f;
  fused_step_blocks(g16, exponent_bits<G>(), n, nonfinite, [&](int64_t b, int64_t count) {
    float* bb = buf == nullptr ? nullptr : buf + b;
    if (factor == nullptr) {
      sgd_mixed_loop<G, false>(master + b, g16 + b, bb, p16 + b, count, c, f);
    } else {
      sgd_mixed_loop<G, true>(master + b, g16 + b, bb, p16 + b, count, c, f);
    }
  });
}

template void sgd_step_mixed_cpu<BFloat16>(float*, const BFloat16*, float*, BFloat16*, int64_t, const SgdStepArgs&,
                                           float*, const float*);
template void sgd_step_mixed_cpu<Half>(float*, const Half*, float*, Half*, int64_t, const SgdStepArgs&, float*,
                                       const float*);

bool fused_sgd_step_mixed(const Tensor& master, const Tensor& g16, const Tensor& buf, const Tensor& p16,
                          const SgdStepArgs& args, const Tensor& nonfinite, const Tensor& factor) {
  const bool has_momentum = args.momentum != 0.0;
  if (!master.defined() || master.dtype() != DType::kF32) return false;
  if (has_momentum ? !fused_step_applies(op::kSgdStepMixed, master, {&buf})
                   : !fused_step_applies(op::kSgdStepMixed, master, {})) {
    return false;
  }
  for (const Tensor* t : {&g16, &p16}) {
    if (!t->defined() || !t->is_dense() || !t->is_contiguous() || t->device() != master.device() ||
        t->shape() != master.shape() || (t->dtype() != DType::kBF16 && t->dtype() != DType::kF16) ||
        t->dtype() != g16.dtype()) {
      return false;
    }
  }
  run_fused_step(op::kSgdStepMixed, {master, g16, has_momentum ? buf : Tensor(), p16}, fused_step_attrs(args),
                 nonfinite, factor);
  return true;
}

bool fused_sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStepArgs& args,
                    const Tensor& nonfinite, const Tensor& factor) {
  const bool has_momentum = args.momentum != 0.0;
  const bool applies =
      has_momentum ? fused_step_applies(op::kSgdStep, p, {&g, &buf}) : fused_step_applies(op::kSgdStep, p, {&g});
  if (!applies) return false;
  // Without momentum the buffer travels as an undefined input ("none").
  run_fused_step(op::kSgdStep, {p, g, has_momentum ? buf : Tensor()}, fused_step_attrs(args), nonfinite, factor);
  return true;
}

namespace {

// Inputs p, g, buf (or none), flag (or none), factor (or none).
std::vector<Tensor> sgd_step_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  with_fused_step_type(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    sgd_step_cpu<T>(in[0].data<T>(), in[1].data<T>(), in[2].defined() ? in[2].data<T>() : nullptr, in[0].numel(), args,
                    fused_step_flag(in), fused_step_factor(in));
  });
  return {};
}

const FusedStepRegistrar kCpu(op::kSgdStep, DeviceType::kCpu, {"dense", "dense", "dense"}, sgd_step_cpu_kernel);
const FusedStepRegistrar kCpuNoMomentum(op::kSgdStep, DeviceType::kCpu, {"dense", "dense", "none"},
                                        sgd_step_cpu_kernel);

// Inputs master, g16, buf (or none), p16, flag (or none), factor (or none).
std::vector<Tensor> sgd_step_mixed_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  float* buf = in[2].defined() ? in[2].data<float>() : nullptr;
  float* flag = fused_step_flag(in);
  const float* factor = fused_step_factor(in);
  if (in[1].dtype() == DType::kBF16) {
    sgd_step_mixed_cpu<BFloat16>(in[0].data<float>(), in[1].data<BFloat16>(), buf, in[3].data<BFloat16>(),
                                 in[0].numel(), args, flag, factor);
  } else {
    sgd_step_mixed_cpu<Half>(in[0].data<float>(), in[1].data<Half>(), buf, in[3].data<Half>(), in[0].numel(), args,
                             flag, factor);
  }
  return {};
}

const FusedStepRegistrar kCpuMixed(op::kSgdStepMixed, DeviceType::kCpu, {"dense", "dense", "dense", "dense"},
                                   sgd_step_mixed_cpu_kernel);
const FusedStepRegistrar kCpuMixedNoMomentum(op::kSgdStepMixed, DeviceType::kCpu, {"dense", "dense", "none", "dense"},
                                             sgd_step_mixed_cpu_kernel);

}  // namespace
}  // namespace coppice
