// Neural-network ops: softmax, cross-entropy, layer norm, embedding, dropout,
// convolution and pooling.
//
// The composites are written in the primitives of kernels.h and run in the
// compute dtype (f32 for 16-bit inputs), rounding to the input's dtype once at
// the end. A device that registers a fused kernel under the op's own name
// (softmax, log_softmax, cross_entropy, layer_norm, conv2d; kernels.h lists
// the inputs and attributes; add_layer_norm and its backward: their kernels'
// launchers in tensor/cuda/layer_norm.cu) gets the call instead, after
// validation.
#include <cmath>

#include "tensor/dispatcher.h"
#include "tensor/error_context.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

bool has_fused(std::string_view op, Device device) { return Dispatcher::instance().has_kernel(op, device.type); }

void check_floating(const Tensor& t, std::string_view op, std::string_view what) {
  COPPICE_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating-point, got ", dtype_name(t.dtype()));
}

// A pair of values from one (used for both) or two, each checked by `ok`.
template <typename Pred>
std::vector<int64_t> pair(const std::vector<int64_t>& v, std::string_view op, std::string_view what, Pred ok,
                          std::string_view expected) {
  COPPICE_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must have 1 or 2 values, got ", v.size());
  std::vector<int64_t> out = v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
  for (int64_t x : out) COPPICE_CHECK(ok(x), op, ": ", what, " must be ", expected, ", got ", shape_to_string(v));
  return out;
}

struct ConvGeometry {
  std::vector<int64_t> kernel, stride, padding, dilation;
  int64_t oh = 0, ow = 0;
};

// Validates the window parameters and computes the output size of a
// convolution window over an h x w image.
ConvGeometry conv_geometry(int64_t h, int64_t w, const std::vector<int64_t>& kernel, const Conv2dOptions& options,
                           std::string_view op) {
  auto positive = [](int64_t x) { return x > 0; };
  auto non_negative = [](int64_t x) { return x >= 0; };
  ConvGeometry g;
  g.kernel = pair(kernel, op, "kernel", positive, "positive");
  g.stride = pair(options.stride, op, "stride", positive, "positive");
  g.padding = pair(options.padding, op, "padding", non_negative, "non-negative");
  g.dilation = pair(options.dilation, op, "dilation", positive, "positive");
  int64_t span_h = g.dilation[0] * (g.kernel[0] - 1) + 1, span_w = g.dilation[1] * (g.kernel[1] - 1) + 1;
  COPPICE_CHECK(h + 2 * g.padding[0] >= span_h && w + 2 * g.padding[1] >= span_w, op, ": the ",
                shape_to_string(g.kernel), " window (dilation ", shape_to_string(g.dilation),
                ") does not fit the padded input of size [", h + 2 * g.padding[0], ", ", w + 2 * g.padding[1], "]");
  g.oh = (h + 2 * g.padding[0] - span_h) / g.stride[0] + 1;
  g.ow = (w + 2 * g.padding[1] - span_w) / g.stride[1] + 1;
  return g;
}

Attrs window_attrs(const ConvGeometry& g) {
  Attrs attrs;
  attrs.set("kernel", g.kernel).set("stride", g.stride).set("padding", g.padding).set("dilation", g.dilation);
  return attrs;
}

void check_image(const Tensor& x, std::string_view op, std::string_view what) {
  check_dense(x, op, what);
  COPPICE_CHECK(x.dim() == 4, op, ": ", what, " must be 4-D [n, c, h, w], got ", shape_to_string(x.shape()));
  check_floating(x, op, what);
}

std::string_view reduction_name(Reduction r) {
  switch (r) {
    case Reduction::kMean: return "mean";
    case Reduction::kSum: return "sum";
    case Reduction::kNone: return "none";
  }
  return "?";
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  check_dense(x, op::kSoftmax, "input");
  check_floating(x, op::kSoftmax, "input");
  int64_t d = normalize_dim(dim, x.dim(), op::kSoftmax);
  if (has_fused(op::kSoftmax, x.device())) return dispatch(op::kSoftmax, {x}, Attrs().set("dim", d))[0];
  if (x.numel() == 0) return empty(x.shape(), x.options());
  Tensor xc = x.to(compute_dtype(x.dtype()));
  Tensor e = exp(sub(xc, max(xc, d, true).values));
  return div(e, sum(e, {d}, true)).to(x.dtype());
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_dense(x, op::kLogSoftmax, "input");
  check_floating(x, op::kLogSoftmax, "input");
  int64_t d = normalize_dim(dim, x.dim(), op::kLogSoftmax);
  if (has_fused(op::kLogSoftmax, x.device())) return dispatch(op::kLogSoftmax, {x}, Attrs().set("dim", d))[0];
  if (x.numel() == 0) return empty(x.shape(), x.options());
  Tensor xc = x.to(compute_dtype(x.dtype()));
  Tensor shifted = sub(xc, max(xc, d, true).values);
  return sub(shifted, log(sum(exp(shifted), {d}, true))).to(x.dtype());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  constexpr std::string_view op = op::kCrossEntropy;
  check_dense(logits, op, "logits");
  check_dense(target, op, "target");
  check_same_device({logits, target}, op);
  check_floating(logits, op, "logits");
  COPPICE_CHECK(logits.dim() == 2, op, ": logits must be 2-D [n, c], got ", shape_to_string(logits.shape()));
  COPPICE_CHECK(target.dtype() == DType::kI64, op, ": target must be i64, got ", dtype_name(target.dtype()));
  COPPICE_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), op, ": target must be [", logits.size(0),
                "] for logits ", shape_to_string(logits.shape()), ", got ", shape_to_string(target.shape()));
  COPPICE_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, op,
                ": label_smoothing must be in [0, 1], got ", options.label_smoothing);
  if (has_fused(op, logits.device())) {
    Attrs attrs;
    attrs.set("label_smoothing", options.label_smoothing)
        .set("ignore_index", options.ignore_index)
        .set("reduction", std::string(reduction_name(options.reduction)));
    return dispatch(op, {logits, target}, attrs)[0];
  }

  DType compute = compute_dtype(logits.dtype());
  Tensor lp = log_softmax(logits.to(compute), 1);                        // [n, c]
  Tensor valid = ne(target, static_cast<double>(options.ignore_index));  // [n]
  Tensor zero_index = zeros({}, target.options());
  Tensor safe_target = where(valid, target, zero_index);
  Tensor picked;
  const std::string bad_target = str_cat(op, ": a target is not a class index in [0, ", logits.size(1),
                                         ") nor ignore_index (", options.ignore_index, ")");
  const ErrorContext context(bad_target);  // where the device reports it later
  try {
    picked = gather(lp, 1, safe_target.unsqueeze(1));  // checks each target against [0, c)
  } catch (const Error& e) { fail(bad_target, ": ", e.what()); }
  Tensor nll = neg(picked.squeeze(1));  // [n]
  Tensor loss = nll;
  if (options.label_smoothing > 0.0) {
    // The smoothed target puts eps/c on every class: its cross-entropy is -mean(lp) per row.
    Tensor smooth = neg(mean(lp, {1}));
    loss = add(mul(nll, 1.0 - options.label_smoothing), mul(smooth, options.label_smoothing));
  }
  loss = where(valid, loss, zeros({}, TensorOptions(compute, logits.device())));
  Tensor result;
  switch (options.reduction) {
    case Reduction::kNone: result = loss; break;
    case Reduction::kSum: result = sum(loss); break;
    case Reduction::kMean: result = div(sum(loss), sum(valid).to(compute)); break;
  }
  return result.to(logits.dtype());
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& grad,
                              const CrossEntropyOptions& options) {
  constexpr std::string_view op = op::kCrossEntropyBackward;
  check_dense(logits, op, "logits");
  check_dense(target, op, "target");
  check_dense(grad, op, "grad");
  check_same_device({logits, target, grad}, op);
  COPPICE_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), op,
                ": logits must be [n, c] and target [n], got ", shape_to_string(logits.shape()), " and ",
                shape_to_string(target.shape()));
  const bool per_row = options.reduction == Reduction::kNone;
  COPPICE_CHECK(per_row ? grad.dim() == 1 && grad.size(0) == logits.size(0) : grad.numel() == 1, op, ": grad ",
                shape_to_string(grad.shape()), " does not fit reduction ", reduction_name(options.reduction));
  if (has_fused(op, logits.device())) {
    Attrs attrs;
    attrs.set("label_smoothing", options.label_smoothing)
        .set("ignore_index", options.ignore_index)
        .set("reduction", std::string(reduction_name(options.reduction)));
    return dispatch(op, {logits, target, grad}, attrs)[0];
  }
  const int64_t c = logits.size(1);
  const double eps = options.label_smoothing;
  const Tensor valid = ne(target, static_cast<double>(options.ignore_index));
  const Tensor safe = where(valid, target, zeros_like(target)).to(DType::kI64).unsqueeze(1);
  const Tensor onehot =
      scatter_add(zeros(logits.shape(), logits.options()), 1, safe, ones({logits.size(0), 1}, logits.options()));
  const Tensor d = sub(softmax(logits, 1), add(mul(onehot, 1.0 - eps), eps / static_cast<double>(c)));
  // The weight of each row's loss in the output.
  Tensor row;
  switch (options.reduction) {
    case Reduction::kNone: row = grad; break;
    case Reduction::kSum: row = grad.reshape({}).expand({logits.size(0)}); break;
    case Reduction::kMean: {
      const Tensor count = sum(valid.to(grad.dtype()));
      row = div(grad.reshape({}), maximum(count, scalar_tensor(1.0, grad.options()))).expand({logits.size(0)});
      break;
    }
  }
  return mul(d, where(valid, row, scalar_tensor(0.0, row.options())).unsqueeze(1));
}

namespace {

// The checks layer_norm and add_layer_norm share, naming `op`.
void check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                      double eps, std::string_view op) {
  check_dense(x, op, "input");
  check_floating(x, op, "input");
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  COPPICE_CHECK(k > 0, op, ": normalized_shape must not be empty");
  Shape trailing(x.shape().end() - std::min<int64_t>(k, x.dim()), x.shape().end());
  COPPICE_CHECK(x.dim() >= k && trailing == normalized_shape, op, ": input ", shape_to_string(x.shape()),
                " does not end in normalized_shape ", shape_to_string(normalized_shape));
  COPPICE_CHECK(eps >= 0.0, op, ": eps must be non-negative, got ", eps);
  auto check_affine = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    check_dense(t, op, name);
    check_same_device({x, t}, op);
    COPPICE_CHECK(t.shape() == normalized_shape, op, ": ", name, " must have shape ", shape_to_string(normalized_shape),
                  ", got ", shape_to_string(t.shape()));
    COPPICE_CHECK(t.dtype() == x.dtype(), op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected ",
                  dtype_name(x.dtype()), " like the input");
  };
  check_affine(weight, "weight");
  check_affine(bias, "bias");
}

// `t` (x's shape and dtype, dense, on x's device), named `what` in errors.
void check_like_input(const Tensor& t, const Tensor& x, std::string_view op, std::string_view what) {
  check_dense(t, op, what);
  check_same_device({x, t}, op);
  COPPICE_CHECK(t.shape() == x.shape() && t.dtype() == x.dtype(), op, ": ", what, " ", shape_to_string(t.shape()), " ",
                dtype_name(t.dtype()), " must have the input's shape ", shape_to_string(x.shape()), " and dtype ",
                dtype_name(x.dtype()));
}

// layer_norm_backward's composite with `add_grad` (x's shape, or undefined)
// added to dx in the compute dtype before the one rounding: the CPU twin of
// the fused kernels, with and without the residual's gradient.
LayerNormGrads layer_norm_backward_composite(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                             const Tensor& grad, const Tensor& add_grad, bool want_dweight,
                                             bool want_dbias, double eps) {
  const int64_t d = shape_numel(normalized_shape);
  const DType c = compute_dtype(x.dtype());
  Tensor x2 = x.reshape({-1, d}).to(c), g2 = grad.reshape({-1, d}).to(c);
  Tensor centered = sub(x2, mean(x2, {1}, true));
  Tensor rstd = rsqrt(add(mean(mul(centered, centered), {1}, true), eps));
  Tensor xhat = mul(centered, rstd);
  Tensor gxhat = weight.defined() ? mul(g2, weight.to(c).reshape({1, d})) : g2;
  Tensor inner = sub(sub(gxhat, mean(gxhat, {1}, true)), mul(xhat, mean(mul(gxhat, xhat), {1}, true)));
  Tensor dx = mul(rstd, inner);
  if (add_grad.defined()) dx = add(dx, add_grad.reshape({-1, d}).to(c));
  LayerNormGrads r{dx.to(x.dtype()).reshape(x.shape()), Tensor(), Tensor()};
  if (want_dweight && weight.defined()) r.dweight = sum(mul(g2, xhat), {0}).to(x.dtype()).reshape(normalized_shape);
  if (want_dbias) r.dbias = sum(g2, {0}).to(x.dtype()).reshape(normalized_shape);
  return r;
}

// The gradients' arguments layer_norm_backward and add_layer_norm_backward share: d.
int64_t check_layer_norm_backward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                  const Tensor& grad, std::string_view op) {
  check_dense(x, op, "input");
  check_dense(grad, op, "grad");
  check_floating(x, op, "input");
  COPPICE_CHECK(grad.shape() == x.shape() && grad.dtype() == x.dtype(), op, ": grad must have the input's shape ",
                shape_to_string(x.shape()), " and dtype ", dtype_name(x.dtype()));
  const int64_t d = shape_numel(normalized_shape);
  COPPICE_CHECK(d > 0 && x.numel() % d == 0, op, ": input ", shape_to_string(x.shape()), " does not end in ",
                shape_to_string(normalized_shape));
  if (weight.defined()) {
    check_dense(weight, op, "weight");
    COPPICE_CHECK(weight.numel() == d && weight.dtype() == x.dtype(), op, ": weight must hold ", d, " values of ",
                  dtype_name(x.dtype()));
  }
  return d;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  constexpr std::string_view op = op::kLayerNorm;
  check_layer_norm(x, normalized_shape, weight, bias, eps, op);
  if (has_fused(op, x.device())) {
    Attrs attrs;
    attrs.set("normalized_shape", normalized_shape).set("eps", eps);
    return dispatch(op, {x, weight, bias}, attrs)[0];
  }
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor xc = x.to(compute_dtype(x.dtype()));
  Tensor centered = sub(xc, mean(xc, dims, true));
  Tensor var = mean(mul(centered, centered), dims, true);  // biased, as in PyTorch
  Tensor y = mul(centered, rsqrt(add(var, eps)));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y.to(x.dtype());
}

AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& r, const Shape& normalized_shape, const Tensor& weight,
                                  const Tensor& bias, double eps) {
  constexpr std::string_view op = op::kAddLayerNorm;
  check_layer_norm(x, normalized_shape, weight, bias, eps, op);
  check_like_input(r, x, op, "residual");
  if (has_fused(op, x.device())) {
    Attrs attrs;
    attrs.set("normalized_shape", normalized_shape).set("eps", eps);
    std::vector<Tensor> out = dispatch(op, {x, r, weight, bias}, attrs);
    return {out[0], out[1]};
  }
  // The twin: the two ops it fuses, so the values are theirs exactly.
  Tensor h = add(x, r);
  return {h, layer_norm(h, normalized_shape, weight, bias, eps)};
}

LayerNormGrads layer_norm_backward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& grad, bool want_dweight, bool want_dbias, double eps) {
  constexpr std::string_view op = op::kLayerNormBackward;
  const int64_t d = check_layer_norm_backward(x, normalized_shape, weight, grad, op);
  if (has_fused(op, x.device())) {
    Attrs attrs;
    attrs.set("d", d).set("eps", eps).set("dweight", want_dweight && weight.defined()).set("dbias", want_dbias);
    std::vector<Tensor> g = dispatch(op, {x.contiguous(), weight, grad.contiguous()}, attrs);
    LayerNormGrads r{g[0].reshape(x.shape()), Tensor(), Tensor()};
    if (want_dweight && weight.defined()) r.dweight = g[1].reshape(normalized_shape);
    if (want_dbias) r.dbias = g[2].reshape(normalized_shape);
    return r;
  }
  return layer_norm_backward_composite(x, normalized_shape, weight, grad, Tensor(), want_dweight, want_dbias, eps);
}

LayerNormGrads add_layer_norm_backward(const Tensor& h, const Shape& normalized_shape, const Tensor& weight,
                                       const Tensor& dh, const Tensor& dy, bool want_dweight, bool want_dbias,
                                       double eps) {
  constexpr std::string_view op = op::kAddLayerNormBackward;
  const int64_t d = check_layer_norm_backward(h, normalized_shape, weight, dy, op);
  if (dh.defined()) check_like_input(dh, h, op, "dh");
  if (has_fused(op, h.device())) {
    Attrs attrs;
    attrs.set("d", d).set("eps", eps).set("dweight", want_dweight && weight.defined()).set("dbias", want_dbias);
    std::vector<Tensor> g =
        dispatch(op, {h.contiguous(), weight, dy.contiguous(), dh.defined() ? dh.contiguous() : Tensor()}, attrs);
    LayerNormGrads r{g[0].reshape(h.shape()), Tensor(), Tensor()};
    if (want_dweight && weight.defined()) r.dweight = g[1].reshape(normalized_shape);
    if (want_dbias) r.dbias = g[2].reshape(normalized_shape);
    return r;
  }
  return layer_norm_backward_composite(h, normalized_shape, weight, dy, dh, want_dweight, want_dbias, eps);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  constexpr std::string_view op = "embedding";
  check_dense(weight, op, "weight");
  check_dense(indices, op, "indices");
  check_same_device({weight, indices}, op);
  COPPICE_CHECK(weight.dim() == 2, op, ": weight must be 2-D [v, d], got ", shape_to_string(weight.shape()));
  COPPICE_CHECK(is_integral(indices.dtype()), op, ": indices must be an integer tensor, got ",
                dtype_name(indices.dtype()));
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  if (indices.numel() == 0) return empty(out_shape, weight.options());
  Tensor flat = indices.reshape({-1}).to(DType::kI64).contiguous();
  const std::string bad_index = str_cat(op, ": an index is out of range for ", weight.size(0), " embeddings");
  const ErrorContext context(bad_index);  // where the device reports it later
  try {
    return dispatch(op::kIndexSelect, {weight.contiguous(), flat}, Attrs().set("dim", int64_t{0}))[0].reshape(
        out_shape);
  } catch (const Error& e) { fail(bad_index, ": ", e.what()); }
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_embeddings) {
  constexpr std::string_view op = op::kEmbeddingBackward;
  check_dense(grad, op, "grad");
  check_dense(indices, op, "indices");
  check_same_device({grad, indices}, op);
  check_floating(grad, op, "grad");
  COPPICE_CHECK(is_integral(indices.dtype()), op, ": indices must be an integer tensor, got ",
                dtype_name(indices.dtype()));
  COPPICE_CHECK(grad.dim() >= 1 && grad.numel() == indices.numel() * grad.size(-1), op, ": grad ",
                shape_to_string(grad.shape()), " is not indices ", shape_to_string(indices.shape()), " plus a row");
  COPPICE_CHECK(num_embeddings >= 0, op, ": num_embeddings must be >= 0, got ", num_embeddings);
  const int64_t d = grad.size(-1);
  Attrs attrs;
  attrs.set("num_embeddings", num_embeddings);
  return dispatch(op, {grad.reshape({-1, d}), indices.reshape({-1}).to(DType::kI64)}, attrs)[0];
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_dense(x, "dropout", "input");
  COPPICE_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  check_floating(x, "dropout", "input");
  if (p == 0.0 || !training) return x;
  // The scale 1/(1-p) is applied in the compute dtype: in bf16 it would be off
  // by up to 2^-9 and bias every kept value the same way.
  DType compute = compute_dtype(x.dtype());
  Tensor scaled_mask = mul(bernoulli(x.shape(), 1.0 - p, TensorOptions(compute, x.device()), gen), 1.0 / (1.0 - p));
  return mul(x, scaled_mask).to(x.dtype());
}

Tensor im2col(const Tensor& x, const std::vector<int64_t>& kernel, const Conv2dOptions& options) {
  check_image(x, op::kIm2col, "input");
  ConvGeometry g = conv_geometry(x.size(2), x.size(3), kernel, options, op::kIm2col);
  Shape out_shape = {x.size(0), x.size(1) * g.kernel[0] * g.kernel[1], g.oh * g.ow};
  if (shape_numel(out_shape) == 0) return zeros(out_shape, x.options());
  return dispatch(op::kIm2col, {x.contiguous()}, window_attrs(g))[0];
}

Tensor col2im(const Tensor& cols, const Shape& image_shape, const std::vector<int64_t>& kernel,
              const Conv2dOptions& options) {
  constexpr std::string_view op = op::kCol2im;
  check_dense(cols, op, "cols");
  check_floating(cols, op, "cols");
  COPPICE_CHECK(cols.dim() == 3, op, ": cols must be 3-D [n, c*kh*kw, oh*ow], got ", shape_to_string(cols.shape()));
  COPPICE_CHECK(image_shape.size() == 4 || image_shape.size() == 2, op,
                ": image_shape must be [n, c, h, w] or [h, w], got ", shape_to_string(image_shape));
  int64_t h = image_shape[image_shape.size() - 2], w = image_shape.back();
  COPPICE_CHECK(h > 0 && w > 0, op, ": image size must be positive, got ", shape_to_string(image_shape));
  ConvGeometry g = conv_geometry(h, w, kernel, options, op);
  int64_t window = g.kernel[0] * g.kernel[1];
  COPPICE_CHECK(cols.size(1) % window == 0 && cols.size(2) == g.oh * g.ow, op, ": cols ", shape_to_string(cols.shape()),
                " do not match a ", shape_to_string(g.kernel), " window over [", h, ", ", w, "], which needs [n, c*",
                window, ", ", g.oh * g.ow, "]");
  int64_t n = cols.size(0), c = cols.size(1) / window;
  if (image_shape.size() == 4) {
    COPPICE_CHECK(image_shape[0] == n && image_shape[1] == c, op, ": cols ", shape_to_string(cols.shape()),
                  " hold n = ", n, ", c = ", c, " but image_shape is ", shape_to_string(image_shape));
  }
  if (n * c == 0) return zeros({n, c, h, w}, cols.options());
  Attrs attrs = window_attrs(g);
  attrs.set("size", std::vector<int64_t>{h, w});
  return dispatch(op::kCol2im, {cols.contiguous()}, attrs)[0];
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  constexpr std::string_view op = op::kConv2d;
  check_image(x, op, "input");
  check_dense(weight, op, "weight");
  check_same_device({x, weight, bias}, op);
  COPPICE_CHECK(weight.dim() == 4, op, ": weight must be 4-D [o, c, kh, kw], got ", shape_to_string(weight.shape()));
  COPPICE_CHECK(weight.size(1) == x.size(1), op, ": input has ", x.size(1), " channels but weight expects ",
                weight.size(1), " (input ", shape_to_string(x.shape()), ", weight ", shape_to_string(weight.shape()),
                ")");
  COPPICE_CHECK(weight.dtype() == x.dtype(), op, ": weight has dtype ", dtype_name(weight.dtype()), ", expected ",
                dtype_name(x.dtype()), " like the input");
  int64_t o = weight.size(0);
  if (bias.defined()) {
    check_dense(bias, op, "bias");
    COPPICE_CHECK(bias.dim() == 1 && bias.size(0) == o, op, ": bias must be [", o, "], got ",
                  shape_to_string(bias.shape()));
    COPPICE_CHECK(bias.dtype() == x.dtype(), op, ": bias has dtype ", dtype_name(bias.dtype()), ", expected ",
                  dtype_name(x.dtype()), " like the input");
  }
  std::vector<int64_t> kernel = {weight.size(2), weight.size(3)};
  ConvGeometry g = conv_geometry(x.size(2), x.size(3), kernel, options, op);
  if (has_fused(op, x.device())) { return dispatch(op, {x, weight, bias}, window_attrs(g))[0]; }
  int64_t n = x.size(0);
  Tensor cols = im2col(x, kernel, options);                    // [n, c*kh*kw, L]
  Tensor y = matmul(weight.reshape({o, cols.size(1)}), cols);  // [n, o, L]
  if (bias.defined()) y = add(y, bias.reshape({1, o, 1}));
  return y.reshape({n, o, g.oh, g.ow});
}

ValuesIndices max_pool2d_with_indices(const Tensor& x, const std::vector<int64_t>& kernel,
                                      const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  constexpr std::string_view op = op::kMaxPool2d;
  check_image(x, op, "input");
  Conv2dOptions options;
  options.stride = stride.empty() ? kernel : stride;
  options.padding = padding;
  options.dilation = {1, 1};
  ConvGeometry g = conv_geometry(x.size(2), x.size(3), kernel, options, op);
  COPPICE_CHECK(2 * g.padding[0] <= g.kernel[0] && 2 * g.padding[1] <= g.kernel[1], op, ": padding ",
                shape_to_string(g.padding), " must be at most half the kernel ", shape_to_string(g.kernel));
  Shape out_shape = {x.size(0), x.size(1), g.oh, g.ow};
  if (shape_numel(out_shape) == 0) {
    return {empty(out_shape, x.options()), empty(out_shape, TensorOptions(DType::kI64, x.device()))};
  }
  Attrs attrs;
  attrs.set("kernel", g.kernel).set("stride", g.stride).set("padding", g.padding);
  std::vector<Tensor> out = dispatch(op::kMaxPool2d, {x.contiguous()}, attrs);
  return {out[0], out[1]};
}

Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding) {
  return max_pool2d_with_indices(x, kernel, stride, padding).values;
}

}  // namespace coppice
