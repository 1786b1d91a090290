#include "optim/adam_step.h"

#include "optim/fused_step.h"

namespace coppice {

template <typename T>
void adam_step_cpu(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args) {
  const AdamStepConstants<T> c = AdamStepConstants<T>::make(args);
  for (int64_t i = 0; i < n; ++i) adam_step_element<T>(p[i], g[i], m[i], v[i], c);
}

template void adam_step_cpu<float>(float*, const float*, float*, float*, int64_t, const AdamStepArgs&);
template void adam_step_cpu<double>(double*, const double*, double*, double*, int64_t, const AdamStepArgs&);

AdamStepArgs adam_step_args(const Attrs& attrs) {
  AdamStepArgs a;
  a.lr = attrs.get_double("lr");
  a.beta1 = attrs.get_double("beta1");
  a.beta2 = attrs.get_double("beta2");
  a.eps = attrs.get_double("eps");
  a.weight_decay = attrs.get_double("weight_decay");
  a.decoupled = attrs.get_bool("decoupled");
  a.step = attrs.get_int("step");
  return a;
}

bool fused_adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamStepArgs& args) {
  if (!fused_step_applies("adam_step", p, {&g, &m, &v})) return false;
  Attrs attrs;
  attrs.set("lr", args.lr)
      .set("beta1", args.beta1)
      .set("beta2", args.beta2)
      .set("eps", args.eps)
      .set("weight_decay", args.weight_decay)
      .set("decoupled", args.decoupled)
      .set("step", args.step);
  run_fused_step("adam_step", {p, g, m, v}, attrs);
  return true;
}

namespace {

std::vector<Tensor> adam_step_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const AdamStepArgs args = adam_step_args(attrs);
  with_fused_step_type(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    adam_step_cpu<T>(in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(), in[0].numel(), args);
  });
  return {};
}

const KernelRegistrar kCpu("adam_step", DeviceType::kCpu, {"dense", "dense", "dense", "dense"},
                           adam_step_cpu_kernel);

}  // namespace
}  // namespace coppice
