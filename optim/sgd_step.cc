#include "optim/sgd_step.h"

#include "optim/fused_step.h"

namespace coppice {

template <typename T>
void sgd_step_cpu(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args) {
  const SgdStepConstants<T> c = SgdStepConstants<T>::make(args);
  for (int64_t i = 0; i < n; ++i) {
    T b = c.reads_buffer() ? buf[i] : T(0);
    sgd_step_element<T>(p[i], g[i], b, c);
    if (c.has_momentum) buf[i] = b;
  }
}

template void sgd_step_cpu<float>(float*, const float*, float*, int64_t, const SgdStepArgs&);
template void sgd_step_cpu<double>(double*, const double*, double*, int64_t, const SgdStepArgs&);

bool fused_sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStepArgs& args) {
  const bool has_momentum = args.momentum != 0.0;
  const bool applies =
      has_momentum ? fused_step_applies("sgd_step", p, {&g, &buf}) : fused_step_applies("sgd_step", p, {&g});
  if (!applies) return false;
  // Without momentum the buffer travels as an undefined input ("none").
  run_fused_step("sgd_step", {p, g, has_momentum ? buf : Tensor()}, fused_step_attrs(args));
  return true;
}

namespace {

std::vector<Tensor> sgd_step_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  with_fused_step_type(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    sgd_step_cpu<T>(in[0].data<T>(), in[1].data<T>(), in[2].defined() ? in[2].data<T>() : nullptr, in[0].numel(), args);
  });
  return {};
}

const KernelRegistrar kCpu("sgd_step", DeviceType::kCpu, {"dense", "dense", "dense"}, sgd_step_cpu_kernel);
const KernelRegistrar kCpuNoMomentum("sgd_step", DeviceType::kCpu, {"dense", "dense", "none"}, sgd_step_cpu_kernel);

}  // namespace
}  // namespace coppice
