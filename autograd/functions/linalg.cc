#include "autograd/functions/linalg.h"

#include <tuple>

#include "autograd/function.h"
#include "autograd/functions/einsum.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/sparse.h"
#include "autograd/gradient_destination.h"
#include "tensor/ops.h"

namespace coppice {

using autograd_detail::linear_output_grads;
using autograd_detail::saved_if;
using autograd_detail::sum_to;
using autograd_detail::through_relu;
using Grads = std::vector<Tensor>;

namespace {

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

}  // namespace

Variable matmul(const Variable& a, const Variable& b) {
  if (a.value().is_sparse() || b.value().is_sparse()) return autograd_detail::sparse_matmul(a, b);
  Tensor av = saved_if(b.requires_grad(), a.value()), bv = saved_if(a.requires_grad(), b.value());
  Shape sa = a.shape(), sb = b.shape();
  return record(matmul(a.value(), b.value()), "MatmulBackward", {a, b},
                [av, bv, sa, sb](const Tensor& g, const GradNeeds& n) {
                  // Work on the 2-D-or-more forms, then undo the promotion.
                  Shape pa = sa.size() == 1 ? Shape{1, sa[0]} : sa;
                  Shape pb = sb.size() == 1 ? Shape{sb[0], 1} : sb;
                  Tensor gp = g;
                  if (sa.size() == 1) gp = gp.unsqueeze(gp.dim() - (sb.size() == 1 ? 0 : 1));
                  if (sb.size() == 1) gp = gp.unsqueeze(gp.dim());
                  Tensor ga, gb;
                  if (n[0]) {
                    Tensor b2 = bv.reshape(pb);
                    ga = sum_to(matmul(gp, mT(b2)), pa).reshape(sa);
                  }
                  if (n[1]) {
                    Tensor a2 = av.reshape(pa);
                    if (pb.size() == 2 && a2.dim() > 2) {
                      // A shared weight: fold the batch into the rows instead of summing products.
                      int64_t k = pa.back();
                      gb = matmul(mT(a2.reshape({-1, k})), gp.reshape({-1, gp.size(-1)})).reshape(sb);
                    } else {
                      gb = sum_to(matmul(mT(a2), gp), pb).reshape(sb);
                    }
                  }
                  return Grads{ga, gb};
                });
}

Variable bmm(const Variable& a, const Variable& b) {
  // A sparse operand (a 3-D COO): one SpMM over its entries remapped to a
  // block-diagonal matrix, einsum's batched route.
  if (a.value().is_sparse() || b.value().is_sparse()) {
    COPPICE_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D operands [b, m, k] and [b, k, n], got a ",
                  shape_to_string(a.shape()), " and b ", shape_to_string(b.shape()));
    return einsum("bij,bjk->bik", {a, b});
  }
  Tensor av = saved_if(b.requires_grad(), a.value()), bv = saved_if(a.requires_grad(), b.value());
  return record(bmm(a.value(), b.value()), "BmmBackward", {a, b}, [av, bv](const Tensor& g, const GradNeeds& n) {
    return Grads{n[0] ? bmm(g, mT(bv)) : Tensor(), n[1] ? bmm(mT(av), g) : Tensor()};
  });
}

namespace {

// linear, or linear_relu when `relu`: one node, whose backward is linear's
// applied to the gradient through the relu (y saved only then). With the
// weight's gradient asked for, both come from linear_weight_grad (the
// weight's written into its destination when it has one:
// gradient_destination.h); otherwise the bias's from linear_output_grads.
Variable linear_node(const Variable& x, const Variable& weight, const Variable& bias, bool relu) {
  if (x.value().is_sparse() || weight.value().is_sparse()) {
    return autograd_detail::sparse_linear(x, weight, bias, relu);
  }
  Tensor xv = saved_if(weight.requires_grad(), x.value()), wv = saved_if(x.requires_grad(), weight.value());
  Tensor bv = bias.defined() ? bias.value() : Tensor();
  Tensor y = relu ? linear_relu(x.value(), weight.value(), bv) : linear(x.value(), weight.value(), bv);
  Tensor y_saved = saved_if(relu, y);
  return record(
      y, relu ? "LinearReluBackward" : "LinearBackward", {x, weight, bias},
      [xv, wv, y_saved](const Tensor& g_out, const GradNeeds& n) {
        Tensor g2, gw, gb, gx;
        if (n[1]) {
          const int64_t out = g_out.dim() == 0 ? 1 : g_out.size(-1);
          g2 = through_relu(g_out, y_saved).reshape({-1, out});
          std::tie(gw, gb) = linear_weight_grad(g2, xv.reshape({-1, xv.size(-1)}), n[2], gradient_destination(1));
        } else {
          std::tie(g2, gb) = linear_output_grads(g_out, y_saved, n[2]);
        }
        if (n[0]) {
          Shape xs = g_out.shape();  // [..., out] -> [..., in]
          if (!xs.empty()) xs.back() = wv.size(-1);
          gx = matmul(g2, wv).reshape(xs);
        }
        return Grads{gx, gw, gb};
      });
}

}  // namespace

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  return linear_node(x, weight, bias, /*relu=*/false);
}

Variable linear_relu(const Variable& x, const Variable& weight, const Variable& bias) {
  return linear_node(x, weight, bias, /*relu=*/true);
}

}  // namespace coppice
