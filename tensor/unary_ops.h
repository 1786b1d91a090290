// The unary elementwise ops, each declared once: its name, the dtypes it
// takes, whether f(0) = 0, its math and its gradient. Everything else about
// an op comes from here:
//
//   tensor/ops.h                  Tensor gelu(const Tensor& x), the frontend
//   tensor/cpu/unary.cc           the CPU kernel (the functor in a loop)
//   tensor/cuda/unary.cu          the CUDA kernel (the same functor)
//   sparse/{cpu,cuda}/elementwise the op on a sparse tensor's stored values,
//                                 for ops with kZeroPreserving
//   autograd/functions/elementwise.h  Variable gelu(const Variable& x), with
//                                 grad() as its backward
//   python/bind_autograd.cc       coppice.gelu, with kDoc as its docstring
//
// Adding an op: write its struct below and add one line to
// COPPICE_UNARY_OPS; its tests go beside the others' (tests/tensor/cpu/
// unary_test.cc and cuda/elementwise_test.cc compare every listed op with a
// reference; tests/autograd gradchecks every one).
//
// A struct has:
//   kName            the op's name (the dispatcher's key), the same as the
//                    function name in COPPICE_UNARY_OPS (checked below)
//   kDomain          the dtypes its kernel takes; integer inputs of a
//                    kFloating op are computed in f32 (exp of an i64 is a float)
//   kZeroPreserving  f(0) == 0: a sparse tensor keeps its pattern and maps its
//                    stored values (others take the counted dense fallback)
//   kGradUses        what grad() reads besides g: the input x, the output y
//                    or neither (only those are kept alive for the backward)
//   kDoc             the Python docstring
//   operator()(C v)  the math in the compute type C (float for bf16/f16),
//                    host and device (tensor/scalar_math.h)
//   grad(g, x, y)    dL/dx from dL/dy = g, in tensor ops (found by
//                    argument-dependent lookup, so this header needs none)
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/scalar_math.h"

namespace coppice::unary_ops {

enum class Domain { kFloating, kAny, kAnyButBool };
enum class GradUses { kNothing, kInput, kOutput };

namespace sm = scalar_math;

struct Neg {
  static constexpr const char* kName = "neg";
  static constexpr Domain kDomain = Domain::kAnyButBool;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kNothing;
  static constexpr const char* kDoc = "-x (integers wrap around).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;  // unreachable: kAnyButBool
    } else if constexpr (std::is_floating_point_v<C>) {
      return -v;
    } else {
      return static_cast<C>(sm::as_unsigned(C(0)) - sm::as_unsigned(v));
    }
  }
  template <typename T>
  static T grad(const T& g, const T&, const T&) {
    return neg(g);
  }
};

struct Abs {
  static constexpr const char* kName = "abs";
  static constexpr Domain kDomain = Domain::kAny;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kInput;
  static constexpr const char* kDoc = "|x|; gradient sign(x) (0 at 0).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      return sm::abs(v);
    } else if constexpr (std::is_signed_v<C>) {
      return v < 0 ? static_cast<C>(sm::as_unsigned(C(0)) - sm::as_unsigned(v)) : v;
    } else {
      return v;
    }
  }
  template <typename T>
  static T grad(const T& g, const T& x, const T&) {
    return mul(g, sign(x));
  }
};

struct Sign {
  static constexpr const char* kName = "sign";
  static constexpr Domain kDomain = Domain::kAny;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kNothing;
  static constexpr const char* kDoc = "-1, 0 or 1 (NaN stays NaN, -0 stays -0); gradient 0.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;
    } else if constexpr (std::is_floating_point_v<C>) {
      return v > C(0) ? C(1) : (v < C(0) ? C(-1) : v);
    } else if constexpr (std::is_unsigned_v<C>) {
      return static_cast<C>(v > C(0));
    } else {
      return static_cast<C>((v > C(0)) - (v < C(0)));
    }
  }
  template <typename T>
  static T grad(const T& g, const T&, const T&) {
    return zeros(g.shape(), g.options());
  }
};

struct Exp {
  static constexpr const char* kName = "exp";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = false;
  static constexpr GradUses kGradUses = GradUses::kOutput;
  static constexpr const char* kDoc = "e ** x.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::exp(v);
  }
  template <typename T>
  static T grad(const T& g, const T&, const T& y) {
    return mul(g, y);
  }
};

struct Log {
  static constexpr const char* kName = "log";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = false;
  static constexpr GradUses kGradUses = GradUses::kInput;
  static constexpr const char* kDoc = "The natural logarithm.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::log(v);
  }
  template <typename T>
  static T grad(const T& g, const T& x, const T&) {
    return div(g, x);
  }
};

struct Sqrt {
  static constexpr const char* kName = "sqrt";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kOutput;
  static constexpr const char* kDoc = "The square root (correctly rounded).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::sqrt(v);
  }
  template <typename T>
  static T grad(const T& g, const T&, const T& y) {
    return div(g, mul(y, 2.0));
  }
};

struct Rsqrt {
  static constexpr const char* kName = "rsqrt";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = false;
  static constexpr GradUses kGradUses = GradUses::kOutput;
  static constexpr const char* kDoc = "1 / sqrt(x), both steps correctly rounded.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return C(1) / sm::sqrt(v);
  }
  template <typename T>
  static T grad(const T& g, const T&, const T& y) {
    return mul(g, mul(pow(y, 3.0), -0.5));  // d x^-1/2 = -x^-3/2 / 2
  }
};

struct Relu {
  static constexpr const char* kName = "relu";
  static constexpr Domain kDomain = Domain::kAny;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kOutput;
  static constexpr const char* kDoc = "max(x, 0) (NaN stays NaN); gradient 0 at 0.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;
    } else {
      return v <= C(0) ? C(0) : v;
    }
  }
  template <typename T>
  static T grad(const T& g, const T&, const T& y) {
    return relu_backward(g, y);
  }
};

struct Gelu {
  static constexpr const char* kName = "gelu";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kInput;
  static constexpr const char* kDoc = "GELU, the exact (erf) form: x Phi(x).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::gelu(v);
  }
  template <typename T>
  static T grad(const T& g, const T& x, const T&) {
    return gelu_backward(g, x);  // Phi(x) + x phi(x), one pass
  }
};

struct GeluTanh {
  static constexpr const char* kName = "gelu_tanh";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kInput;
  static constexpr const char* kDoc =
      "GELU, the tanh approximation (GPT-2's; PyTorch's gelu(approximate='tanh')): "
      "x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::gelu_tanh(v);
  }
  template <typename T>
  static T grad(const T& g, const T& x, const T&) {
    return gelu_tanh_backward(g, x);
  }
};

struct Sigmoid {
  static constexpr const char* kName = "sigmoid";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = false;
  static constexpr GradUses kGradUses = GradUses::kOutput;
  static constexpr const char* kDoc = "1 / (1 + e ** -x).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return C(1) / (C(1) + sm::exp(-v));
  }
  template <typename T>
  static T grad(const T& g, const T&, const T& y) {
    return mul(g, mul(y, 1.0 - y));
  }
};

struct Tanh {
  static constexpr const char* kName = "tanh";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kOutput;
  static constexpr const char* kDoc = "The hyperbolic tangent.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::tanh(v);
  }
  template <typename T>
  static T grad(const T& g, const T&, const T& y) {
    return mul(g, 1.0 - mul(y, y));
  }
};

struct Erf {
  static constexpr const char* kName = "erf";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = true;
  static constexpr GradUses kGradUses = GradUses::kInput;
  static constexpr const char* kDoc = "The error function.";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return sm::erf(v);
  }
  template <typename T>
  static T grad(const T& g, const T& x, const T&) {
    return mul(g, mul(exp(neg(mul(x, x))), 2.0 / std::sqrt(M_PI)));  // 2 / sqrt(pi) e^-x^2
  }
};

struct Softplus {
  static constexpr const char* kName = "softplus";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kZeroPreserving = false;  // softplus(0) = log 2
  static constexpr GradUses kGradUses = GradUses::kInput;
  static constexpr const char* kDoc =
      "log(1 + e ** x), and x itself above 20 (as PyTorch's, beta 1); gradient "
      "sigmoid(x).";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    return v > C(20) ? v : sm::log1p(sm::exp(v));
  }
  template <typename T>
  static T grad(const T& g, const T& x, const T&) {
    return mul(g, sigmoid(x));
  }
};

// clamp is unary too, but takes bounds (attributes "min" and "max"), so its
// frontend, gradient and binding are written out (tensor/ops_elementwise.cc,
// autograd/functions/elementwise.cc); the kernels share this functor.
// Integer inputs clamp to [ceil(min), floor(max)], saturated to the type;
// min > max gives max; NaN stays NaN.
struct Clamp {
  static constexpr const char* kName = "clamp";
  static constexpr Domain kDomain = Domain::kAny;
  double lo, hi;
  // The functor for an input of dtype `floating` or not.
  static Clamp bounds(double min, double max, bool floating) {
    return floating ? Clamp{min, max} : Clamp{std::ceil(min), std::floor(max)};
  }
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      const C l = static_cast<C>(lo), h = static_cast<C>(hi);
      if (v < l) v = l;
      if (v > h) v = h;
      return v;
    } else {
      if (static_cast<double>(v) < lo) v = sm::saturate<C>(lo);
      if (static_cast<double>(v) > hi) v = sm::saturate<C>(hi);
      return v;
    }
  }
};

// Every op without attributes: X(function name, struct).
#define COPPICE_UNARY_OPS(X) \
  X(neg, Neg)                \
  X(abs, Abs)                \
  X(sign, Sign)              \
  X(exp, Exp)                \
  X(log, Log)                \
  X(sqrt, Sqrt)              \
  X(rsqrt, Rsqrt)            \
  X(relu, Relu)              \
  X(gelu, Gelu)              \
  X(gelu_tanh, GeluTanh)     \
  X(sigmoid, Sigmoid)        \
  X(tanh, Tanh)              \
  X(erf, Erf)                \
  X(softplus, Softplus)

// The function name and kName agree (so the name is written twice, not thrice).
constexpr bool same_name(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}
#define COPPICE_UNARY_CHECK_NAME(fn, Op) \
  static_assert(same_name(#fn, Op::kName), "COPPICE_UNARY_OPS: " #fn " and " #Op "::kName differ");
COPPICE_UNARY_OPS(COPPICE_UNARY_CHECK_NAME)
#undef COPPICE_UNARY_CHECK_NAME

// Calls f(Op{}) for every listed op, in the list's order.
template <typename F>
void for_each(F&& f) {
#define COPPICE_UNARY_VISIT(fn, Op) f(Op{});
  COPPICE_UNARY_OPS(COPPICE_UNARY_VISIT)
#undef COPPICE_UNARY_VISIT
}

// The listed ops' names, in the list's order (the tests sweep them).
inline std::vector<std::string_view> names() {
  std::vector<std::string_view> out;
  for_each([&](auto op) { out.push_back(decltype(op)::kName); });
  return out;
}

}  // namespace coppice::unary_ops
