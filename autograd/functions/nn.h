// Differentiable neural-network functions (see tensor/ops.h for the forward
// semantics). Gradients flow to every floating input that requires grad;
// targets and indices are plain Tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "sparse/attention/attention.h"
#include "tensor/ops.h"

namespace coppice {

Variable softmax(const Variable& x, int64_t dim);
Variable log_softmax(const Variable& x, int64_t dim);
// logits [n, c], target i64 [n].
Variable cross_entropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// Elementwise losses of an input against a target of the same shape, dtype
// (floating) and device, composed from the differentiable elementwise ops and
// reductions, so that the target may require grad too. A mismatch is an
// error naming the argument. `reduction`: the mean or the sum of the
// elementwise losses (0-D), or the losses themselves (kNone, input's shape).
// (input - target)^2 (PyTorch's mse_loss).
Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::kMean);
// |input - target|, gradient sign(input - target), 0 where they are equal (l1_loss).
Variable l1_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::kMean);
// Binary cross-entropy of targets in [0, 1] against logits x, in the stable
// form max(x, 0) - x y + log1p(exp(-|x|)) (no overflow for large |x|, no
// cancellation where the loss is small), with max(x, 0) formed as
// (x + |x|) / 2, the same value, so that the gradient is sigmoid(x) - y at
// x = 0 too (binary_cross_entropy_with_logits, without weights).
Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& target,
                                          Reduction reduction = Reduction::kMean);
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight = Variable(),
                    const Variable& bias = Variable(), double eps = 1e-5);
// The pre-norm residual step, tensor/ops.h's add_layer_norm: h = x + r and
// y = layer_norm(h, ...), two outputs of one graph node. Its backward takes
// the gradients reaching h (from h's other users) and y and gives x and r
// both dh + layer_norm's dx, formed in one kernel where the device has one.
// r may be undefined: then h is x's value (a residual stream whose add was
// formed before it: residual.h), y = layer_norm(x, ...), and the backward
// still sums the gradient reaching h with the norm's in that one kernel.
struct AddLayerNormVariables {
  Variable h, y;
};
AddLayerNormVariables add_layer_norm(const Variable& x, const Variable& r, const Shape& normalized_shape,
                                     const Variable& weight = Variable(), const Variable& bias = Variable(),
                                     double eps = 1e-5);
// Rows of weight [v, d] picked by `indices`; the gradient is scattered back
// into weight's rows: dense [v, d], or with sparse_grad row-sparse
// (sparse/row_sparse.h: a BSR of [1, d] blocks holding only the rows the
// indices name, sorted, repeats summed in index order), which a dense weight
// keeps as its gradient (functions/sparse.h's table says how it accumulates).
Variable embedding(const Variable& weight, const Tensor& indices, bool sparse_grad = false);
// Embedding bags (tensor/ops.h's embedding_bag: 2-D indices, or 1-D with
// options.offsets; sum, mean or max; padding_idx). `per_sample_weights` (sum
// mode, indices' shape) is differentiable too; options.per_sample_weights is
// ignored here. Weight's gradient adds each entry's row (its bag's gradient
// row times its factor) in entry order: deterministic on every device;
// options.sparse_grad makes it row-sparse as embedding's (padding rows left out).
Variable embedding_bag(const Variable& weight, const Tensor& indices, const EmbeddingBagOptions& options = {},
                       const Variable& per_sample_weights = Variable());
// Draws its mask from `gen` as the Tensor op does (same generator state, same mask); p in [0, 1).
Variable dropout(const Variable& x, double p, bool training, Generator& gen = default_generator());
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias = Variable(),
                const Conv2dOptions& options = {});
VariableIndices max_pool2d_with_indices(const Variable& x, const std::vector<int64_t>& kernel,
                                        const std::vector<int64_t>& stride = {},
                                        const std::vector<int64_t>& padding = {0, 0});
Variable max_pool2d(const Variable& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride = {},
                    const std::vector<int64_t>& padding = {0, 0});
// Fused scaled dot-product attention (sparse/attention/attention.h) of q, k, v [N, T, d]
// with `mask`: softmax(scale * q k^T) v without a [T, T] matrix; the backward
// pass recomputes the probabilities from the saved log-sum-exps.
Variable attention(const Variable& q, const Variable& k, const Variable& v, double scale, const AttentionMask& mask);
// The same for a packed qkv [B, T, 3, H, d] (qkv[:, :, 0] is q) -> [B, T, H, d];
// its gradient has qkv's layout, so a projection's reshape stays a view.
Variable attention_packed(const Variable& qkv, double scale, const AttentionMask& mask);
// The unfold/fold primitives, each the other's adjoint.
Variable im2col(const Variable& x, const std::vector<int64_t>& kernel, const Conv2dOptions& options);
Variable col2im(const Variable& cols, const Shape& image_shape, const std::vector<int64_t>& kernel,
                const Conv2dOptions& options);

}  // namespace coppice
