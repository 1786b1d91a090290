// The binary elementwise ops, each declared once: its name, the dtypes it
// takes, its math (one functor for the CPU loop and the CUDA kernel) and, for
// the differentiable ones, its gradient, its scalar forms and its docstring.
// Everything else about an op comes from here:
//
//   tensor/ops.h, ops_elementwise.cc  Tensor add(const Tensor& a, const
//                                 Tensor& b), the frontend (reads kDomain and
//                                 kIntegersAsF32; operands reach the kernels
//                                 in one dtype, broadcast by NumPy's rules)
//   tensor/cpu/binary.cc          the CPU kernel (the functor in a loop)
//   tensor/cuda/binary.cu, compare.cu  the CUDA kernels (the same functor)
//   autograd/functions/elementwise.h  Variable add(const Variable& a, const
//                                 Variable& b) for the ops of
//                                 COPPICE_DIFFERENTIABLE_BINARY_OPS, with
//                                 grad() as its backward (node "AddBackward")
//   python/bind_autograd.cc       coppice.add, with kDoc as its docstring and
//                                 numbers for operands where kScalars says
//
// (sparse/{cpu,cuda}/elementwise.cc register the sparse-operand kernels of
// add, sub, mul, div and pow by hand; they call these functors.)
//
// Adding an op: write its struct below and add one line to
// COPPICE_BINARY_OPS, or to COPPICE_DIFFERENTIABLE_BINARY_OPS for an op with
// a gradient (then kDoc, kScalars, kGradAReads, kGradBReads and grad() too):
// one file. Its tests: a reference line in tests/tensor/cpu/binary_test.cc
// (and tests/tensor/cuda/elementwise_test.cc's floating_only for a kFloating
// op); tests/autograd/binary_table_test.cc gradchecks every differentiable
// op, broadcast, without a line of its own. A scalar form (kScalars other than
// kNone) is written out: Tensor add(const Tensor&, double) in tensor/ops.h and
// ops_elementwise.cc, Variable add(const Variable&, double) (and
// add(double, const Variable&)) in autograd/functions/elementwise.{h,cc}:
// four files more; the Python function binds what kScalars names.
//
// A struct has:
//   kName          the op's name (the dispatcher's key), the same as the
//                  function name in the lists (checked below)
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
//   kSparseAutograd  a sparse operand takes autograd/functions/sparse.h's
//                  path (sparse_add, sparse_mul: the gradient keeps the
//                  pattern; named by an overload of sparse_binary in
//                  autograd/functions/elementwise.cc); false for the others,
//                  whose Variable form does not look at formats
// and a differentiable op:
//   kDoc           the Python docstring
//   kScalars       where a number may stand for an operand: either side
//                  (add(x, 1), add(1, x)), the second only (pow's exponent)
//                  or neither (Python then says "an operand is a number")
//   kGradAReads,   what dL/da and dL/db read besides g (GradReads: a, b, y);
//   kGradBReads    the Variable form keeps alive only what a gradient that
//                  is needed reads (mul keeps a only when b requires grad)
//   grad(g, a, b, y, need_a, need_b)  {dL/da, dL/db} from dL/dy = g, each
//                  where needed (else undefined), before broadcasting is
//                  undone; in tensor ops, found by argument-dependent lookup,
//                  so this header needs none
#pragma once

#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/scalar_math.h"
#include "tensor/unary_ops.h"  // Domain

namespace coppice::binary_ops {

using unary_ops::Domain;
namespace sm = scalar_math;

enum class Compare { kNone, kEq, kNe, kLt, kLe, kGt, kGe };

// What one operand's gradient reads besides g (a set: the inputs a, b and the
// output y); the Variable form keeps alive only what a needed gradient reads.
enum GradReads : unsigned { kReadsNothing = 0, kReadsA = 1, kReadsB = 2, kReadsY = 4 };

// Where a number may stand for an operand (C++'s add(x, 1.0) and add(1.0, x),
// Python's coppice.add(x, 1)); elsewhere Python says "an operand is a number".
enum class Scalars { kNone, kSecondOnly, kEitherSide };

// Integer arithmetic in the unsigned twin, so overflow wraps instead of being undefined.
#define COPPICE_WRAPPING(a, op, b) static_cast<C>(sm::as_unsigned(a) op sm::as_unsigned(b))

struct Arithmetic {
  static constexpr Domain kDomain = Domain::kAny;
  static constexpr bool kIntegersAsF32 = false;
  static constexpr Compare kCompare = Compare::kNone;
  static constexpr bool kSparseAutograd = false;
};

struct Add : Arithmetic {
  static constexpr const char* kName = "add";
  static constexpr const char* kDoc = "a + b, broadcasting.";
  static constexpr Scalars kScalars = Scalars::kEitherSide;
  static constexpr unsigned kGradAReads = kReadsNothing, kGradBReads = kReadsNothing;
  static constexpr bool kSparseAutograd = true;
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
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T&, const T&, const T&, bool, bool) {
    return {g, g};
  }
};

struct Sub : Arithmetic {
  static constexpr const char* kName = "sub";
  static constexpr const char* kDoc = "a - b, broadcasting.";
  static constexpr Scalars kScalars = Scalars::kEitherSide;
  static constexpr unsigned kGradAReads = kReadsNothing, kGradBReads = kReadsNothing;
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
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T&, const T&, const T&, bool, bool need_b) {
    return {g, need_b ? neg(g) : T()};
  }
};

struct Mul : Arithmetic {
  static constexpr const char* kName = "mul";
  static constexpr const char* kDoc = "a * b, broadcasting (a sparse operand keeps its pattern).";
  static constexpr Scalars kScalars = Scalars::kEitherSide;
  static constexpr unsigned kGradAReads = kReadsB, kGradBReads = kReadsA;
  static constexpr bool kSparseAutograd = true;
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
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T& a, const T& b, const T&, bool need_a, bool need_b) {
    return {need_a ? mul(g, b) : T(), need_b ? mul(g, a) : T()};
  }
};

struct Div : Arithmetic {
  static constexpr const char* kName = "div";
  static constexpr const char* kDoc = "a / b, broadcasting.";
  static constexpr Scalars kScalars = Scalars::kEitherSide;
  static constexpr unsigned kGradAReads = kReadsB, kGradBReads = kReadsB | kReadsY;
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kIntegersAsF32 = true;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    return a / b;
  }
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T&, const T& b, const T& y, bool need_a, bool need_b) {
    return {need_a ? div(g, b) : T(), need_b ? neg(div(mul(g, y), b)) : T()};  // -g a / b^2 = -g y / b
  }
};

struct Pow : Arithmetic {
  static constexpr const char* kName = "pow";
  static constexpr const char* kDoc = "a ** b (b a number or an array).";
  static constexpr Scalars kScalars = Scalars::kSecondOnly;
  static constexpr unsigned kGradAReads = kReadsA | kReadsB, kGradBReads = kReadsA | kReadsY;
  static constexpr Domain kDomain = Domain::kFloating;
  static constexpr bool kIntegersAsF32 = true;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    return sm::pow(a, b);
  }
  // d/db = g y log(a), 0 where a == 0 (it needs a > 0).
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T& a, const T& b, const T& y, bool need_a, bool need_b) {
    T ga, gb;
    if (need_a) ga = mul(g, mul(b, pow(a, sub(b, 1.0))));
    if (need_b) {
      const T d = mul(g, mul(y, log(a)));
      gb = where(ne(a, 0.0), d, scalar_tensor(0.0, d.options()));
    }
    return {ga, gb};
  }
};

// maximum's and minimum's gradients: the winner (`wins`: where a wins, bool)
// takes g, ties split it evenly.
template <typename T>
std::pair<T, T> extremum_grad(const T& g, const T& wins, const T& a, const T& b, bool need_a, bool need_b) {
  const auto dt = g.dtype();
  const T share = add(wins.to(dt), mul(eq(a, b).to(dt), 0.5));  // a's share of the gradient
  return {need_a ? mul(g, share) : T(), need_b ? mul(g, 1.0 - share) : T()};
}

struct Maximum : Arithmetic {
  static constexpr const char* kName = "maximum";
  static constexpr const char* kDoc = "Elementwise maximum (ties split the gradient).";
  static constexpr Scalars kScalars = Scalars::kNone;
  static constexpr unsigned kGradAReads = kReadsA | kReadsB, kGradBReads = kReadsA | kReadsB;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a > b || sm::isnan(a)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T& a, const T& b, const T&, bool need_a, bool need_b) {
    return extremum_grad(g, gt(a, b), a, b, need_a, need_b);
  }
};

struct Minimum : Arithmetic {
  static constexpr const char* kName = "minimum";
  static constexpr const char* kDoc = "Elementwise minimum.";
  static constexpr Scalars kScalars = Scalars::kNone;
  static constexpr unsigned kGradAReads = kReadsA | kReadsB, kGradBReads = kReadsA | kReadsB;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a < b || sm::isnan(a)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
  template <typename T>
  static std::pair<T, T> grad(const T& g, const T& a, const T& b, const T&, bool need_a, bool need_b) {
    return extremum_grad(g, lt(a, b), a, b, need_a, need_b);
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

// gelu_tanh's gradient at x (scalar_math.h's gelu_tanh_grad).
struct GeluTanhBackward : Arithmetic {
  static constexpr const char* kName = "gelu_tanh_backward";
  static constexpr Domain kDomain = Domain::kFloating;
  template <typename C>
  COPPICE_HOST_DEVICE C operator()(C g, C x) const {
    return sm::gelu_tanh_grad(g, x);
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

// The differentiable binary ops (the Variable forms and the Python functions
// come from this list): X(function name, struct).
#define COPPICE_DIFFERENTIABLE_BINARY_OPS(X) \
  X(add, Add)                                \
  X(sub, Sub)                                \
  X(mul, Mul)                                \
  X(div, Div)                                \
  X(pow, Pow)                                \
  X(maximum, Maximum)                        \
  X(minimum, Minimum)

// Every binary op: X(function name, struct).
#define COPPICE_BINARY_OPS(X)             \
  COPPICE_DIFFERENTIABLE_BINARY_OPS(X)    \
  X(relu_backward, ReluBackward)          \
  X(gelu_backward, GeluBackward)          \
  X(gelu_tanh_backward, GeluTanhBackward) \
  X(eq, Eq)                               \
  X(ne, Ne)                               \
  X(lt, Lt)                               \
  X(le, Le)                               \
  X(gt, Gt)                               \
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

// Calls f(Op{}) for every differentiable op, in the list's order.
template <typename F>
void for_each_differentiable(F&& f) {
#define COPPICE_BINARY_VISIT(fn, Op) f(Op{});
  COPPICE_DIFFERENTIABLE_BINARY_OPS(COPPICE_BINARY_VISIT)
#undef COPPICE_BINARY_VISIT
}

}  // namespace coppice::binary_ops
