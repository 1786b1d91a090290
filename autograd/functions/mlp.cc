#include "autograd/functions/mlp.h"

#include <functional>
#include <tuple>
#include <utility>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/sparse.h"
#include "autograd/functions/straight_through.h"
#include "autograd/gradient_destination.h"
#include "sparse/ops.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace coppice {

using autograd_detail::saved_if;
using Grads = std::vector<Tensor>;

namespace {

// run_beside where `beside`, else first then second.
void beside_if(bool beside, Device device, const std::function<void()>& first, const std::function<void()>& second) {
  if (beside) {
    run_beside(device, first, second);
  } else {
    first();
    second();
  }
}

// One layer's weight and bias gradients from g2, the gradient at its output
// as rows [N, out], and x2, its input as rows [N, in] (read only for the
// weight's): linear_weight_grad for a dense weight; for a sparse one
// pattern_grad (the SDDMM at its pattern, or g2^T x2 whole for a
// straight-through projection) and the bias gradient as the sum of g2's
// rows, both from one pass where they can (weight_and_bias_grads). What
// linear's backward does, a dense weight's gradient written into `gw_out`
// when defined (its destination: gradient_destination.h).
std::pair<Tensor, Tensor> layer_param_grads(const Tensor& g2, const Tensor& x2, const Tensor& w, bool need_w,
                                            bool need_b, bool dense_grad, const Tensor& gw_out) {
  if (!w.is_sparse() && need_w) return linear_weight_grad(g2, x2, need_b, gw_out);
  if (need_w && need_b && !dense_grad) return autograd_detail::weight_and_bias_grads(g2, x2, w);
  const Tensor gw = need_w ? autograd_detail::pattern_grad(g2.t(), x2, w, dense_grad) : Tensor();
  return {gw, need_b ? sum(g2, {0}) : Tensor()};
}

// One layer's gradients from g2, the gradient at its output as rows [N, out]:
// the input's (through gelu's gradient at z, its pre-activation, where z is
// defined), the weight's and the bias's, each where asked for. A sparse
// layer's three come from one pass where a kernel does it
// (input_and_weight_grads); otherwise the input's product runs beside its
// parameters' for a sparse layer (both read g2, neither writes what the
// other reads, and the SDDMM leaves SMs the product fills), while dense
// layers, whose cuBLAS products fill the GPU, keep one stream.
LinearGrads layer_grads(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& z, GeluForm form,
                        bool need_input, bool need_w, bool need_b, bool dense_grad, const Tensor& gw_out) {
  if (w.is_sparse() && need_input && need_w && !dense_grad) {
    LinearGrads fused = autograd_detail::input_and_weight_grads(g2, x2, w, need_b, z, form);
    if (fused.weight.defined()) return fused;
  }
  LinearGrads out;
  beside_if(
      w.is_sparse(), g2.device(),
      [&] {
        if (need_input) out.input = z.defined() ? matmul_gelu_backward(g2, w, z, form).contiguous() : matmul(g2, w);
      },
      [&] { std::tie(out.weight, out.bias) = layer_param_grads(g2, x2, w, need_w, need_b, dense_grad, gw_out); });
  // The parameters' gradients made beside may still be in the making.
  if (w.is_sparse()) made_beside_all({out.weight, out.bias});
  return out;
}

// gelu_mlp's node, with h added in w2's product's write-out where h is
// defined and a kernel adds it (`added` then says so; else the node is
// gelu_mlp's alone).
Variable gelu_mlp_node(const Variable& h, const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2,
                       const Variable& b2, GeluForm form, bool& added) {
  COPPICE_CHECK(x.defined() && w1.defined() && w2.defined(), "gelu_mlp: x, w1 and w2 must be defined");
  const Tensor xv = x.value(), w1v = w1.value(), w2v = w2.value();
  const Tensor b1v = b1.defined() ? b1.value() : Tensor(), b2v = b2.defined() ? b2.value() : Tensor();
  auto [a, z] = linear_gelu(xv, w1v, b1v, form);
  Tensor y = h.defined() ? linear_add_fused(a, w2v, b2v, h.value()) : Tensor();
  added = y.defined();
  if (!added) y = linear(a, w2v, b2v);
  const Variable hin = added ? h : Variable();
  if (!should_record(y, {x, w1, b1, w2, b2, hin})) return Variable(std::move(y));
  COPPICE_CHECK(w1v.dim() == 2 && w2v.dim() == 2, "gelu_mlp: weights must be 2-D, got ", shape_to_string(w1v.shape()),
                " and ", shape_to_string(w2v.shape()));
  const bool before_z = x.requires_grad() || w1.requires_grad() || (b1.defined() && b1.requires_grad());
  const Tensor x_saved = saved_if(w1.requires_grad(), xv), z_saved = saved_if(before_z, z);
  const Tensor a_saved = saved_if(w2.requires_grad(), a);
  const bool dense1 = wants_dense_gradient(w1), dense2 = wants_dense_gradient(w2);
  const Shape xs = xv.shape();
  return record(y, added ? "GeluMlpAddBackward" : "GeluMlpBackward", {x, w1, b1, w2, b2, hin},
                [=](const Tensor& g, const GradNeeds& n) {
                  const int64_t in = w1v.size(1), hidden = w1v.size(0), out = w2v.size(0);
                  const Tensor g2 = g.reshape({-1, out}).contiguous();
                  // fc2's input gradient is the one at z (fc1's output, through the gelu).
                  const LinearGrads l2 = layer_grads(g2, n[3] ? a_saved.reshape({-1, hidden}) : Tensor(), w2v,
                                                     z_saved.defined() ? z_saved.reshape({-1, hidden}) : Tensor(), form,
                                                     n[0] || n[1] || n[2], n[3], n[4], dense2, gradient_destination(3));
                  LinearGrads l1;
                  if (l2.input.defined()) {
                    l1 = layer_grads(l2.input, n[1] ? x_saved.reshape({-1, in}) : Tensor(), w1v, Tensor(), form, n[0],
                                     n[1], n[2], dense1, gradient_destination(1));
                  }
                  const Tensor gx = l1.input.defined() ? l1.input.reshape(xs) : Tensor();
                  return Grads{gx, l1.weight, l1.bias, l2.weight, l2.bias, n[5] ? g : Tensor()};
                });
}

}  // namespace

Variable gelu_mlp(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2, const Variable& b2,
                  GeluForm form) {
  COPPICE_CHECK(x.defined() && w1.defined() && w2.defined(), "gelu_mlp: x, w1 and w2 must be defined");
  if (x.value().is_sparse()) return linear(gelu_of_form(linear(x, w1, b1), form), w2, b2);
  bool added = false;
  return gelu_mlp_node(Variable(), x, w1, b1, w2, b2, form, added);
}

ResidualStream gelu_mlp_residual(const Variable& h, const Variable& x, const Variable& w1, const Variable& b1,
                                 const Variable& w2, const Variable& b2, GeluForm form) {
  COPPICE_CHECK(h.defined(), "gelu_mlp_residual: h must be defined");
  COPPICE_CHECK(x.defined() && w1.defined() && w2.defined(), "gelu_mlp: x, w1 and w2 must be defined");
  if (x.value().is_sparse()) return {h, gelu_mlp(x, w1, b1, w2, b2, form)};
  bool added = false;
  Variable y = gelu_mlp_node(h, x, w1, b1, w2, b2, form, added);
  return added ? ResidualStream{y, Variable()} : ResidualStream{h, y};
}

}  // namespace coppice
