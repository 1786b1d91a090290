// Plumbing shared by the fused optimizer steps (optim/adam_step.h,
// optim/sgd_step.h and their CUDA twins in optim/cuda): when a fused kernel
// may run, running it through the dispatcher (whose op profiler counts the
// calls, so tests and diagnostics can tell which path a step took:
// tensor/op_profile.h), the f32/f64 switch of the kernels, and their last
// two inputs. The non-finite flag: an f32 0-d tensor (a slot of a
// NonfiniteFlag, optim/finite_check.h) that the kernel sets to NaN when a
// gradient element it reads is inf or NaN, or undefined ("none"): no test,
// and no cost (the kernels branch once, outside their loop). The clip
// factor: an f32 0-d tensor on the device (optim/clip.h,
// clip_grad_norm_on_device) that the kernel multiplies each gradient element
// by as it reads it (one rounding: the bits of clip_grad_norm's rescaled f32
// gradient), skipping the whole step when it is not finite, or undefined
// ("none").
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
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
// nothing) with `nonfinite` and `factor` appended to `inputs` as the flag and
// the clip factor. Each, when defined, must be an f32 tensor of one element
// on the device of inputs[0] (throws otherwise).
void run_fused_step(std::string_view op, std::vector<Tensor> inputs, const Attrs& attrs,
                    const Tensor& nonfinite = Tensor(), const Tensor& factor = Tensor());

// Registers `kernel` for `op` on `device` with `formats` (the inputs but the
// flag and the factor) followed by "dense" or "none" for each of the two.
struct FusedStepRegistrar {
  FusedStepRegistrar(const std::string& op, DeviceType device, std::vector<std::string> formats, Kernel kernel);
};

// The CPU twins' non-finite test: whether any of the n words at `words`
// (values of Word's width; a float's bits, read bytewise) has all of
// `mask`'s bits set, 16 bytes at a time (SSE on the project's x86-64-v2:
// GCC's and Clang's vector extensions), the tail word by word. A twin steps
// its elements a block at a time (kFusedStepCheckBlock) and tests the
// block's gradient right after, while it is still in cache: the step's
// scalar loop stays as it is (a test inside it would cost a quarter of it).
inline constexpr int64_t kFusedStepCheckBlock = 4096;

template <typename Word>
bool any_nonfinite_words(const void* words, int64_t n, Word mask) {
  typedef Word Vec __attribute__((vector_size(16)));
  constexpr int64_t kLanes = static_cast<int64_t>(sizeof(Vec) / sizeof(Word));
  const auto* bytes = static_cast<const unsigned char*>(words);
  const Vec m = Vec{} + mask;
  Vec hit = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec v;
    std::memcpy(&v, bytes + i * static_cast<int64_t>(sizeof(Word)), sizeof v);
    hit |= reinterpret_cast<Vec>((v & m) == m);
  }
  bool any = false;
  for (int64_t l = 0; l < kLanes; ++l) any = any || hit[l] != 0;
  for (; i < n; ++i) {
    Word w;
    std::memcpy(&w, bytes + i * static_cast<int64_t>(sizeof(Word)), sizeof w);
    any = any || (w & mask) == mask;
  }
  return any;
}

// Runs step(begin, count) over [0, n): in one go without a flag; with one,
// a block at a time, each block's gradient g (n values whose exponent bits
// are `mask`: for a 16-bit gradient, its 16-bit words as read) tested right
// after the step read it, and the flag set to NaN once if one was inf or NaN.
template <typename T, typename Word, typename Step>
void fused_step_blocks(const T* g, Word mask, int64_t n, float* nonfinite, Step&& step) {
  static_assert(sizeof(T) == sizeof(Word), "the mask is a word of the gradient's width");
  if (nonfinite == nullptr) {
    step(int64_t{0}, n);
    return;
  }
  bool found = false;
  for (int64_t begin = 0; begin < n; begin += kFusedStepCheckBlock) {
    const int64_t count = std::min(kFusedStepCheckBlock, n - begin);
    step(begin, count);
    found = any_nonfinite_words<Word>(g + begin, count, mask) || found;
  }
  if (found) *nonfinite = std::numeric_limits<float>::quiet_NaN();
}

// In a kernel: the flag's address (inputs' last but one), or null without one.
inline float* fused_step_flag(const std::vector<Tensor>& inputs) {
  const Tensor& f = inputs[inputs.size() - 2];
  return f.defined() ? f.data<float>() : nullptr;
}

// In a kernel: the clip factor's address (inputs' last), or null without one.
inline const float* fused_step_factor(const std::vector<Tensor>& inputs) {
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
