// Elementwise frontends: binary ops with broadcasting and dtype promotion,
// comparisons, unary math, clamp, where and the arithmetic operators.
//
// Kernels see operands of one dtype (they broadcast themselves); the frontends
// check shapes, devices and dtypes, promote, and dispatch by name.
#include <cmath>
#include <limits>

#include "tensor/binary_ops.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// The operands' common dtype: promote_types, and f32 for the integers of
// ops computed in floats (true division, as in NumPy and PyTorch; integer
// powers).
template <typename Op>
DType common_dtype(const Tensor& a, const Tensor& b) {
  const DType common = promote_types(a.dtype(), b.dtype());
  return Op::kIntegersAsF32 && !is_floating(common) ? DType::kF32 : common;
}

// A sparse operand (sparse/ops.h): dense operands take the common dtype (a
// sparse one must have it already: its values convert with to_dtype) and the
// op dispatches by the formats, to a sparse kernel or the counted dense
// fallback.
template <typename Op>
Tensor sparse_binary(const Tensor& a, const Tensor& b) {
  constexpr std::string_view op = Op::kName;
  check_same_device({a, b}, op);
  broadcast_shapes(a.shape(), b.shape(), op);
  const DType common = common_dtype<Op>(a, b);
  auto as_common = [&](const Tensor& t, const char* name) {
    if (t.dtype() == common) return t;
    COPPICE_CHECK(t.is_dense(), op, ": the sparse operand ", name, " has dtype ", dtype_name(t.dtype()),
                  " but the operands promote to ", dtype_name(common), "; convert it with to_dtype first");
    return t.to(common);
  };
  return dispatch(op, {as_common(a, "a"), as_common(b, "b")})[0];
}

// The frontend of every binary op of tensor/binary_ops.h.
template <typename Op>
Tensor binary(const Tensor& a, const Tensor& b) {
  if (any_sparse({a, b})) return sparse_binary<Op>(a, b);
  constexpr std::string_view op = Op::kName;
  check_dense(a, op, "a");
  check_dense(b, op, "b");
  check_same_device({a, b}, op);
  broadcast_shapes(a.shape(), b.shape(), op);
  const DType common = common_dtype<Op>(a, b);
  COPPICE_CHECK(!(Op::kDomain == unary_ops::Domain::kAnyButBool && common == DType::kBool), op,
                ": not defined for bool tensors (convert them with .to() first)");
  return dispatch(op, {a.to(common), b.to(common)})[0];
}

// The dtype a scalar operand takes beside a tensor of dtype `t`: the tensor's
// own when it holds the value exactly, so `x + 1` keeps x's dtype; f32 when an
// integer tensor meets a non-integral scalar.
DType scalar_dtype(DType t, double v) {
  if (is_floating(t)) return t;
  if (!std::isfinite(v) || v != std::trunc(v)) return DType::kF32;
  double lo = 0, hi = 0;
  switch (t) {
    case DType::kBool:
      lo = 0;
      hi = 1;
      break;
    case DType::kU8:
      lo = 0;
      hi = 255;
      break;
    case DType::kI32:
      lo = std::numeric_limits<int32_t>::min();
      hi = std::numeric_limits<int32_t>::max();
      break;
    default:
      lo = -9223372036854775808.0;
      hi = 9223372036854775807.0;
      break;
  }
  if (v >= lo && v <= hi) return t;
  return (v >= -9223372036854775808.0 && v < 9223372036854775807.0) ? DType::kI64 : DType::kF32;
}

Tensor scalar_like(const Tensor& t, double v, std::string_view op) {
  if (!(t.defined() && t.is_sparse())) check_dense(t, op, "a");  // binary() checks a sparse one
  return full({}, v, TensorOptions(scalar_dtype(t.dtype(), v), t.device()));
}

template <typename Op>
Tensor binary_scalar(const Tensor& a, double b) {
  return binary<Op>(a, scalar_like(a, b, Op::kName));
}

// The frontend of every unary op of tensor/unary_ops.h: dense operands are
// checked; integer operands of floating-only ops are computed in f32, as in
// PyTorch (exp of an i64 is a float); sparse values are floating already.
template <typename Op>
Tensor unary(const Tensor& x, const Attrs& attrs = {}) {
  if (any_sparse({x})) return dispatch(Op::kName, {x}, attrs)[0];
  check_dense(x, Op::kName, "input");
  COPPICE_CHECK(!(Op::kDomain == unary_ops::Domain::kAnyButBool && x.dtype() == DType::kBool), Op::kName,
                ": not defined for bool tensors");
  const bool takes_x = Op::kDomain != unary_ops::Domain::kFloating || is_floating(x.dtype());
  return dispatch(Op::kName, {takes_x ? x : x.to(DType::kF32)}, attrs)[0];
}

}  // namespace

#define COPPICE_DEFINE_BINARY(fn, Op) \
  Tensor fn(const Tensor& a, const Tensor& b) { return binary<binary_ops::Op>(a, b); }
COPPICE_BINARY_OPS(COPPICE_DEFINE_BINARY)
#undef COPPICE_DEFINE_BINARY

Tensor add(const Tensor& a, double b) { return binary_scalar<binary_ops::Add>(a, b); }
Tensor sub(const Tensor& a, double b) { return binary_scalar<binary_ops::Sub>(a, b); }
Tensor mul(const Tensor& a, double b) { return binary_scalar<binary_ops::Mul>(a, b); }
Tensor div(const Tensor& a, double b) { return binary_scalar<binary_ops::Div>(a, b); }
Tensor pow(const Tensor& a, double exponent) { return binary_scalar<binary_ops::Pow>(a, exponent); }

Tensor eq(const Tensor& a, double b) { return binary_scalar<binary_ops::Eq>(a, b); }
Tensor ne(const Tensor& a, double b) { return binary_scalar<binary_ops::Ne>(a, b); }
Tensor lt(const Tensor& a, double b) { return binary_scalar<binary_ops::Lt>(a, b); }
Tensor le(const Tensor& a, double b) { return binary_scalar<binary_ops::Le>(a, b); }
Tensor gt(const Tensor& a, double b) { return binary_scalar<binary_ops::Gt>(a, b); }
Tensor ge(const Tensor& a, double b) { return binary_scalar<binary_ops::Ge>(a, b); }

#define COPPICE_DEFINE_UNARY(fn, Op) \
  Tensor fn(const Tensor& x) { return unary<unary_ops::Op>(x); }
COPPICE_UNARY_OPS(COPPICE_DEFINE_UNARY)
#undef COPPICE_DEFINE_UNARY

std::pair<Tensor, Tensor> relu_backward_col_sums(const Tensor& grad, const Tensor& y) {
  COPPICE_CHECK(grad.defined() && y.defined() && grad.dim() == 2 && grad.shape() == y.shape(),
                "relu_backward_col_sums: needs grad and y of one 2-D shape, got ",
                grad.defined() ? shape_to_string(grad.shape()) : "none", " and ",
                y.defined() ? shape_to_string(y.shape()) : "none");
  if (grad.device().is_cuda() && y.device() == grad.device() && y.dtype() == grad.dtype() &&
      is_floating(grad.dtype())) {
    const std::vector<Tensor> out = dispatch(op::kReluBackwardColSums, {grad.contiguous(), y.contiguous()});
    return {out[0], out[1]};
  }
  Tensor g = relu_backward(grad, y);
  return {g, sum(g, {0})};
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  if (!any_sparse({x})) check_dense(x, "clamp", "input");
  COPPICE_CHECK(min.has_value() || max.has_value(), "clamp: at least one of min and max must be given");
  COPPICE_CHECK(!(min && std::isnan(*min)) && !(max && std::isnan(*max)), "clamp: bounds must not be NaN");
  Tensor in = x;
  if (!is_floating(x.dtype())) {
    // Non-integral bounds clamp in f32, so that clamp(i, 0.5, ...) means what it says.
    bool integral_bounds = (!min || *min == std::trunc(*min) || std::isinf(*min)) &&
                           (!max || *max == std::trunc(*max) || std::isinf(*max));
    if (!integral_bounds) in = x.to(DType::kF32);
  }
  const double inf = std::numeric_limits<double>::infinity();
  Attrs attrs;
  attrs.set("min", min.value_or(-inf)).set("max", max.value_or(inf));
  return unary<unary_ops::Clamp>(in, attrs);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_dense(cond, op::kWhere, "cond");
  check_dense(a, op::kWhere, "a");
  check_dense(b, op::kWhere, "b");
  check_same_device({cond, a, b}, op::kWhere);
  COPPICE_CHECK(cond.dtype() == DType::kBool, "where: cond must be bool, got ", dtype_name(cond.dtype()));
  broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), op::kWhere), op::kWhere);
  DType common = promote_types(a.dtype(), b.dtype());
  return dispatch(op::kWhere, {cond, a.to(common), b.to(common)})[0];
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) {
  return binary<binary_ops::Sub>(scalar_like(b, a, binary_ops::Sub::kName), b);
}
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) {
  return binary<binary_ops::Div>(scalar_like(b, a, binary_ops::Div::kName), b);
}

}  // namespace coppice
