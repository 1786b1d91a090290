// Plumbing shared by the fused optimizer steps (optim/adam_step.h,
// optim/sgd_step.h and their CUDA twins in optim/cuda): when a fused kernel
// may run, running it through the dispatcher (whose op profiler counts the
// calls, so tests and diagnostics can tell which path a step took:
// tensor/op_profile.h), the f32/f64 switch of the kernels, and their last
// input, the non-finite flag: an f32 0-d tensor (a slot of a NonfiniteFlag,
// optim/finite_check.h) that the kernel sets to NaN when a gradient element
// it reads is inf or NaN, or undefined ("none"): no test, and no cost (the
// kernels branch once, outside their loop).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/tensor.h"

namespace coppice {

// True when a kernel `op` is registered for p's device and p and every one
// of `others` are defined, dense, contiguous, of p's dtype (f32 or f64),
// shape and device. The fused kernels index one flat array per tensor, so
// anything else takes the tensor-op path.
bool fused_step_applies(std::string_view op, const Tensor& p, std::initializer_list<const Tensor*> others);

// Dispatches `op` (a fused step writes its outputs in place and returns
// nothing) with `nonfinite` appended to `inputs` as the flag. A defined
// `nonfinite` must be an f32 tensor of one element on the device of
// inputs[0] (throws otherwise).
void run_fused_step(std::string_view op, std::vector<Tensor> inputs, const Attrs& attrs,
                    const Tensor& nonfinite = Tensor());

// Registers `kernel` for `op` on `device` with `formats` (the inputs but the
// flag) followed by "dense" and by "none": with and without the flag.
struct FusedStepRegistrar {
  FusedStepRegistrar(const std::string& op, DeviceType device, std::vector<std::string> formats, Kernel kernel);
};

// In a kernel: the flag's address (inputs' last), or null without one.
inline float* fused_step_flag(const std::vector<Tensor>& inputs) {
  const Tensor& f = inputs.back();
  return f.defined() ? f.data<float>() : nullptr;
}

// A step's arguments (AdamStepArgs, SgdStepArgs: structs of double, bool and
// int64_t fields that name each field once in for_each_field) as dispatcher
// attributes, and back in the kernels.
template <typename Args>
Attrs fused_step_attrs(Args args) {
  Attrs attrs;
  args.for_each_field([&](const char* name, const auto& value) { attrs.set(name, value); });
  return attrs;
}

template <typename Args>
Args fused_step_args(const Attrs& attrs) {
  Args args;
  args.for_each_field([&](const char* name, auto& value) {
    using V = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<V, bool>) {
      value = attrs.get_bool(name);
    } else if constexpr (std::is_same_v<V, double>) {
      value = attrs.get_double(name);
    } else {
      static_assert(std::is_same_v<V, int64_t>, "a fused step's argument is double, bool or int64_t");
      value = attrs.get_int(name);
    }
  });
  return args;
}

// Calls f(T{}) with T = double for f64 and float otherwise (the callers have
// checked the dtype is one of the two).
template <typename F>
void with_fused_step_type(DType dtype, F&& f) {
  if (dtype == DType::kF64) {
    f(double{});
  } else {
    f(float{});
  }
}

}  // namespace coppice
