// The unary elementwise primitives (kernels.h, <unary>): x of any strides in,
// a contiguous y of x's shape and dtype out.
//
// Floating types compute in compute_t (f32 for bf16/f16). neg, abs, sign,
// relu and clamp also take integers and bool; the rest throw for them.
// Interpretations: sign(NaN) = NaN and sign(+-0) = +-0; relu(NaN) = NaN;
// neg/abs wrap around on integer overflow (abs(INT_MIN) = INT_MIN) and neg
// throws for bool; integer clamp clamps to [ceil(min), floor(max)], saturated
// to the type's range; clamp with min > max gives max (as PyTorch), and a NaN
// input stays NaN.
#include <cmath>
#include <string>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"
#include "tensor/kernels.h"

namespace coppice::cpu {
namespace {

template <typename T>
T wrap_neg(T v) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(v));
}

// y = f(x) in x's compute type, for floating x only.
template <typename F>
Tensor unary_floating(const Tensor& x, std::string_view op, const F& f) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    map1<T, T>(y, x, kGrain / 4, [&](T v) { return T(f(static_cast<C>(v))); });
  });
  return y;
}

// y = f(x) for any dtype; f takes and returns the compute type.
template <typename F>
Tensor unary_any(const Tensor& x, const F& f) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    map1<T, T>(y, x, kGrain, [&](T v) { return T(f(static_cast<C>(v))); });
  });
  return y;
}

struct NegOp {
  template <typename C>
  C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      return -v;
    } else if constexpr (std::is_same_v<C, bool>) {
      return v;  // unreachable: run_unary rejects bool first
    } else {
      return wrap_neg(v);
    }
  }
};

struct AbsOp {
  template <typename C>
  C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::abs(v);
    } else if constexpr (std::is_signed_v<C>) {
      return v < 0 ? wrap_neg(v) : v;
    } else {
      return v;
    }
  }
};

struct SignOp {
  template <typename C>
  C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;
    } else if constexpr (std::is_floating_point_v<C>) {
      return v > C(0) ? C(1) : (v < C(0) ? C(-1) : v);
    } else {
      return static_cast<C>((v > C(0)) - (v < C(0)));
    }
  }
};

struct ReluOp {
  template <typename C>
  C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;
    } else {
      return v <= C(0) ? C(0) : v;
    }
  }
};

Tensor clamp(const Tensor& x, double min, double max) {
  if (is_floating(x.dtype())) {
    return unary_floating(x, "clamp", [min, max](auto v) {
      using C = decltype(v);
      const C lo = static_cast<C>(min), hi = static_cast<C>(max);
      if (v < lo) v = lo;
      if (v > hi) v = hi;
      return v;
    });
  }
  const double lo = std::ceil(min), hi = std::floor(max);
  return unary_any(x, [lo, hi](auto v) {
    using C = decltype(v);
    if (static_cast<double>(v) < lo) v = saturate<C>(lo);
    if (static_cast<double>(v) > hi) v = saturate<C>(hi);
    return v;
  });
}

Tensor run_unary(std::string_view op, const Tensor& x, const Attrs& attrs) {
  if (op == "neg") {
    COPPICE_CHECK(x.dtype() != DType::kBool, "neg: not defined for bool tensors");
    return unary_any(x, NegOp{});
  }
  if (op == "abs") return unary_any(x, AbsOp{});
  if (op == "sign") return unary_any(x, SignOp{});
  if (op == "relu") return unary_any(x, ReluOp{});
  if (op == "clamp") { return clamp(x, attrs.get_double("min", -INFINITY), attrs.get_double("max", INFINITY)); }
  if (op == "exp") return unary_floating(x, op, [](auto v) { return std::exp(v); });
  if (op == "log") return unary_floating(x, op, [](auto v) { return std::log(v); });
  if (op == "sqrt") return unary_floating(x, op, [](auto v) { return std::sqrt(v); });
  if (op == "rsqrt") {
    return unary_floating(x, op, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
  }
  if (op == "gelu") {
    return unary_floating(x, op, [](auto v) {
      using C = decltype(v);
      return C(0.5) * v * (C(1) + std::erf(v * C(0.70710678118654752440)));
    });
  }
  if (op == "sigmoid") {
    return unary_floating(x, op, [](auto v) { return decltype(v)(1) / (decltype(v)(1) + std::exp(-v)); });
  }
  if (op == "tanh") return unary_floating(x, op, [](auto v) { return std::tanh(v); });
  if (op == "erf") return unary_floating(x, op, [](auto v) { return std::erf(v); });
  fail(op, ": not a unary kernel");
}

bool register_all() {
  for (std::string_view name : kernels::kUnaryOps) {
    std::string op(name);
    Dispatcher::instance().register_kernel(
        op, DeviceType::kCpu, {"dense"},
        [op](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
          COPPICE_CHECK(in.size() == 1, op, ": expected 1 input, got ", in.size());
          return {run_unary(op, in[0], attrs)};
        });
  }
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cpu
