#include "autograd/functions/elementwise.h"

#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/sparse.h"
#include "tensor/ops.h"

namespace coppice {

using autograd_detail::mask_grad;
using autograd_detail::saved_if;
using autograd_detail::sum_to;
using Grads = std::vector<Tensor>;

namespace {

Tensor zero_like_scalar(const Tensor& g) { return scalar_tensor(0.0, g.options()); }

}  // namespace

// ---- binary ----------------------------------------------------------------

Variable add(const Variable& a, const Variable& b) {
  if (a.value().is_sparse() || b.value().is_sparse()) return autograd_detail::sparse_add(a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record(add(a.value(), b.value()), "AddBackward", {a, b}, [sa, sb](const Tensor& g, const GradNeeds& n) {
    return Grads{n[0] ? sum_to(g, sa) : Tensor(), n[1] ? sum_to(g, sb) : Tensor()};
  });
}

Variable sub(const Variable& a, const Variable& b) {
  Shape sa = a.shape(), sb = b.shape();
  return record(sub(a.value(), b.value()), "SubBackward", {a, b}, [sa, sb](const Tensor& g, const GradNeeds& n) {
    return Grads{n[0] ? sum_to(g, sa) : Tensor(), n[1] ? sum_to(neg(g), sb) : Tensor()};
  });
}

Variable mul(const Variable& a, const Variable& b) {
  if (a.value().is_sparse() || b.value().is_sparse()) return autograd_detail::sparse_mul(a, b);
  Tensor av = saved_if(b.requires_grad(), a.value()), bv = saved_if(a.requires_grad(), b.value());
  Shape sa = a.shape(), sb = b.shape();
  return record(mul(a.value(), b.value()), "MulBackward", {a, b},
                [av, bv, sa, sb](const Tensor& g, const GradNeeds& n) {
                  return Grads{n[0] ? sum_to(mul(g, bv), sa) : Tensor(), n[1] ? sum_to(mul(g, av), sb) : Tensor()};
                });
}

Variable div(const Variable& a, const Variable& b) {
  Tensor y = div(a.value(), b.value());
  Tensor bv = b.value(), yv = saved_if(b.requires_grad(), y);
  Shape sa = a.shape(), sb = b.shape();
  return record(y, "DivBackward", {a, b}, [bv, yv, sa, sb](const Tensor& g, const GradNeeds& n) {
    Tensor ga, gb;
    if (n[0]) ga = sum_to(div(g, bv), sa);
    if (n[1]) gb = sum_to(neg(div(mul(g, yv), bv)), sb);  // -g a / b^2 = -g y / b
    return Grads{ga, gb};
  });
}

Variable pow(const Variable& a, const Variable& b) {
  Tensor y = pow(a.value(), b.value());
  Tensor av = a.value(), bv = saved_if(a.requires_grad(), b.value()), yv = saved_if(b.requires_grad(), y);
  Shape sa = a.shape(), sb = b.shape();
  return record(y, "PowBackward", {a, b}, [av, bv, yv, sa, sb](const Tensor& g, const GradNeeds& n) {
    Tensor ga, gb;
    if (n[0]) ga = sum_to(mul(g, mul(bv, pow(av, sub(bv, 1.0)))), sa);
    if (n[1]) gb = sum_to(mask_grad(mul(g, mul(yv, log(av))), ne(av, 0.0)), sb);
    return Grads{ga, gb};
  });
}

namespace {

// maximum/minimum: the winner takes the gradient, ties split it.
Variable extremum(const Variable& a, const Variable& b, bool is_max) {
  Tensor av = a.value(), bv = b.value();
  Tensor y = is_max ? maximum(av, bv) : minimum(av, bv);
  Shape sa = a.shape(), sb = b.shape();
  return record(y, is_max ? "MaximumBackward" : "MinimumBackward", {a, b},
                [av, bv, sa, sb, is_max](const Tensor& g, const GradNeeds& n) {
                  DType dt = g.dtype();
                  Tensor wins = (is_max ? gt(av, bv) : lt(av, bv)).to(dt);
                  Tensor share = add(wins, mul(eq(av, bv).to(dt), 0.5));  // a's share of the gradient
                  Tensor ga, gb;
                  if (n[0]) ga = sum_to(mul(g, share), sa);
                  if (n[1]) gb = sum_to(mul(g, 1.0 - share), sb);
                  return Grads{ga, gb};
                });
}

}  // namespace

Variable maximum(const Variable& a, const Variable& b) { return extremum(a, b, true); }
Variable minimum(const Variable& a, const Variable& b) { return extremum(a, b, false); }

// ---- with a scalar ---------------------------------------------------------

Variable add(const Variable& a, double b) {
  return record(add(a.value(), b), "AddScalarBackward", {a},
                [](const Tensor& g, const GradNeeds&) { return Grads{g}; });
}

Variable sub(const Variable& a, double b) {
  return record(sub(a.value(), b), "SubScalarBackward", {a},
                [](const Tensor& g, const GradNeeds&) { return Grads{g}; });
}

Variable mul(const Variable& a, double b) {
  return record(mul(a.value(), b), "MulScalarBackward", {a},
                [b](const Tensor& g, const GradNeeds&) { return Grads{mul(g, b)}; });
}

Variable div(const Variable& a, double b) {
  return record(div(a.value(), b), "DivScalarBackward", {a},
                [b](const Tensor& g, const GradNeeds&) { return Grads{div(g, b)}; });
}

Variable pow(const Variable& a, double exponent) {
  Tensor av = a.value();
  return record(pow(av, exponent), "PowScalarBackward", {a}, [av, exponent](const Tensor& g, const GradNeeds&) {
    if (exponent == 0.0) return Grads{zeros(g.shape(), g.options())};
    if (exponent == 1.0) return Grads{g};
    if (exponent == 2.0) return Grads{mul(g, mul(av, 2.0))};
    return Grads{mul(g, mul(pow(av, exponent - 1.0), exponent))};
  });
}

namespace {

// double - x and double / x.
Variable rsub(double a, const Variable& b) {
  return record(a - b.value(), "RsubBackward", {b}, [](const Tensor& g, const GradNeeds&) { return Grads{neg(g)}; });
}

Variable rdiv(double a, const Variable& b) {
  Tensor bv = b.value();
  Tensor y = a / bv;
  return record(y, "RdivBackward", {b},
                [bv, y](const Tensor& g, const GradNeeds&) { return Grads{neg(div(mul(g, y), bv))}; });
}

}  // namespace

// ---- comparisons -----------------------------------------------------------

Tensor eq(const Variable& a, const Variable& b) { return eq(a.value(), b.value()); }
Tensor ne(const Variable& a, const Variable& b) { return ne(a.value(), b.value()); }
Tensor lt(const Variable& a, const Variable& b) { return lt(a.value(), b.value()); }
Tensor le(const Variable& a, const Variable& b) { return le(a.value(), b.value()); }
Tensor gt(const Variable& a, const Variable& b) { return gt(a.value(), b.value()); }
Tensor ge(const Variable& a, const Variable& b) { return ge(a.value(), b.value()); }
Tensor eq(const Variable& a, double b) { return eq(a.value(), b); }
Tensor ne(const Variable& a, double b) { return ne(a.value(), b); }
Tensor lt(const Variable& a, double b) { return lt(a.value(), b); }
Tensor le(const Variable& a, double b) { return le(a.value(), b); }
Tensor gt(const Variable& a, double b) { return gt(a.value(), b); }
Tensor ge(const Variable& a, double b) { return ge(a.value(), b); }

// ---- unary -----------------------------------------------------------------

namespace {

// "Gelu" + "Backward" for gelu: the graph node's name.
template <typename Op>
const std::string& backward_name() {
  static const std::string name = [] {
    std::string n = Op::kName;
    n[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(n[0])));
    return n + "Backward";
  }();
  return name;
}

// y = forward(x) with Op::grad as its backward, keeping alive only what grad
// reads (x or y).
template <typename Op, typename Forward>
Variable unary(const Variable& x, Forward forward) {
  if (Op::kZeroPreserving && x.value().is_sparse()) return with_values(x.value(), forward(values(x)));
  Tensor y = forward(x.value());
  const Tensor xs = Op::kGradUses == unary_ops::GradUses::kInput ? x.value() : Tensor();
  const Tensor ys = Op::kGradUses == unary_ops::GradUses::kOutput ? y : Tensor();
  return record(y, backward_name<Op>(), {x},
                [xs, ys](const Tensor& g, const GradNeeds&) { return Grads{Op::grad(g, xs, ys)}; });
}

}  // namespace

#define COPPICE_DEFINE_UNARY(fn, Op)                                              \
  Variable fn(const Variable& x) {                                                \
    return unary<unary_ops::Op>(x, [](const auto& v) { return coppice::fn(v); }); \
  }
COPPICE_UNARY_OPS(COPPICE_DEFINE_UNARY)
#undef COPPICE_DEFINE_UNARY

Variable clamp(const Variable& x, std::optional<double> min, std::optional<double> max) {
  Tensor xv = x.value();
  return record(clamp(xv, min, max), "ClampBackward", {x}, [xv, min, max](const Tensor& g, const GradNeeds&) {
    Tensor r = g;
    if (min) r = mask_grad(r, ge(xv, *min));
    if (max) r = mask_grad(r, le(xv, *max));
    return Grads{r};
  });
}

Variable where(const Tensor& cond, const Variable& a, const Variable& b) {
  Shape sa = a.shape(), sb = b.shape();
  return record(where(cond, a.value(), b.value()), "WhereBackward", {a, b},
                [cond, sa, sb](const Tensor& g, const GradNeeds& n) {
                  Tensor ga, gb;
                  if (n[0]) ga = sum_to(where(cond, g, zero_like_scalar(g)), sa);
                  if (n[1]) gb = sum_to(where(cond, zero_like_scalar(g), g), sb);
                  return Grads{ga, gb};
                });
}

// ---- operators -------------------------------------------------------------

Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
Variable operator-(const Variable& x) { return neg(x); }
Variable operator+(const Variable& a, double b) { return add(a, b); }
Variable operator-(const Variable& a, double b) { return sub(a, b); }
Variable operator*(const Variable& a, double b) { return mul(a, b); }
Variable operator/(const Variable& a, double b) { return div(a, b); }
Variable operator+(double a, const Variable& b) { return add(b, a); }
Variable operator-(double a, const Variable& b) { return rsub(a, b); }
Variable operator*(double a, const Variable& b) { return mul(b, a); }
Variable operator/(double a, const Variable& b) { return rdiv(a, b); }

}  // namespace coppice
