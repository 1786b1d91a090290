#include "models/layers.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "autograd/graph_observer.h"
#include "tensor/error.h"

namespace coppice {

Tensor uniform_init(const Shape& shape, double bound, const LayerOptions& options, Generator& gen) {
  Tensor u = rand(shape, TensorOptions(options.dtype), gen);  // [0, 1)
  return add(mul(u, 2.0 * bound), -bound).to(options.device);
}

// ---- Linear ------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, const LayerOptions& options, Generator& gen)
    : Module("Linear"), in_(in_features), out_(out_features) {
  COPPICE_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in=", in_features,
                " out=", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = register_parameter("weight", Variable(uniform_init({out_features, in_features}, bound, options, gen), true),
                               /*viewable=*/true);
  if (bias) bias_ = register_parameter("bias", Variable(uniform_init({out_features}, bound, options, gen), true));
}

namespace {

void check_linear_input(const Variable& x, int64_t in_features) {
  COPPICE_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear: input's last dim is ", x.dim() ? x.size(-1) : 0,
                ", expected in_features = ", in_features);
}

// x into fc1, and fc1's features into fc2: the MLP forward_gelu_mlp and its residual form run.
void check_mlp_input(const Linear& fc1, const Linear& fc2, const Variable& x) {
  check_linear_input(x, fc1.in_features());
  COPPICE_CHECK(fc2.in_features() == fc1.out_features(), "Linear: an MLP's second layer takes ", fc2.in_features(),
                " features, its first gives ", fc1.out_features());
}

}  // namespace

Variable Linear::forward(const Variable& x) {
  check_linear_input(x, in_);
  // linear() routes a sparse weight to autograd's sparse linear (SpMM forward,
  // SDDMM weight gradient on the weight's pattern).
  return run_op({x, view_of(weight_), bias()},
                [](const std::vector<Variable>& in) { return linear(in[0], in[1], in[2]); });
}

Variable Linear::forward_relu(const Variable& x) {
  if (output_rule() != nullptr) return relu(forward(x));
  check_linear_input(x, in_);
  // Through run_op (no rule is attached) so that a traced step sees this
  // module's op as its own (models/propagation).
  return run_op({x, view_of(weight_), bias()},
                [](const std::vector<Variable>& in) { return linear_relu(in[0], in[1], in[2]); });
}

Variable Linear::forward_gelu_mlp(Linear& fc1, Linear& fc2, const Variable& x, GeluForm form) {
  check_mlp_input(fc1, fc2, x);
  if (fc1.output_rule() != nullptr || fc2.output_rule() != nullptr) {
    return fc2.forward(gelu_of_form(fc1.forward(x), form));
  }
  return gelu_mlp(x, fc1.view_of(fc1.weight_), fc1.bias(), fc2.view_of(fc2.weight_), fc2.bias(), form);
}

ResidualStream Linear::forward_residual(const Variable& h, const Variable& x) {
  // A traced step (models/propagation) sees the product as this module's op.
  if (output_rule() != nullptr || graph_observer() != nullptr) return {h, forward(x)};
  check_linear_input(x, in_);
  return linear_residual(h, x, view_of(weight_), bias());
}

ResidualStream Linear::forward_gelu_mlp_residual(Linear& fc1, Linear& fc2, const Variable& h, const Variable& x,
                                                 GeluForm form) {
  if (fc1.output_rule() != nullptr || fc2.output_rule() != nullptr || graph_observer() != nullptr) {
    return {h, forward_gelu_mlp(fc1, fc2, x, form)};
  }
  check_mlp_input(fc1, fc2, x);
  return gelu_mlp_residual(h, x, fc1.view_of(fc1.weight_), fc1.bias(), fc2.view_of(fc2.weight_), fc2.bias(), form);
}

// ---- Conv2d ------------------------------------------------------------------

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv2dOptions& conv, bool bias,
               const LayerOptions& options, Generator& gen, ConvWeightLayout layout)
    : Module("Conv2d"), conv_(conv), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  COPPICE_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0, "Conv2d: channels and kernel must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel_size * kernel_size));
  const Shape shape = layout == ConvWeightLayout::kMatrix ? Shape{out_channels, in_channels * kernel_size * kernel_size}
                                                          : Shape{out_channels, in_channels, kernel_size, kernel_size};
  // The same draws either way: the matrix form is the kernel's reshape.
  weight_ = register_parameter("weight", Variable(uniform_init(shape, bound, options, gen), true), /*viewable=*/true);
  if (bias) bias_ = register_parameter("bias", Variable(uniform_init({out_channels}, bound, options, gen), true));
}

namespace {

// conv2d with a sparse weight in its matrix form [out, in * k * k]: im2col's
// columns [N, in * k * k, L] through linear (the weight's own kernels), [N,
// L, out] back to [N, out, Ho, Wo].
Variable conv2d_sparse_weight(const Variable& x, const Variable& w, const Variable& bias, int64_t kernel,
                              const Conv2dOptions& conv) {
  COPPICE_CHECK(x.dim() == 4, "Conv2d: expected input [N, C, H, W], got ", shape_to_string(x.shape()));
  auto out_size = [&](int64_t size, int d) {
    return (size + 2 * conv.padding[d] - conv.dilation[d] * (kernel - 1) - 1) / conv.stride[d] + 1;
  };
  const int64_t n = x.size(0), ho = out_size(x.size(2), 0), wo = out_size(x.size(3), 1);
  Variable cols = im2col(x, {kernel, kernel}, conv);           // [N, in * k * k, L]
  Variable y = linear(transpose(cols, 1, 2), w, bias);         // [N, L, out]
  return reshape(transpose(y, 1, 2), {n, w.size(0), ho, wo});  // [N, out, Ho, Wo]
}

}  // namespace

Variable Conv2d::forward(const Variable& x) {
  Conv2dOptions conv = conv_;
  const int64_t in = in_, out = out_, k = kernel_;
  return run_op({x, view_of(weight_), bias_ ? *bias_ : Variable()}, [=](const std::vector<Variable>& v) {
    const Variable& w = v[1];
    if (w.value().is_dense()) return conv2d(v[0], w.dim() == 4 ? w : reshape(w, {out, in, k, k}), v[2], conv);
    if (w.dim() == 2) return conv2d_sparse_weight(v[0], w, v[2], k, conv);
    // A 4-D sparse weight: its entries as a CSR [out, in * k * k].
    EntryAxes axes{w.shape(), 4, {{0}, {1, 2, 3}}};
    return conv2d_sparse_weight(v[0], remap_entries(w, axes, "csr", "Conv2d"), v[2], k, conv);
  });
}

// ---- LayerNorm -----------------------------------------------------------------

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, const LayerOptions& options)
    : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) {
    weight_ = register_parameter("weight", Variable(ones(shape_, options.tensor_options()), true));
    bias_ = register_parameter("bias", Variable(zeros(shape_, options.tensor_options()), true));
  }
}

Variable LayerNorm::forward(const Variable& x) {
  Shape shape = shape_;
  double eps = eps_;
  return run_op({x, weight_ ? *weight_ : Variable(), bias_ ? *bias_ : Variable()},
                [shape, eps](const std::vector<Variable>& in) { return layer_norm(in[0], shape, in[1], in[2], eps); });
}

AddLayerNormVariables LayerNorm::forward_add(const Variable& x, const Variable& r) {
  const Tensor& xv = x.value();
  if (!r.defined()) {
    // A traced step (models/propagation) sees the norm as this module's op.
    if (output_rule() != nullptr || !xv.is_dense() || graph_observer() != nullptr) return {x, forward(x)};
  } else {
    const Tensor& rv = r.value();
    const bool fusable = output_rule() == nullptr && xv.is_dense() && rv.is_dense() && xv.shape() == rv.shape() &&
                         xv.dtype() == rv.dtype();
    if (!fusable) {
      Variable h = add(x, r);
      return {h, forward(h)};
    }
  }
  return add_layer_norm(x, r, shape_, weight_ ? *weight_ : Variable(), bias_ ? *bias_ : Variable(), eps_);
}

// ---- BatchNorm -----------------------------------------------------------------

BatchNorm::BatchNorm(std::string type_name, int64_t spatial_dims, int64_t num_features, double eps, double momentum,
                     bool affine, const LayerOptions& options)
    : Module(std::move(type_name)),
      spatial_dims_(spatial_dims),
      channels_(num_features),
      eps_(eps),
      momentum_(momentum) {
  COPPICE_CHECK(num_features > 0, this->type_name(), ": num_features must be positive");
  if (affine) {
    weight_ = register_parameter("weight", Variable(ones({num_features}, options.tensor_options()), true));
    bias_ = register_parameter("bias", Variable(zeros({num_features}, options.tensor_options()), true));
  }
  running_mean_ = register_buffer("running_mean", zeros({num_features}, options.tensor_options()));
  running_var_ = register_buffer("running_var", ones({num_features}, options.tensor_options()));
  num_batches_tracked_ = register_buffer("num_batches_tracked", zeros({}, TensorOptions(DType::kI64, options.device)));
}

Variable BatchNorm::forward(const Variable& x) {
  const bool two_d = spatial_dims_ == 2;
  COPPICE_CHECK(two_d ? x.dim() == 4 : (x.dim() == 2 || x.dim() == 3), type_name(), ": expected input of ",
                two_d ? "4 dims [N, C, H, W]" : "2 or 3 dims [N, C(, L)]", ", got ", x.dim(), " dims");
  COPPICE_CHECK(x.size(1) == channels_, type_name(), ": input has ", x.size(1), " channels, expected ", channels_);
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = channels_;

  Variable y;
  if (is_training()) {
    const int64_t n = x.numel() / channels_;
    COPPICE_CHECK(n > 1, type_name(), ": training needs more than one value per channel, got ", n);
    Variable m = mean(x, dims, true);
    Variable xc = sub(x, m);
    Variable var = mean(mul(xc, xc), dims, true);
    y = mul(xc, rsqrt(add(var, eps_)));
    NoGradGuard no_grad;
    Tensor bm = m.value().reshape({channels_}), bv = var.value().reshape({channels_});
    Tensor unbiased = mul(bv, static_cast<double>(n) / static_cast<double>(n - 1));
    running_mean_->copy_(add(mul(*running_mean_, 1.0 - momentum_), mul(bm, momentum_)));
    running_var_->copy_(add(mul(*running_var_, 1.0 - momentum_), mul(unbiased, momentum_)));
    num_batches_tracked_->copy_(
        add(*num_batches_tracked_, scalar_tensor(1.0, TensorOptions(DType::kI64, num_batches_tracked_->device()))));
  } else {
    Variable rm(running_mean_->reshape(bshape)), rv(running_var_->reshape(bshape));
    y = mul(sub(x, rm), rsqrt(add(rv, eps_)));
  }
  if (weight_) y = add(mul(y, reshape(*weight_, bshape)), reshape(*bias_, bshape));
  return y;
}

// ---- Dropout, Embedding, activations -----------------------------------------------

Dropout::Dropout(double p, uint64_t seed) : Module("Dropout"), p_(p), gen_(seed) {
  COPPICE_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

Variable Dropout::forward(const Variable& x) {
  if (!is_training() || p_ == 0.0) return x;
  return run_op({x}, [this](const std::vector<Variable>& in) { return dropout(in[0], p_, true, gen_); });
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, const LayerOptions& options, Generator& gen,
                     double init_std, bool sparse_grad)
    : Module("Embedding"), sparse_grad_(sparse_grad) {
  COPPICE_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: sizes must be positive");
  Tensor w = randn({num_embeddings, embedding_dim}, TensorOptions(options.dtype), gen);
  if (init_std != 1.0) w = mul(w, init_std);
  weight_ = register_parameter("weight", Variable(w.to(options.device), true));
}

Variable Embedding::forward(const Variable& x) {
  Tensor indices = x.value();
  COPPICE_CHECK(is_integral(indices.dtype()), "Embedding: indices must be integers, got ", dtype_name(indices.dtype()));
  return run_op({*weight_}, [indices, sparse_grad = sparse_grad_](const std::vector<Variable>& in) {
    if (in[0].value().is_sparse()) return embedding(to_dense(in[0]), indices);
    return embedding(in[0], indices, sparse_grad);
  });
}

Variable ReLU::forward(const Variable& x) {
  return run_op({x}, [](const std::vector<Variable>& in) { return relu(in[0]); });
}

Variable GELU::forward(const Variable& x) {
  const GeluForm form = form_;
  return run_op({x}, [form](const std::vector<Variable>& in) { return gelu_of_form(in[0], form); });
}

Variable MaxPool2d::forward(const Variable& x) {
  const int64_t k = kernel_, s = stride_ ? stride_ : kernel_;
  return run_op({x}, [k, s](const std::vector<Variable>& in) { return max_pool2d(in[0], {k, k}, {s, s}); });
}

Variable Flatten::forward(const Variable& x) { return flatten(x, start_, end_); }

// ---- Sequential -----------------------------------------------------------------

Sequential::Sequential(const std::vector<ModulePtr>& modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(ModulePtr module, const std::string& name) {
  register_module(name.empty() ? std::to_string(children().size()) : name, std::move(module));
  return *this;
}

Variable Sequential::forward(const Variable& x) {
  return run_op({x}, [this](const std::vector<Variable>& in) {
    Variable h = in[0];
    for (const auto& [name, m] : children()) h = m->forward(h);
    return h;
  });
}

}  // namespace coppice
