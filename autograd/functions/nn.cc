#include "autograd/functions/nn.h"

#include <memory>
#include <utility>

#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/sparse_nn.h"
#include "autograd/sparse_grad.h"
#include "sparse/row_sparse.h"

namespace coppice {

using autograd_detail::saved_if;
using Grads = std::vector<Tensor>;

Variable softmax(const Variable& x, int64_t dim) {
  if (x.value().is_sparse()) return autograd_detail::sparse_softmax(x, dim, /*log=*/false);
  Tensor y = softmax(x.value(), dim);
  return record(y, "SoftmaxBackward", {x}, [y, dim](const Tensor& g, const GradNeeds&) {
    // y (g - sum(g y))
    return Grads{mul(y, sub(g, sum(mul(g, y), {dim}, /*keepdim=*/true)))};
  });
}

Variable log_softmax(const Variable& x, int64_t dim) {
  if (x.value().is_sparse()) return autograd_detail::sparse_softmax(x, dim, /*log=*/true);
  Tensor y = log_softmax(x.value(), dim);
  return record(y, "LogSoftmaxBackward", {x}, [y, dim](const Tensor& g, const GradNeeds&) {
    // g - softmax * sum(g)
    return Grads{sub(g, mul(exp(y), sum(g, {dim}, /*keepdim=*/true)))};
  });
}

Variable cross_entropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& options) {
  Tensor z = logits.value();
  Tensor loss = cross_entropy(z, target, options);
  return record(loss, "CrossEntropyBackward", {logits}, [z, target, options](const Tensor& g, const GradNeeds&) {
    return Grads{cross_entropy_backward(z, target, g, options)};
  });
}

namespace {

// The operands of an elementwise loss: both defined, floating, of one dtype, shape and device.
void check_loss_operands(const char* op, const char* input_name, const Variable& input, const Variable& target) {
  COPPICE_CHECK(input.defined(), op, ": ", input_name, " is undefined");
  COPPICE_CHECK(target.defined(), op, ": target is undefined");
  COPPICE_CHECK(is_floating(input.dtype()), op, ": ", input_name, " must be floating-point, got ",
                dtype_name(input.dtype()));
  COPPICE_CHECK(target.dtype() == input.dtype(), op, ": target has dtype ", dtype_name(target.dtype()), " but ",
                input_name, " has dtype ", dtype_name(input.dtype()), "; convert target to ",
                dtype_name(input.dtype()));
  COPPICE_CHECK(target.shape() == input.shape(), op, ": target has shape ", shape_to_string(target.shape()), " but ",
                input_name, " has shape ", shape_to_string(input.shape()), "; they must be the same");
  COPPICE_CHECK(target.device() == input.device(), op, ": target is on ", target.device().to_string(), " but ",
                input_name, " is on ", input.device().to_string());
}

Variable reduce_loss(const Variable& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean: return mean(losses);
    case Reduction::kSum: return sum(losses);
    case Reduction::kNone: return losses;
  }
  fail("loss: unknown reduction ", static_cast<int>(reduction));
}

}  // namespace

Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction) {
  check_loss_operands("mse_loss", "input", input, target);
  const Variable d = input - target;
  return reduce_loss(d * d, reduction);
}

Variable l1_loss(const Variable& input, const Variable& target, Reduction reduction) {
  check_loss_operands("l1_loss", "input", input, target);
  return reduce_loss(abs(input - target), reduction);
}

Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& target, Reduction reduction) {
  check_loss_operands("binary_cross_entropy_with_logits", "logits", logits, target);
  const Variable a = abs(logits);
  // (x + |x|) / 2 is max(x, 0) exactly; its gradient (1 + sign(x)) / 2 is 1/2
  // at 0, where softplus(-|x|)'s -sign(x) sigmoid(-|x|) is 0: sigmoid(0) - y in all.
  const Variable positive_part = (logits + a) * 0.5;
  // softplus(v) = log1p(exp(v)) for v <= 20, so softplus(-|x|) is log1p(exp(-|x|)).
  return reduce_loss(positive_part - logits * target + softplus(-a), reduction);
}

Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps) {
  if (x.value().is_sparse()) return autograd_detail::sparse_layer_norm(x, normalized_shape, weight, bias, eps);
  Tensor xv = x.value();
  Tensor wv = weight.defined() ? weight.value() : Tensor();
  Tensor y = layer_norm(xv, normalized_shape, wv, bias.defined() ? bias.value() : Tensor(), eps);
  return record(y, "LayerNormBackward", {x, weight, bias},
                [xv, wv, normalized_shape, eps](const Tensor& g, const GradNeeds& n) {
                  // Recomputes the statistics rather than keeping them from the forward pass.
                  const LayerNormGrads r = layer_norm_backward(xv, normalized_shape, wv, g, n[1], n[2], eps);
                  return Grads{n[0] ? r.dx : Tensor(), r.dweight, r.dbias};
                });
}

namespace {

// add_layer_norm's node: outputs h (slot 0) and y (slot 1); inputs x, r,
// weight, bias. record() makes one-output nodes only, so this one is built
// by hand; the engine keeps a gradient buffer per output slot and calls
// apply with both (undefined where none arrived).
class AddLayerNormNode final : public Node {
 public:
  AddLayerNormNode(Tensor h, Tensor weight, Shape normalized_shape, double eps)
      : Node("AddLayerNormBackward", 2),
        h_(std::move(h)),
        weight_(std::move(weight)),
        shape_(std::move(normalized_shape)),
        eps_(eps) {}

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    COPPICE_CHECK(h_.defined(), "backward: ", name(), " has no saved tensors (they were freed)");
    const Tensor &dh = grad_outputs[0], &dy = grad_outputs[1];
    Tensor dx = dh, dw, db;
    if (dy.defined()) {
      const bool want_dw = needs_input_grad(2), want_db = needs_input_grad(3);
      // The statistics are recomputed from h, as LayerNormBackward does from its input.
      LayerNormGrads g;
      if (dh.defined() && !dh.is_dense()) {  // a sparse gradient of h: added as the engine would
        g = layer_norm_backward(h_, shape_, weight_, dy, want_dw, want_db, eps_);
        g.dx = accumulate_grads(g.dx, dh, "backward");
      } else {
        g = add_layer_norm_backward(h_, shape_, weight_, dh, dy, want_dw, want_db, eps_);
      }
      dx = g.dx;
      dw = g.dweight;
      db = g.dbias;
    }
    return {needs_input_grad(0) ? dx : Tensor(), needs_input_grad(1) ? dx : Tensor(), dw, db};
  }

  void release_saved() override {
    h_ = Tensor();
    weight_ = Tensor();
  }

 private:
  Tensor h_, weight_;
  Shape shape_;
  double eps_;
};

}  // namespace

AddLayerNormVariables add_layer_norm(const Variable& x, const Variable& r, const Shape& normalized_shape,
                                     const Variable& weight, const Variable& bias, double eps) {
  Tensor wv = weight.defined() ? weight.value() : Tensor();
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  // Without r the stream's add was formed before (linear_residual): h is x.
  AddLayerNormResult out = r.defined()
                               ? add_layer_norm(x.value(), r.value(), normalized_shape, wv, bv, eps)
                               : AddLayerNormResult{x.value(), layer_norm(x.value(), normalized_shape, wv, bv, eps)};
  const std::vector<Variable> inputs = {x, r, weight, bias};
  if (!should_record(out.y, inputs)) return {Variable(out.h), Variable(out.y)};
  auto node = std::make_shared<AddLayerNormNode>(out.h, wv, normalized_shape, eps);
  for (const Variable& v : inputs) {
    if (v.defined()) {
      node->add_input(v.gradient_edge(), InputMeta{v.shape(), v.dtype()});
    } else {
      node->add_input(Edge{}, InputMeta{});
    }
  }
  return {Variable::from_node(out.h, node, 0), Variable::from_node(out.y, node, 1)};
}

Variable attention(const Variable& q, const Variable& k, const Variable& v, double scale, const AttentionMask& mask) {
  Tensor qv = q.value(), kv = k.value(), vv = v.value();
  AttentionOutput o = attention_forward(qv, kv, vv, scale, mask);
  return record(o.out, "AttentionBackward", {q, k, v}, [qv, kv, vv, o, scale, mask](const Tensor& g, const GradNeeds&) {
    AttentionGrads d = attention_backward(qv, kv, vv, o.out, o.lse, g, scale, mask);
    return Grads{d.dq, d.dk, d.dv};
  });
}

Variable attention_packed(const Variable& qkv, double scale, const AttentionMask& mask) {
  Tensor x = qkv.value();
  AttentionOutput o = attention_forward_packed(x, scale, mask);
  return record(o.out, "AttentionBackward", {qkv}, [x, o, scale, mask](const Tensor& g, const GradNeeds&) {
    return Grads{attention_backward_packed(x, o.out, o.lse, g, scale, mask)};
  });
}

Variable embedding(const Variable& weight, const Tensor& indices, bool sparse_grad) {
  // A sparse weight's gradient is on its own pattern whatever sparse_grad says.
  if (weight.value().is_sparse()) return autograd_detail::sparse_embedding(weight, indices);
  Shape wshape = weight.shape();
  return record(embedding(weight.value(), indices), "EmbeddingBackward", {weight},
                [wshape, indices, sparse_grad](const Tensor& g, const GradNeeds&) {
                  if (sparse_grad) {
                    return Grads{row_sparse_sum(g.reshape({-1, wshape[1]}), indices.reshape({-1}), wshape[0])};
                  }
                  return Grads{embedding_backward(g, indices, wshape[0])};
                });
}

Variable embedding_bag(const Variable& weight, const Tensor& indices, const EmbeddingBagOptions& options,
                       const Variable& per_sample_weights) {
  COPPICE_CHECK(weight.defined(), "embedding_bag: weight is undefined");
  EmbeddingBagOptions o = options;
  o.per_sample_weights = per_sample_weights.defined() ? per_sample_weights.value() : Tensor();
  Tensor wv = weight.value();
  EmbeddingBags bags = embedding_bags(wv, indices, o);
  ValuesIndices out = embedding_bag_with_argmax(wv, bags);
  return record(
      out.values, "EmbeddingBagBackward", {weight, per_sample_weights},
      [wv, bags, argmax = out.indices, sparse_grad = options.sparse_grad](const Tensor& g, const GradNeeds& n) {
        Grads r(2);
        if (n[0]) {
          const Tensor rows = embedding_bag_entry_grads(g, bags, argmax);
          r[0] = sparse_grad ? row_sparse_sum(rows, bags.indices, wv.size(0), bags.padding_idx)
                             : embedding_backward(rows, bags.indices, wv.size(0));
        }
        if (n[1]) r[1] = embedding_bag_per_sample_weights_grad(g, wv, bags);
        return r;
      });
}

Variable dropout(const Variable& x, double p, bool training, Generator& gen) {
  COPPICE_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  if (x.value().is_sparse()) return autograd_detail::sparse_dropout(x, p, training, gen);
  Tensor xv = x.value();
  // The same draw as the Tensor op: kept elements scaled by 1/(1-p).
  Tensor scale = mul(bernoulli(xv.shape(), 1.0 - p, xv.options(), gen), 1.0 / (1.0 - p));
  return record(mul(xv, scale), "DropoutBackward", {x},
                [scale](const Tensor& g, const GradNeeds&) { return Grads{mul(g, scale)}; });
}

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dOptions& options) {
  Tensor xv = saved_if(weight.requires_grad(), x.value()), wv = weight.value();
  Shape xshape = x.shape();
  Tensor y = conv2d(x.value(), wv, bias.defined() ? bias.value() : Tensor(), options);
  return record(y, "Conv2dBackward", {x, weight, bias}, [xv, wv, xshape, options](const Tensor& g, const GradNeeds& n) {
    // y[n] = W2 cols[n], with W2 = weight as [o, c*kh*kw] and cols = im2col(x).
    int64_t o = wv.size(0);
    std::vector<int64_t> kernel = {wv.size(2), wv.size(3)};
    Tensor g3 = g.reshape({g.size(0), o, -1});  // [n, o, oh*ow]
    Tensor w2 = wv.reshape({o, -1});
    Tensor gx, gw, gb;
    if (n[0]) gx = col2im(matmul(w2.t(), g3), xshape, kernel, options);
    if (n[1]) {
      Tensor cols = im2col(xv, kernel, options);  // recomputed: kh*kw times the input's size
      gw = sum(matmul(g3, cols.transpose(1, 2)), {0}).reshape(wv.shape());
    }
    if (n[2]) gb = sum(g, {0, 2, 3});
    return Grads{gx, gw, gb};
  });
}

VariableIndices max_pool2d_with_indices(const Variable& x, const std::vector<int64_t>& kernel,
                                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  ValuesIndices r = max_pool2d_with_indices(x.value(), kernel, stride, padding);
  Shape xshape = x.shape();
  Tensor indices = r.indices;
  Variable values = record(r.values, "MaxPool2dBackward", {x}, [xshape, indices](const Tensor& g, const GradNeeds&) {
    // Each output's gradient goes to the input position its index names in its h*w plane.
    int64_t plane = xshape[xshape.size() - 2] * xshape[xshape.size() - 1];
    int64_t planes = shape_numel(xshape) / plane;
    Tensor gx = scatter_add(zeros({planes, plane}, g.options()), 1, indices.reshape({planes, -1}).contiguous(),
                            g.reshape({planes, -1}).contiguous());
    return Grads{gx.reshape(xshape)};
  });
  return {values, r.indices};
}

Variable max_pool2d(const Variable& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& padding) {
  if (!should_record(x.value(), {x})) return Variable(max_pool2d(x.value(), kernel, stride, padding));
  return max_pool2d_with_indices(x, kernel, stride, padding).values;
}

Variable im2col(const Variable& x, const std::vector<int64_t>& kernel, const Conv2dOptions& options) {
  Shape xshape = x.shape();
  return record(im2col(x.value(), kernel, options), "Im2colBackward", {x},
                [xshape, kernel, options](const Tensor& g, const GradNeeds&) {
                  return Grads{col2im(g, xshape, kernel, options)};
                });
}

Variable col2im(const Variable& cols, const Shape& image_shape, const std::vector<int64_t>& kernel,
                const Conv2dOptions& options) {
  return record(col2im(cols.value(), image_shape, kernel, options), "Col2imBackward", {cols},
                [kernel, options](const Tensor& g, const GradNeeds&) { return Grads{im2col(g, kernel, options)}; });
}

}  // namespace coppice
