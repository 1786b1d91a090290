#include "autograd/functions/elementwise.h"

#include <cmath>
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

Variable neg(const Variable& x) {
  if (x.value().is_sparse()) return autograd_detail::sparse_unary(x, "neg");
  return record(neg(x.value()), "NegBackward", {x}, [](const Tensor& g, const GradNeeds&) { return Grads{neg(g)}; });
}

Variable abs(const Variable& x) {
  if (x.value().is_sparse()) return autograd_detail::sparse_unary(x, "abs");
  Tensor xv = x.value();
  return record(abs(xv), "AbsBackward", {x},
                [xv](const Tensor& g, const GradNeeds&) { return Grads{mul(g, sign(xv))}; });
}

Variable sign(const Variable& x) {
  return record(sign(x.value()), "SignBackward", {x},
                [](const Tensor& g, const GradNeeds&) { return Grads{zeros(g.shape(), g.options())}; });
}

Variable exp(const Variable& x) {
  Tensor y = exp(x.value());
  return record(y, "ExpBackward", {x}, [y](const Tensor& g, const GradNeeds&) { return Grads{mul(g, y)}; });
}

Variable log(const Variable& x) {
  Tensor xv = x.value();
  return record(log(xv), "LogBackward", {x}, [xv](const Tensor& g, const GradNeeds&) { return Grads{div(g, xv)}; });
}

Variable sqrt(const Variable& x) {
  Tensor y = sqrt(x.value());
  return record(y, "SqrtBackward", {x}, [y](const Tensor& g, const GradNeeds&) { return Grads{div(g, mul(y, 2.0))}; });
}

Variable rsqrt(const Variable& x) {
  Tensor y = rsqrt(x.value());
  return record(y, "RsqrtBackward", {x}, [y](const Tensor& g, const GradNeeds&) {
    return Grads{mul(g, mul(pow(y, 3.0), -0.5))};  // d x^-1/2 = -x^-3/2 / 2
  });
}

Variable relu(const Variable& x) {
  if (x.value().is_sparse()) return autograd_detail::sparse_unary(x, "relu");
  Tensor y = relu(x.value());
  return record(y, "ReluBackward", {x}, [y](const Tensor& g, const GradNeeds&) { return Grads{relu_backward(g, y)}; });
}

Variable gelu(const Variable& x) {
  Tensor xv = x.value();
  return record(gelu(xv), "GeluBackward", {x}, [xv](const Tensor& g, const GradNeeds&) {
    return Grads{gelu_backward(g, xv)};  // d/dx x Phi(x) = Phi(x) + x phi(x), one pass
  });
}

Variable sigmoid(const Variable& x) {
  Tensor y = sigmoid(x.value());
  return record(y, "SigmoidBackward", {x},
                [y](const Tensor& g, const GradNeeds&) { return Grads{mul(g, mul(y, 1.0 - y))}; });
}

Variable tanh(const Variable& x) {
  Tensor y = tanh(x.value());
  return record(y, "TanhBackward", {x},
                [y](const Tensor& g, const GradNeeds&) { return Grads{mul(g, 1.0 - mul(y, y))}; });
}

Variable erf(const Variable& x) {
  Tensor xv = x.value();
  return record(erf(xv), "ErfBackward", {x}, [xv](const Tensor& g, const GradNeeds&) {
    return Grads{mul(g, mul(exp(neg(mul(xv, xv))), 2.0 / std::sqrt(M_PI)))};
  });
}

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
