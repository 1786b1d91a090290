// The binary elementwise primitives (kernels.h, <binary>): a and b of one
// dtype and any strides broadcast; the output is contiguous, of a's dtype
// (bool for comparisons).
//
// Floating types compute in compute_t (f32 for bf16/f16). add, sub, mul,
// maximum, minimum and the comparisons also take integers (wrapping on
// overflow) and bool (add = or, mul = and, maximum = or, minimum = and; sub
// throws). div and pow take floating types only (the frontends promote).
// maximum/minimum propagate NaN, as PyTorch does.
#include <cmath>
#include <string>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"
#include "tensor/kernels.h"

namespace coppice::cpu {
namespace {

// Integer arithmetic in the unsigned twin, so overflow wraps instead of being undefined.
template <typename C, typename F>
C wrap(C a, C b, F f) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(f(static_cast<U>(a), static_cast<U>(b)));
}

struct AddOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<C>) {
      return wrap(a, b, [](auto x, auto y) { return x + y; });
    } else {
      return a + b;
    }
  }
};

struct SubOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a != b;  // unreachable: bool sub is rejected first
    } else if constexpr (std::is_integral_v<C>) {
      return wrap(a, b, [](auto x, auto y) { return x - y; });
    } else {
      return a - b;
    }
  }
};

struct MulOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<C>) {
      return wrap(a, b, [](auto x, auto y) { return x * y; });
    } else {
      return a * b;
    }
  }
};

struct DivOp {
  template <typename C>
  C operator()(C a, C b) const {
    return a / b;
  }
};

struct PowOp {
  template <typename C>
  C operator()(C a, C b) const {
    return std::pow(a, b);
  }
};

struct MaxOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a > b || std::isnan(a)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

struct MinOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a < b || std::isnan(a)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

struct ReluBackwardOp {
  template <typename C>
  C operator()(C g, C y) const {
    return y > C(0) ? g : C(0);
  }
};

// gelu's gradient at x (the erf form): g * (Phi(x) + x phi(x)).
struct GeluBackwardOp {
  template <typename C>
  C operator()(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + std::erf(x * C(0.70710678118654752440)));
    const C pdf = std::exp(C(-0.5) * x * x) * C(0.39894228040143267794);
    return g * (cdf + x * pdf);
  }
};

struct EqOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a == b;
  }
};
struct NeOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a != b;
  }
};
struct LtOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a < b;
  }
};
struct LeOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a <= b;
  }
};
struct GtOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a > b;
  }
};
struct GeOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a >= b;
  }
};

// out = f(a, b); f maps two compute-type values to a compute-type value
// (arithmetic) or to bool (comparisons).
template <bool kComparison, typename F, typename Dispatch>
Tensor run(const Tensor& a, const Tensor& b, std::string_view op, const Dispatch& for_dtype, const F& f) {
  COPPICE_CHECK(a.dtype() == b.dtype(), op, ": operands must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, TensorOptions(kComparison ? DType::kBool : a.dtype(), a.device()));
  for_dtype([&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (kComparison) {
      map2<bool, T>(out, a, b, kGrain, [&](T x, T y) { return f(static_cast<C>(x), static_cast<C>(y)); });
    } else {
      map2<T, T>(out, a, b, kGrain, [&](T x, T y) { return T(f(static_cast<C>(x), static_cast<C>(y))); });
    }
  });
  return out;
}

template <bool kComparison, typename F>
Tensor run_any(const Tensor& a, const Tensor& b, std::string_view op, const F& f) {
  return run<kComparison>(
      a, b, op, [&](auto fn) { dispatch_dtype(a.dtype(), fn); }, f);
}

template <typename F>
Tensor run_floating(const Tensor& a, const Tensor& b, std::string_view op, const F& f) {
  return run<false>(
      a, b, op, [&](auto fn) { dispatch_floating(a.dtype(), op, fn); }, f);
}

Tensor run_binary(std::string_view op, const Tensor& a, const Tensor& b) {
  if (op == "add") return run_any<false>(a, b, op, AddOp{});
  if (op == "sub") {
    COPPICE_CHECK(a.dtype() != DType::kBool, "sub: not defined for bool tensors");
    return run_any<false>(a, b, op, SubOp{});
  }
  if (op == "mul") return run_any<false>(a, b, op, MulOp{});
  if (op == "div") return run_floating(a, b, op, DivOp{});
  if (op == "pow") return run_floating(a, b, op, PowOp{});
  if (op == "maximum") return run_any<false>(a, b, op, MaxOp{});
  if (op == "minimum") return run_any<false>(a, b, op, MinOp{});
  if (op == "relu_backward") return run_floating(a, b, op, ReluBackwardOp{});
  if (op == "gelu_backward") return run_floating(a, b, op, GeluBackwardOp{});
  if (op == "eq") return run_any<true>(a, b, op, EqOp{});
  if (op == "ne") return run_any<true>(a, b, op, NeOp{});
  if (op == "lt") return run_any<true>(a, b, op, LtOp{});
  if (op == "le") return run_any<true>(a, b, op, LeOp{});
  if (op == "gt") return run_any<true>(a, b, op, GtOp{});
  if (op == "ge") return run_any<true>(a, b, op, GeOp{});
  fail(op, ": not a binary kernel");
}

bool register_all() {
  for (std::string_view name : kernels::kBinaryOps) {
    std::string op(name);
    Dispatcher::instance().register_kernel(op, DeviceType::kCpu, {"dense", "dense"},
                                           [op](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                             COPPICE_CHECK(in.size() == 2, op, ": expected 2 inputs, got ", in.size());
                                             return {run_binary(op, in[0], in[1])};
                                           });
  }
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cpu
