#include "autograd/functions/elementwise.h"

#include <cctype>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/sparse.h"
#include "autograd/functions/sparse_nn.h"
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

namespace {

// "Add" + "Backward" for add, "Gelu" + "Backward" for gelu: the graph node's name.
template <typename Op>
const std::string& backward_name() {
  static const std::string name = [] {
    std::string n = Op::kName;
    n[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(n[0])));
    return n + "Backward";
  }();
  return name;
}

// The sparse autograd paths of the ops with kSparseAutograd.
Variable sparse_binary(binary_ops::Add, const Variable& a, const Variable& b) {
  return autograd_detail::sparse_add(a, b);
}
Variable sparse_binary(binary_ops::Mul, const Variable& a, const Variable& b) {
  return autograd_detail::sparse_mul(a, b);
}

// y = forward(a, b) with Op::grad as its backward (summed back to each
// operand's shape), keeping alive only what the needed gradients read.
template <typename Op, typename Forward>
Variable binary(const Variable& a, const Variable& b, Forward forward) {
  if constexpr (Op::kSparseAutograd) {
    if (a.value().is_sparse() || b.value().is_sparse()) return sparse_binary(Op{}, a, b);
  }
  Tensor y = forward(a.value(), b.value());
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  auto kept = [&](unsigned what) {
    return (need_a && (Op::kGradAReads & what)) || (need_b && (Op::kGradBReads & what));
  };
  const Tensor as = saved_if(kept(binary_ops::kReadsA), a.value());
  const Tensor bs = saved_if(kept(binary_ops::kReadsB), b.value());
  const Tensor ys = saved_if(kept(binary_ops::kReadsY), y);
  Shape sa = a.shape(), sb = b.shape();
  return record(y, backward_name<Op>(), {a, b}, [as, bs, ys, sa, sb](const Tensor& g, const GradNeeds& n) {
    const std::pair<Tensor, Tensor> d = Op::grad(g, as, bs, ys, n[0], n[1]);
    return Grads{n[0] ? sum_to(d.first, sa) : Tensor(), n[1] ? sum_to(d.second, sb) : Tensor()};
  });
}

}  // namespace

#define COPPICE_DEFINE_BINARY(fn, Op)                                                                        \
  Variable fn(const Variable& a, const Variable& b) {                                                        \
    return binary<binary_ops::Op>(a, b, [](const Tensor& x, const Tensor& y) { return coppice::fn(x, y); }); \
  }
COPPICE_DIFFERENTIABLE_BINARY_OPS(COPPICE_DEFINE_BINARY)
#undef COPPICE_DEFINE_BINARY

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

Variable add(double a, const Variable& b) { return add(b, a); }
Variable mul(double a, const Variable& b) { return mul(b, a); }

Variable sub(double a, const Variable& b) {
  return record(a - b.value(), "RsubBackward", {b}, [](const Tensor& g, const GradNeeds&) { return Grads{neg(g)}; });
}

Variable div(double a, const Variable& b) {
  Tensor bv = b.value();
  Tensor y = a / bv;
  return record(y, "RdivBackward", {b},
                [bv, y](const Tensor& g, const GradNeeds&) { return Grads{neg(div(mul(g, y), bv))}; });
}

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

Variable gelu_of_form(const Variable& x, GeluForm form) { return form == GeluForm::kTanh ? gelu_tanh(x) : gelu(x); }

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
  if (a.value().is_sparse() || b.value().is_sparse()) return autograd_detail::sparse_where(cond, a, b);
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
Variable operator+(double a, const Variable& b) { return add(a, b); }
Variable operator-(double a, const Variable& b) { return sub(a, b); }
Variable operator*(double a, const Variable& b) { return mul(a, b); }
Variable operator/(double a, const Variable& b) { return div(a, b); }

}  // namespace coppice
