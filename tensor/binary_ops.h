// The binary elementwise ops, each declared once: its name, the dtypes it
// takes, its math (one functor for the CPU loop and the CUDA kernel). The
// CPU and CUDA kernels (tensor/cpu/binary.cc, tensor/cuda/binary.cu and
// compare.cu) are registered from COPPICE_BINARY_OPS; the frontends
// (tensor/ops_elementwise.cc) read kDomain and kIntegersAsF32. Operands
// reach the kernels in one dtype, broadcast (NumPy rules).
//
// A struct has:
//   kName          the op's name (the dispatcher's key)
//   kDomain        the dtypes its kernel takes (unary_ops::Domain)
//   kIntegersAsF32 integer operands are computed in f32 (true division, as
//                  NumPy and PyTorch; integer powers)
//   kCompare       for a comparison, which one (its result is bool); the
//                  CUDA comparisons share one kernel per dtype that switches
//                  on it, to keep the build small
//   operator()     the math in the compute type C (float for bf16/f16): a
//                  C, or a bool for comparisons. Integers wrap on overflow;
//                  bool add is or, mul and, maximum or, minimum and;
//                  maximum and minimum propagate NaN, as PyTorch's.
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/scalar_math.h"
#include "tensor/unary_ops.h"  // Domain

namespace coppice::binary_ops {

using unary_ops::Domain;
namespace sm = scalar_math;

enum class Compare { kNone, kEq, kNe, kLt, kLe, kGt, kGe };

// Integer arithmetic in the unsigned twin, so overflow wraps instead of being undefined.
#define COPPICE_WRAPPING(a, op, b) static_cast<C>(sm::as_unsigned(a) op sm::as_unsigned(b))

struct Arithmetic {
  static constexpr Domain kDomain = Domain::kAny;
  static constexpr bool kIntegersAsF32 = false;
  static constexpr Compare kCompare = Compare::kNone;
};

struct Add : Arithmetic {
  static constexpr const char* kName = "add";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<C>) {
      return COPPICE_WRAPPING(a, +, b);
    } else {
      return a + b;
    }
  }
};

struct Sub : Arithmetic {
  static constexpr const char* kName = "sub";
  static constexpr Domain kDomain = Domain::kAnyButBool;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a != b;  // unreachable: kAnyButBool
    } else if constexpr (std::is_integral_v<C>) {
      return COPPICE_WRAPPING(a, -, b);
    } else {
      return a - b;
    }
  }
};

struct Mul : Arithmetic {
  static constexpr const char* kName = "mul";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<C>) {
      return COPPICE_WRAPPING(a, *, b);
    } else {
      return a * b;
    }
  }
};

struct Div : Arithmetic {
  static constexpr const char* kName = "div";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kIntegersAsF32 = true;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    return a / b;
  }
};

struct Pow : Arithmetic {
  static constexpr const char* kName = "pow";
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kIntegersAsF32 = true;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    return sm::pow(a, b);
  }
};

struct Maximum : Arithmetic {
  static constexpr const char* kName = "maximum";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a > b || sm::isnan(a)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

struct Minimum : Arithmetic {
  static constexpr const char* kName = "minimum";
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a < b || sm::isnan(a)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

// relu's gradient from its output y: y > 0 ? g : 0, one pass instead of a
// compare, a where and two scalar fills.
struct ReluBackward : Arithmetic {
  static constexpr const char* kName = "relu_backward";
  static constexpr Domain kDomain = Domain::kFloating;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C g, C y) const {
    return y > C(0) ? g : C(0);
  }
};

// gelu's gradient at x: g * (Phi(x) + x phi(x)), one pass instead of nine.
struct GeluBackward : Arithmetic {
  static constexpr const char* kName = "gelu_backward";
  static constexpr Domain kDomain = Domain::kFloating;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C g, C x) const {
    return sm::gelu_grad(g, x);
  }
};

#undef COPPICE_WRAPPING

// a `which` b; the CUDA comparisons call it with the op's kCompare at run time.
template <typename C>
COPPICE_HOST_DEVICE bool compare(Compare which, C a, C b) {
  switch (which) {
    case Compare::kEq: return a == b;
    case Compare::kNe: return a != b;
    case Compare::kLt: return a < b;
    case Compare::kLe: return a <= b;
    case Compare::kGt: return a > b;
    case Compare::kGe: return a >= b;
    default: return false;
  }
}

template <Compare kWhich>
struct Comparison {
  static constexpr Domain kDomain = Domain::kAny;
  static constexpr bool kIntegersAsF32 = false;
  static constexpr Compare kCompare = kWhich;
  template <typename C>
  COPPICE_HOST_DEVICE bool operator()(C a, C b) const {
    return compare(kWhich, a, b);
  }
};
struct Eq : Comparison<Compare::kEq> {
  static constexpr const char* kName = "eq";
};
struct Ne : Comparison<Compare::kNe> {
  static constexpr const char* kName = "ne";
};
struct Lt : Comparison<Compare::kLt> {
  static constexpr const char* kName = "lt";
};
struct Le : Comparison<Compare::kLe> {
  static constexpr const char* kName = "le";
};
struct Gt : Comparison<Compare::kGt> {
  static constexpr const char* kName = "gt";
};
struct Ge : Comparison<Compare::kGe> {
  static constexpr const char* kName = "ge";
};

// Every binary op: X(function name, struct).
#define COPPICE_BINARY_OPS(X)    \
  X(add, Add)                    \
  X(sub, Sub)                    \
  X(mul, Mul)                    \
  X(div, Div)                    \
  X(pow, Pow)                    \
  X(maximum, Maximum)            \
  X(minimum, Minimum)            \
  X(relu_backward, ReluBackward) \
  X(gelu_backward, GeluBackward) \
  X(eq, Eq)                      \
  X(ne, Ne)                      \
  X(lt, Lt)                      \
  X(le, Le)                      \
  X(gt, Gt)                      \
  X(ge, Ge)

#define COPPICE_BINARY_CHECK_NAME(fn, Op) \
  static_assert(unary_ops::same_name(#fn, Op::kName), "COPPICE_BINARY_OPS: " #fn " and " #Op "::kName differ");
COPPICE_BINARY_OPS(COPPICE_BINARY_CHECK_NAME)
#undef COPPICE_BINARY_CHECK_NAME

// Calls f(Op{}) for every listed op, in the list's order.
template <typename F>
void for_each(F&& f) {
#define COPPICE_BINARY_VISIT(fn, Op) f(Op{});
  COPPICE_BINARY_OPS(COPPICE_BINARY_VISIT)
#undef COPPICE_BINARY_VISIT
}

// The listed ops' names, in the list's order (the tests sweep them).
inline std::vector<std::string_view> names() {
  std::vector<std::string_view> out;
  for_each([&](auto op) { out.push_back(decltype(op)::kName); });
  return out;
}

}  // namespace coppice::binary_ops
