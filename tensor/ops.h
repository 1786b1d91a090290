// Tensor ops: what users and the autograd layer call.
//
// Every op checks its operands (shape, dtype, device) and throws
// coppice::Error naming itself and what it expected, then runs through the
// dispatcher, so a sparse format registered later takes the same calls.
// Binary ops broadcast (NumPy rules) and promote dtypes (promote_types).
// Composite ops (softmax, cross_entropy, conv2d, ...) are built from the
// primitives in kernels.h unless a device registers a fused kernel of the same
// name.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "tensor/binary_ops.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"
#include "tensor/unary_ops.h"

namespace coppice {

class Attrs;  // tensor/dispatcher.h

// ---- factories -------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, TensorOptions options = {});  // 0-dimensional
// [start, end) in steps of `step`; i64 unless options say otherwise.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = DType::kI64);
Tensor arange(int64_t end, TensorOptions options = DType::kI64);
// From host values; `shape` defaults to [values.size()], except that a single
// value with no shape gives a 0-dimensional tensor.
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, TensorOptions options = dtype_of<T>());
// Random (Philox; the same numbers on every device for the same generator state).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator& gen = default_generator());
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator& gen = default_generator());
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = DType::kI64,
               Generator& gen = default_generator());
// 1 with probability p, else 0, in `options.dtype` (bool allowed).
Tensor bernoulli(const Shape& shape, double p, TensorOptions options = {}, Generator& gen = default_generator());

// ---- elementwise -----------------------------------------------------------
// The binary ops, one per line of COPPICE_BINARY_OPS (tensor/binary_ops.h,
// which says what each computes): Tensor add(const Tensor& a, const Tensor&
// b), ..., eq (bool results), relu_backward(grad, y), gelu_backward(grad, x),
// gelu_tanh_backward(grad, x).
#define COPPICE_DECLARE_BINARY(fn, Op) Tensor fn(const Tensor& a, const Tensor& b);
COPPICE_BINARY_OPS(COPPICE_DECLARE_BINARY)
#undef COPPICE_DECLARE_BINARY
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// The unary ops, one per line of COPPICE_UNARY_OPS (tensor/unary_ops.h, which
// says what each computes): Tensor exp(const Tensor& x), Tensor gelu(const
// Tensor& x) and so on. Integer inputs of the floating-only ones are computed
// in f32; a sparse input keeps its pattern when f(0) = 0.
#define COPPICE_DECLARE_UNARY(fn, Op) Tensor fn(const Tensor& x);
COPPICE_UNARY_OPS(COPPICE_DECLARE_UNARY)
#undef COPPICE_DECLARE_UNARY
// relu_backward(grad, y) of 2-D [r, c] tensors and its sum over the rows
// ([c]): a fused linear_relu's input gradient and bias gradient, in one pass
// over grad and y on the GPU (operands of one floating dtype); elsewhere the
// two ops.
std::pair<Tensor, Tensor> relu_backward_col_sums(const Tensor& grad, const Tensor& y);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// ---- reductions ------------------------------------------------------------
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64
};
Tensor sum(const Tensor& x);  // all elements, 0-dimensional
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor max(const Tensor& x);  // all elements
Tensor min(const Tensor& x);
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// The p-norm over all elements, or over `dims`.
Tensor norm(const Tensor& x, double p = 2.0);
Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim = false);
// The k largest (or smallest) along `dim`, sorted.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// ---- linear algebra --------------------------------------------------------
// NumPy matmul: 1-D operands are promoted and the added dim removed; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);  // [b, m, k] x [b, k, n]
// x [..., in] times weight [out, in] transposed, plus bias [out] when defined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)) as one kernel where one is registered for the
// operands' formats and device (CUDA, BSR weight: bias and relu in the SpMM's
// write-out); otherwise exactly that composite, which is the CPU twin.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// r + linear(x, weight, bias) (r of the product's shape and dtype: a
// residual stream's add after a projection) from one kernel that adds r in
// the product's write-out, with the bits of add(r, linear(x, weight, bias))
// (the product rounded to the dtype, then the sum rounded). Undefined where
// no kernel for these operands does, and then nothing has run: the caller
// adds r itself or leaves the add to a pass that fuses it (add_layer_norm).
// Only a BSR weight of 32x32, 64x64 or 128x128 blocks in bf16 or f16 on
// Hopper has one today (sparse/cuda/bsr_wgmma.h, "linear_add").
Tensor linear_add_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& r);
// A transformer MLP's activation with the product before it and after it.
// linear_gelu: {gelu(z), z} for z = linear(x, weight, bias), the
// pre-activation z being what gelu's gradient needs; matmul_gelu_backward:
// gelu_backward(matmul(g, weight), z), the gradient at z of a linear layer
// whose input was gelu(z), from the gradient g [..., out] at its output
// (weight [out, in], z [..., in]). GeluForm::kTanh: gelu_tanh and
// gelu_tanh_backward instead (the op attribute "tanh"). Each is one kernel
// where one is registered for the operands' formats and device (CUDA, BSR or
// 2:4 weight: the gelu or its gradient in the product's write-out, bits equal
// to the composite's; CUDA, dense weight, the tanh form: cuBLASLt's GELU
// epilogues, within a 16-bit rounding of the composite: they apply the gelu to
// the unrounded product); otherwise exactly the composite, the CPU twin.
enum class GeluForm { kErf, kTanh };
// gelu (kErf) or gelu_tanh (kTanh) of x; and g times that form's gradient at
// x (gelu_backward or gelu_tanh_backward): the composites' elementwise ops.
Tensor gelu_of_form(const Tensor& x, GeluForm form);
Tensor gelu_backward_of_form(const Tensor& g, const Tensor& x, GeluForm form);
// The form a linear_gelu or matmul_gelu_backward kernel is asked for: its
// op attribute "tanh" (false when unset).
GeluForm gelu_form(const Attrs& attrs);
std::pair<Tensor, Tensor> linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                                      GeluForm form = GeluForm::kErf);
Tensor matmul_gelu_backward(const Tensor& g, const Tensor& weight, const Tensor& z, GeluForm form = GeluForm::kErf);
// A linear layer's weight gradient from the gradient at its output g [N, out]
// and its input x [N, in]: gw [out, in] = g^T x and, when `bias`, gb [out] =
// the sum of g's rows (undefined otherwise): matmul and sum on every device
// (cuBLASLt's bias-gradient epilogue measured slower on CUDA:
// tensor/cuda/linear_lt.cc). With `gw_out` defined (contiguous [out, in],
// g's dtype and device, no memory shared with g or x) gw is written into it
// and returned: a data-parallel exchange's bucket (distributed/grad_sync.h).
std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& g, const Tensor& x, bool bias,
                                             const Tensor& gw_out = Tensor());

// ---- neural-network ops ----------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

enum class Reduction { kMean, kSum, kNone };
struct CrossEntropyOptions {
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;             // targets equal to this contribute nothing
  Reduction reduction = Reduction::kMean;  // mean over the targets not ignored
};
// logits [n, c], target i64 [n].
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// d cross_entropy / d logits times grad (0-D, or [n] for reduction none):
// per row with a target t not ignored, (softmax(z) - (1 - eps) onehot(t) -
// eps / c) times the row's weight in the loss. Targets are not range-checked
// again (the forward did).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& grad,
                              const CrossEntropyOptions& options = {});

// Normalizes over the trailing `normalized_shape`; weight and bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// layer_norm's gradients from the output gradient `grad` (x's shape), the
// statistics recomputed from x: {dx, dweight (when want_dweight and weight is
// defined), dbias (when want_dbias)}, the latter two summed over the rows in
// order; weight may be undefined (no affine scale). A fused
// kernel where the device has one ("layer_norm_backward"), else the
// composite (the CPU's, and the CUDA kernel's twin).
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads layer_norm_backward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& grad, bool want_dweight, bool want_dbias, double eps = 1e-5);
// The pre-norm residual step: h = x + r (r of x's shape and dtype) and
// y = layer_norm(h, ...), from one pass over the rows where the device has a
// fused kernel ("add_layer_norm": x and r read once, h and y written once);
// else add then layer_norm, its CPU twin, whose values it has.
struct AddLayerNormResult {
  Tensor h, y;
};
AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& r, const Shape& normalized_shape,
                                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);
// Its gradients, from dh (the gradient reaching h from its other users; may
// be undefined) and dy: dx = dr = dh + layer_norm_backward(h, ..., dy).dx,
// the sum rounded once, and dweight and dbias as layer_norm_backward's; one
// fused kernel for dx where the device has one ("add_layer_norm_backward").
LayerNormGrads add_layer_norm_backward(const Tensor& h, const Shape& normalized_shape, const Tensor& weight,
                                       const Tensor& dh, const Tensor& dy, bool want_dweight, bool want_dbias,
                                       double eps = 1e-5);
// Rows of weight [v, d] picked by an integer tensor of any shape: [..., d].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// embedding's gradient: [num_embeddings, d], row v the sum of grad's rows
// ([..., d]) whose index is v, in index order, in the compute type (each sum
// rounded once); an index out of range is an error naming it.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_embeddings);

// Embedding bags (PyTorch's embedding_bag; tensor/ops_embedding_bag.cc): each
// bag's rows of weight [v, d] reduced to one row, [B, d]. The bags are
// `indices` 2-D [B, L] (fixed-size bags), or 1-D [n] with `offsets` (bag b
// starts at offsets[b]; offsets[0] is 0 and they never decrease; with
// include_last_offset offsets has B + 1 entries, the last n). An entry equal
// to padding_idx (negative: counted from v) contributes nothing and does not
// count toward a mean; an empty bag is zeros. per_sample_weights (indices'
// shape, weight's dtype) multiply each entry's row, in sum mode only. Max
// mode takes each column's largest over the bag (the first in entry order;
// a NaN wins over any number, as PyTorch's max propagates it), and its
// gradient reaches that entry's row alone.
enum class BagMode { kSum, kMean, kMax };
const char* bag_mode_name(BagMode mode);  // "sum", "mean", "max"
struct EmbeddingBagOptions {
  BagMode mode = BagMode::kSum;
  Tensor offsets;  // with 1-D indices; undefined with 2-D ones
  bool include_last_offset = false;
  Tensor per_sample_weights;
  std::optional<int64_t> padding_idx;
  // For the Variable function (autograd/functions/nn.h): weight's gradient
  // row-sparse (sparse/row_sparse.h), the rows the bags use, padding left out.
  bool sparse_grad = false;
};
// The bags checked (errors name embedding_bag and the argument) and in the
// kernel's form, kept for the backward pass. The offsets are read to the host
// (B + 1 integers) to be checked and to give each entry its bag.
struct EmbeddingBags {
  Tensor indices;             // i64 [n]
  Tensor offsets;             // i64 [B + 1]: bag b is entries offsets[b] .. offsets[b + 1]
  Tensor entry_bag;           // i64 [n]: each entry's bag
  Tensor per_sample_weights;  // [n], or undefined
  Shape sample_shape;         // per_sample_weights' shape as given (indices' shape)
  BagMode mode = BagMode::kSum;
  int64_t padding_idx = -1;  // in [0, v), or -1: none
  int64_t num_embeddings = 0;
  int64_t num_bags() const { return offsets.numel() - 1; }
};
EmbeddingBags embedding_bags(const Tensor& weight, const Tensor& indices, const EmbeddingBagOptions& options = {});
Tensor embedding_bag(const Tensor& weight, const Tensor& indices, const EmbeddingBagOptions& options = {});
Tensor embedding_bag(const Tensor& weight, const EmbeddingBags& bags);
// The bags' rows and, in max mode, each element's entry position (i64 [B, d];
// -1 where the bag has no entry); undefined indices in the other modes.
ValuesIndices embedding_bag_with_argmax(const Tensor& weight, const EmbeddingBags& bags);
// The gradient of each entry's row of weight, [n, d]: grad's row for its bag
// times the entry's factor (its per-sample weight, 1, or 1 / its bag's count
// in mean mode; 0 at padding); in max mode grad's element at the entry that
// gave the maximum, 0 elsewhere (`argmax`: embedding_bag_with_argmax's
// indices). embedding_backward(rows, bags.indices, v) is weight's dense
// gradient; the row-sparse one sums the same rows.
Tensor embedding_bag_entry_grads(const Tensor& grad, const EmbeddingBags& bags, const Tensor& argmax = Tensor());
// The per-sample weights' gradient, of their shape as given: grad's row for
// the entry's bag dotted with weight's row at the entry (0 at padding).
Tensor embedding_bag_per_sample_weights_grad(const Tensor& grad, const Tensor& weight, const EmbeddingBags& bags);
// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when !training.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());

struct Conv2dOptions {
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};
};
// x [n, c, h, w], weight [o, c, kh, kw], bias [o] optional.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});
// Returns values and flat indices into each h*w plane (what the backward pass needs).
ValuesIndices max_pool2d_with_indices(const Tensor& x, const std::vector<int64_t>& kernel,
                                      const std::vector<int64_t>& stride = {},
                                      const std::vector<int64_t>& padding = {0, 0});
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride = {},
                  const std::vector<int64_t>& padding = {0, 0});
// Primitives the backward passes use (exposed for autograd/).
Tensor im2col(const Tensor& x, const std::vector<int64_t>& kernel, const Conv2dOptions& options);
Tensor col2im(const Tensor& cols, const Shape& image_shape, const std::vector<int64_t>& kernel,
              const Conv2dOptions& options);

// ---- shape and indexing ----------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Copies each of `pieces` (contiguous, out's dtype and device) into `out`
// (contiguous) seen flat, at element offsets[k], in one launch on a GPU;
// pieces must not overlap each other or `out`'s other pieces. What fills a
// data-parallel exchange's bucket with the gradients not written into it
// (distributed/grad_sync.h).
void copy_into_at(const Tensor& out, const std::vector<Tensor>& pieces, const std::vector<int64_t>& offsets);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src added at index along dim (duplicates accumulate).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// index_select and scatter_add for an index Coppice derived itself and knows
// to be in range (a sparse pattern's maps, built and checked once): the same
// results without the range check, which on a GPU reads a flag back to the
// host at every call, a synchronization that no graph capture can record.
// Never for an index from outside.
Tensor index_select_trusted(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add_trusted(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// x's slices at `index` along dim replaced by src's, in place (x must be
// contiguous and writable; src has x's shape but index.numel() along dim, and
// x's dtype). Only those slices are read or written, so a row-sparse optimizer
// step (optim/optimizer.h) costs its rows, not the table. Indices should be
// distinct: with a repeated one, which source lands is unspecified.
void index_copy_(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---- comparison helpers for tests -----------------------------------------
// True when shapes match and |a - b| <= atol + rtol * |b| everywhere (NaN never matches).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// The largest |a - b| (as f64), after broadcasting.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace coppice

#include "tensor/ops_inl.h"
