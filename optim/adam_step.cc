#include "optim/adam_step.h"

#include <type_traits>

#include "optim/finite_check_math.h"
#include "optim/fused_step.h"
#include "tensor/op_table.h"

namespace coppice {

template <typename T>
void adam_step_cpu(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args, float* nonfinite,
                   const float* factor) {
  const AdamStepConstants<T> c = AdamStepConstants<T>::make(args);
  if (factor != nullptr && clip_factor_skips(*factor)) return;
  const T f = factor != nullptr ? static_cast<T>(*factor) : T(1);
  // The gradient tested a block at a time, right after the step read it
  // (optim/fused_step.h); the factor's multiply only where there is one.
  auto step = [&](int64_t b, int64_t count) {
    if (factor == nullptr) {
      for (int64_t i = b; i < b + count; ++i) adam_step_element<T>(p[i], g[i], m[i], v[i], c);
    } else {
      for (int64_t i = b; i < b + count; ++i) adam_step_element<T>(p[i], mul_rn(g[i], f), m[i], v[i], c);
    }
  };
  if constexpr (std::is_same_v<T, double>) {
    fused_step_blocks(g, kF64ExponentBits, n, nonfinite, step);
  } else {
    fused_step_blocks(g, kF32ExponentBits, n, nonfinite, step);
  }
}

template void adam_step_cpu<float>(float*, const float*, float*, float*, int64_t, const AdamStepArgs&, float*,
                                   const float*);
template void adam_step_cpu<double>(double*, const double*, double*, double*, int64_t, const AdamStepArgs&, float*,
                                    const float*);

bool fused_adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamStepArgs& args,
                     const Tensor& nonfinite, const Tensor& factor) {
  if (!fused_step_applies(op::kAdamStep, p, {&g, &m, &v})) return false;
  run_fused_step(op::kAdamStep, {p, g, m, v}, fused_step_attrs(args), nonfinite, factor);
  return true;
}

namespace {

// Inputs p, g, m, v, flag (or none), factor (or none).
std::vector<Tensor> adam_step_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<AdamStepArgs>(attrs);
  with_fused_step_type(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    adam_step_cpu<T>(in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(), in[0].numel(), args,
                     fused_step_flag(in), fused_step_factor(in));
  });
  return {};
}

const FusedStepRegistrar kCpu(op::kAdamStep, DeviceType::kCpu, {"dense", "dense", "dense", "dense"},
                              adam_step_cpu_kernel);

}  // namespace
}  // namespace coppice
