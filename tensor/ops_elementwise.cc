// Elementwise frontends: binary ops with broadcasting and dtype promotion,
// comparisons, unary math, clamp, where and the arithmetic operators.
//
// Kernels see operands of one dtype (they broadcast themselves); the frontends
// check shapes, devices and dtypes, promote, and dispatch by name.
#include <cmath>
#include <limits>

#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// A sparse operand (sparse/ops.h): dense operands take the common dtype (a
// sparse one must have it already: its values convert with to_dtype) and the
// op dispatches by the formats, to a sparse kernel or the counted dense
// fallback.
Tensor sparse_binary(std::string_view op, const Tensor& a, const Tensor& b) {
  check_same_device({a, b}, op);
  broadcast_shapes(a.shape(), b.shape(), op);
  DType common = promote_types(a.dtype(), b.dtype());
  if ((op == "div" || op == "pow") && !is_floating(common)) common = DType::kF32;
  auto as_common = [&](const Tensor& t, const char* name) {
    if (t.dtype() == common) return t;
    COPPICE_CHECK(t.is_dense(), op, ": the sparse operand ", name, " has dtype ", dtype_name(t.dtype()),
                  " but the operands promote to ", dtype_name(common), "; convert it with to_dtype first");
    return t.to(common);
  };
  return dispatch(op, {as_common(a, "a"), as_common(b, "b")})[0];
}

Tensor binary(std::string_view op, const Tensor& a, const Tensor& b) {
  if (any_sparse({a, b})) return sparse_binary(op, a, b);
  check_dense(a, op, "a");
  check_dense(b, op, "b");
  check_same_device({a, b}, op);
  broadcast_shapes(a.shape(), b.shape(), op);
  DType common = promote_types(a.dtype(), b.dtype());
  COPPICE_CHECK(!(op == "sub" && common == DType::kBool),
                "sub: not defined for bool tensors (convert them with .to() first)");
  // True division, as in NumPy and PyTorch: integers divide as floats; and
  // integer powers are taken in f32 (the kernels take floats only).
  if ((op == "div" || op == "pow") && !is_floating(common)) common = DType::kF32;
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

Tensor binary_scalar(std::string_view op, const Tensor& a, double b) { return binary(op, a, scalar_like(a, b, op)); }

Tensor unary(std::string_view op, const Tensor& x, const Attrs& attrs = {}) {
  if (any_sparse({x})) return dispatch(op, {x}, attrs)[0];  // sparse values are floating
  check_dense(x, op, "input");
  bool takes_integers = op == "neg" || op == "abs" || op == "sign" || op == "relu" || op == "clamp";
  COPPICE_CHECK(!(op == "neg" && x.dtype() == DType::kBool), "neg: not defined for bool tensors");
  // Math on integers happens in f32, as in PyTorch (exp of an i64 is a float).
  Tensor in = (takes_integers || is_floating(x.dtype())) ? x : x.to(DType::kF32);
  return dispatch(op, {in}, attrs)[0];
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary("pow", a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary("maximum", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary("minimum", a, b); }

Tensor add(const Tensor& a, double b) { return binary_scalar("add", a, b); }
Tensor sub(const Tensor& a, double b) { return binary_scalar("sub", a, b); }
Tensor mul(const Tensor& a, double b) { return binary_scalar("mul", a, b); }
Tensor div(const Tensor& a, double b) { return binary_scalar("div", a, b); }
Tensor pow(const Tensor& a, double exponent) { return binary_scalar("pow", a, exponent); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary("eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary("ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary("lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary("le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary("gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary("ge", a, b); }
Tensor eq(const Tensor& a, double b) { return binary_scalar("eq", a, b); }
Tensor ne(const Tensor& a, double b) { return binary_scalar("ne", a, b); }
Tensor lt(const Tensor& a, double b) { return binary_scalar("lt", a, b); }
Tensor le(const Tensor& a, double b) { return binary_scalar("le", a, b); }
Tensor gt(const Tensor& a, double b) { return binary_scalar("gt", a, b); }
Tensor ge(const Tensor& a, double b) { return binary_scalar("ge", a, b); }

Tensor neg(const Tensor& x) { return unary("neg", x); }
Tensor abs(const Tensor& x) { return unary("abs", x); }
Tensor sign(const Tensor& x) { return unary("sign", x); }
Tensor exp(const Tensor& x) { return unary("exp", x); }
Tensor log(const Tensor& x) { return unary("log", x); }
Tensor sqrt(const Tensor& x) { return unary("sqrt", x); }
Tensor rsqrt(const Tensor& x) { return unary("rsqrt", x); }
Tensor relu(const Tensor& x) { return unary("relu", x); }
Tensor relu_backward(const Tensor& grad, const Tensor& y) { return binary("relu_backward", grad, y); }
Tensor gelu_backward(const Tensor& grad, const Tensor& x) { return binary("gelu_backward", grad, x); }

std::pair<Tensor, Tensor> relu_backward_col_sums(const Tensor& grad, const Tensor& y) {
  COPPICE_CHECK(grad.defined() && y.defined() && grad.dim() == 2 && grad.shape() == y.shape(),
                "relu_backward_col_sums: needs grad and y of one 2-D shape, got ",
                grad.defined() ? shape_to_string(grad.shape()) : "none", " and ",
                y.defined() ? shape_to_string(y.shape()) : "none");
  if (grad.device().is_cuda() && y.device() == grad.device() && y.dtype() == grad.dtype() &&
      is_floating(grad.dtype())) {
    const std::vector<Tensor> out = dispatch("relu_backward_col_sums", {grad.contiguous(), y.contiguous()});
    return {out[0], out[1]};
  }
  Tensor g = relu_backward(grad, y);
  return {g, sum(g, {0})};
}
Tensor gelu(const Tensor& x) { return unary("gelu", x); }
Tensor sigmoid(const Tensor& x) { return unary("sigmoid", x); }
Tensor tanh(const Tensor& x) { return unary("tanh", x); }
Tensor erf(const Tensor& x) { return unary("erf", x); }

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
  return unary("clamp", in, attrs);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_dense(cond, "where", "cond");
  check_dense(a, "where", "a");
  check_dense(b, "where", "b");
  check_same_device({cond, a, b}, "where");
  COPPICE_CHECK(cond.dtype() == DType::kBool, "where: cond must be bool, got ", dtype_name(cond.dtype()));
  broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  DType common = promote_types(a.dtype(), b.dtype());
  return dispatch("where", {cond, a.to(common), b.to(common)})[0];
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
Tensor operator-(double a, const Tensor& b) { return binary("sub", scalar_like(b, a, "sub"), b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return binary("div", scalar_like(b, a, "div"), b); }

}  // namespace coppice
