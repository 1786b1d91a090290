#include "optim/sgd_step.h"

#include <limits>

#include "optim/finite_check_math.h"
#include "optim/fused_step.h"

namespace coppice {
namespace {

// The loops, with the non-finite test (kCheck) or without: returns whether
// an element of g was inf or NaN (always false without the test). The
// parameter and the buffer are computed the same way either way.
template <typename T, bool kCheck>
bool sgd_loop(T* p, const T* g, T* buf, int64_t n, const SgdStepConstants<T>& c) {
  bool nonfinite = false;
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    if constexpr (kCheck) nonfinite |= is_nonfinite_value(gi);
    T b = c.reads_buffer() ? buf[i] : T(0);
    sgd_step_element<T>(p[i], gi, b, c);
    if (c.has_momentum) buf[i] = b;
  }
  return nonfinite;
}

template <typename G, bool kCheck>
bool sgd_mixed_loop(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepConstants<float>& c) {
  bool nonfinite = false;
  for (int64_t i = 0; i < n; ++i) {
    // A 16-bit value widened is inf or NaN exactly when it was.
    const float gi = static_cast<float>(g16[i]);
    if constexpr (kCheck) nonfinite |= is_nonfinite_value(gi);
    float b = c.reads_buffer() ? buf[i] : 0.0f;
    sgd_step_element<float>(master[i], gi, b, c);
    if (c.has_momentum) buf[i] = b;
    p16[i] = G(master[i]);
  }
  return nonfinite;
}

void raise(float* nonfinite) { *nonfinite = std::numeric_limits<float>::quiet_NaN(); }

}  // namespace

template <typename T>
void sgd_step_cpu(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, float* nonfinite) {
  const SgdStepConstants<T> c = SgdStepConstants<T>::make(args);
  if (nonfinite == nullptr) {
    sgd_loop<T, false>(p, g, buf, n, c);
  } else if (sgd_loop<T, true>(p, g, buf, n, c)) {
    raise(nonfinite);
  }
}

template void sgd_step_cpu<float>(float*, const float*, float*, int64_t, const SgdStepArgs&, float*);
template void sgd_step_cpu<double>(double*, const double*, double*, int64_t, const SgdStepArgs&, float*);

template <typename G>
void sgd_step_mixed_cpu(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepArgs& args,
                        float* nonfinite) {
  const SgdStepConstants<float> c = SgdStepConstants<float>::make(args);
  if (nonfinite == nullptr) {
    sgd_mixed_loop<G, false>(master, g16, buf, p16, n, c);
  } else if (sgd_mixed_loop<G, true>(master, g16, buf, p16, n, c)) {
    raise(nonfinite);
  }
}

template void sgd_step_mixed_cpu<BFloat16>(float*, const BFloat16*, float*, BFloat16*, int64_t, const SgdStepArgs&,
                                           float*);
template void sgd_step_mixed_cpu<Half>(float*, const Half*, float*, Half*, int64_t, const SgdStepArgs&, float*);

bool fused_sgd_step_mixed(const Tensor& master, const Tensor& g16, const Tensor& buf, const Tensor& p16,
                          const SgdStepArgs& args, const Tensor& nonfinite) {
  const bool has_momentum = args.momentum != 0.0;
  if (!master.defined() || master.dtype() != DType::kF32) return false;
  if (has_momentum ? !fused_step_applies("sgd_step_mixed", master, {&buf})
                   : !fused_step_applies("sgd_step_mixed", master, {})) {
    return false;
  }
  for (const Tensor* t : {&g16, &p16}) {
    if (!t->defined() || !t->is_dense() || !t->is_contiguous() || t->device() != master.device() ||
        t->shape() != master.shape() || (t->dtype() != DType::kBF16 && t->dtype() != DType::kF16) ||
        t->dtype() != g16.dtype()) {
      return false;
    }
  }
  run_fused_step("sgd_step_mixed", {master, g16, has_momentum ? buf : Tensor(), p16}, fused_step_attrs(args),
                 nonfinite);
  return true;
}

bool fused_sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStepArgs& args,
                    const Tensor& nonfinite) {
  const bool has_momentum = args.momentum != 0.0;
  const bool applies =
      has_momentum ? fused_step_applies("sgd_step", p, {&g, &buf}) : fused_step_applies("sgd_step", p, {&g});
  if (!applies) return false;
  // Without momentum the buffer travels as an undefined input ("none").
  run_fused_step("sgd_step", {p, g, has_momentum ? buf : Tensor()}, fused_step_attrs(args), nonfinite);
  return true;
}

namespace {

// Inputs p, g, buf (or none), flag (or none).
std::vector<Tensor> sgd_step_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  with_fused_step_type(in[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    sgd_step_cpu<T>(in[0].data<T>(), in[1].data<T>(), in[2].defined() ? in[2].data<T>() : nullptr, in[0].numel(), args,
                    fused_step_flag(in));
  });
  return {};
}

const FusedStepRegistrar kCpu("sgd_step", DeviceType::kCpu, {"dense", "dense", "dense"}, sgd_step_cpu_kernel);
const FusedStepRegistrar kCpuNoMomentum("sgd_step", DeviceType::kCpu, {"dense", "dense", "none"}, sgd_step_cpu_kernel);

// Inputs master, g16, buf (or none), p16, flag (or none).
std::vector<Tensor> sgd_step_mixed_cpu_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  float* buf = in[2].defined() ? in[2].data<float>() : nullptr;
  float* flag = fused_step_flag(in);
  if (in[1].dtype() == DType::kBF16) {
    sgd_step_mixed_cpu<BFloat16>(in[0].data<float>(), in[1].data<BFloat16>(), buf, in[3].data<BFloat16>(),
                                 in[0].numel(), args, flag);
  } else {
    sgd_step_mixed_cpu<Half>(in[0].data<float>(), in[1].data<Half>(), buf, in[3].data<Half>(), in[0].numel(), args,
                             flag);
  }
  return {};
}

const FusedStepRegistrar kCpuMixed("sgd_step_mixed", DeviceType::kCpu, {"dense", "dense", "dense", "dense"},
                                   sgd_step_mixed_cpu_kernel);
const FusedStepRegistrar kCpuMixedNoMomentum("sgd_step_mixed", DeviceType::kCpu, {"dense", "dense", "none", "dense"},
                                             sgd_step_mixed_cpu_kernel);

}  // namespace
}  // namespace coppice
