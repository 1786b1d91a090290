// The basic layers: Linear, Conv2d, LayerNorm, BatchNorm1d/2d, Dropout,
// Embedding, activations, pooling, Flatten and Sequential.
//
// Initialization follows PyTorch's defaults and draws from the Generator
// passed in (seeded by the caller): Linear and Conv2d weights and biases
// uniform in +-1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5)), Embedding
// N(0, 1), norms weight 1 and bias 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions/nn.h"
#include "autograd/functions/residual.h"
#include "models/module.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace coppice {

struct LayerOptions {
  DType dtype = DType::kF32;
  Device device = Device::cpu();
  TensorOptions tensor_options() const { return {dtype, device}; }
};

// Uniform in [-bound, bound).
Tensor uniform_init(const Shape& shape, double bound, const LayerOptions& options, Generator& gen);

// y = x W^T + b, x [..., in], W [out, in] in any format. A sparse weight goes
// through autograd's sparse linear, so its gradient stays in its pattern.
// The weight is viewable (Module::set_parameter_view): forward uses its view
// (weight() is the parameter itself). Output rule inputs: x, weight, bias.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const LayerOptions& options = {},
         Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  // relu(forward(x)): one linear_relu op (one kernel on CUDA with a BSR
  // weight) when no output rule is attached; with one, the rule's output
  // sparsifiers must see the pre-activation, so the two run apart.
  Variable forward_relu(const Variable& x);
  // fc2(gelu(fc1(x))) as one autograd node (autograd's gelu_mlp: the gelu
  // and its gradient inside the products where a kernel fuses them) when
  // neither layer has an output rule; otherwise the two layers and a gelu
  // apart, each through its rule. `form`: the gelu's, gelu (kErf) or
  // gelu_tanh (kTanh), in both cases.
  static Variable forward_gelu_mlp(Linear& fc1, Linear& fc2, const Variable& x, GeluForm form = GeluForm::kErf);
  // h + forward(x) as a residual stream (autograd's linear_residual: the add
  // in the product's write-out where its kernel does it, else left pending),
  // and h + forward_gelu_mlp(...) the same way (gelu_mlp_residual). With an
  // output rule attached the layers run apart and the add is left pending;
  // so do both in a traced step (which sees each module's op).
  ResidualStream forward_residual(const Variable& h, const Variable& x);
  static ResidualStream forward_gelu_mlp_residual(Linear& fc1, Linear& fc2, const Variable& h, const Variable& x,
                                                  GeluForm form = GeluForm::kErf);
  const Variable& weight() const { return *weight_; }
  const Variable& bias() const { return bias_ ? *bias_ : undefined_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Variable* weight_;
  Variable* bias_ = nullptr;
  Variable undefined_;
};

// How a Conv2d holds its weight: as the kernel [out, in, kh, kw], or as its
// matrix form [out, in * kh * kw] (row-major over in, kh, kw), the shape
// every matrix format (CSR, BSR, n:m) takes, so that a job's rules can make
// the weight of a convolution any format a linear's can be.
enum class ConvWeightLayout { kKernel, kMatrix };

// x [N, C, H, W]; weight [out, in, kh, kw], or [out, in * kh * kw] with
// ConvWeightLayout::kMatrix. A dense weight runs the dense convolution. A
// sparse one is never made dense: im2col's columns times the weight's matrix
// form, as linear's sparse weight (CSR, and BSR and n:m on their kernels),
// its gradient the SDDMM at its pattern; a 4-D sparse weight (COO, masked)
// has its entries remapped to a CSR matrix form first (sparse/entry_remap.h).
// The weight is viewable, as Linear's. Output rule inputs: x, weight, bias.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv2dOptions& conv = {},
         bool bias = true, const LayerOptions& options = {}, Generator& gen = default_generator(),
         ConvWeightLayout layout = ConvWeightLayout::kKernel);
  Variable forward(const Variable& x) override;
  const Variable& weight() const { return *weight_; }

 private:
  Conv2dOptions conv_;
  int64_t in_, out_, kernel_;
  Variable* weight_;
  Variable* bias_ = nullptr;
};

// Normalizes over the last dims (normalized_shape); weight and bias have that shape.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     const LayerOptions& options = {});
  Variable forward(const Variable& x) override;
  // h = x + r and forward(h), as one fused op (autograd/functions/nn.h's
  // add_layer_norm; a pre-norm block's residual add and the norm after it)
  // with this layer's weight, bias and eps. With an output rule attached
  // (which wraps one op of one output), or operands add would broadcast or
  // promote, it runs add and forward as they are: the same values. r may be
  // undefined (a stream whose add was formed before it): one node that
  // still sums h's other gradient with the norm's ({x, forward(x)} in a
  // traced step, or with an output rule).
  AddLayerNormVariables forward_add(const Variable& x, const Variable& r);

 private:
  Shape shape_;
  double eps_;
  Variable* weight_ = nullptr;
  Variable* bias_ = nullptr;
};

// Batch normalization over channel dim 1: BatchNorm1d takes [N, C] or
// [N, C, L], BatchNorm2d [N, C, H, W]. Training uses the batch's statistics
// (biased variance) and updates the buffers running_mean and running_var
// (unbiased variance) with `momentum`, and counts num_batches_tracked;
// evaluation uses the running statistics. Parameters weight, bias [C].
class BatchNorm : public Module {
 public:
  BatchNorm(std::string type_name, int64_t spatial_dims, int64_t num_features, double eps = 1e-5, double momentum = 0.1,
            bool affine = true, const LayerOptions& options = {});
  Variable forward(const Variable& x) override;

 private:
  int64_t spatial_dims_;  // 1d: 0 or 1; 2d: 2
  int64_t channels_;
  double eps_, momentum_;
  Variable* weight_ = nullptr;
  Variable* bias_ = nullptr;
  Tensor* running_mean_;
  Tensor* running_var_;
  Tensor* num_batches_tracked_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       const LayerOptions& options = {})
      : BatchNorm("BatchNorm1d", 1, num_features, eps, momentum, affine, options) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       const LayerOptions& options = {})
      : BatchNorm("BatchNorm2d", 2, num_features, eps, momentum, affine, options) {}
};

// Zeroes each entry with probability p in training (scaling the rest by
// 1/(1-p)); the identity in evaluation. Draws from its own generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Variable forward(const Variable& x) override;
  Generator& generator() { return gen_; }

 private:
  double p_;
  Generator gen_;
};

// x: integer indices (any shape, a constant Variable) -> [..., dim] rows of
// weight [num, dim]. Output rule inputs: weight.
class Embedding : public Module {
 public:
  // Weights drawn from N(0, init_std^2) (1: PyTorch's default; GPT-style
  // models with a tied output use 0.02). sparse_grad: a dense weight's
  // gradient is row-sparse, the rows the batch used (autograd/functions/nn.h's
  // embedding), and optim/ steps only those rows; a sparse weight (made dense
  // for the lookup) keeps its own gradient.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const LayerOptions& options = {},
            Generator& gen = default_generator(), double init_std = 1.0, bool sparse_grad = false);
  Variable forward(const Variable& x) override;
  const Variable& weight() const { return *weight_; }
  bool sparse_grad() const { return sparse_grad_; }

 private:
  Variable* weight_;
  bool sparse_grad_;
};

// Output rule inputs of the activations: x.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Variable forward(const Variable& x) override;
};

// `form`: the exact GELU (kErf, gelu; PyTorch's nn.GELU()) or GPT-2's tanh
// approximation (kTanh, gelu_tanh; nn.GELU(approximate='tanh')).
class GELU : public Module {
 public:
  explicit GELU(GeluForm form = GeluForm::kErf) : Module("GELU"), form_(form) {}
  Variable forward(const Variable& x) override;
  GeluForm form() const { return form_; }

 private:
  GeluForm form_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0) : Module("MaxPool2d"), kernel_(kernel), stride_(stride) {}
  Variable forward(const Variable& x) override;

 private:
  int64_t kernel_, stride_;  // stride 0: the kernel
};

// Flattens dims [start_dim, end_dim].
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  Variable forward(const Variable& x) override;

 private:
  int64_t start_, end_;
};

// Children named "0", "1", ... run in order.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(const std::vector<ModulePtr>& modules);
  // Appends under the next index, or under `name` when given.
  Sequential& push_back(ModulePtr module, const std::string& name = "");
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) const { return *children().at(i).second; }
  Variable forward(const Variable& x) override;
};

}  // namespace coppice
