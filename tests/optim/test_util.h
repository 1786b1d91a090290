// Shared by the optimizer tests: small tensors from host values, the torch
// update formulas on doubles (the reference the optimizers are checked
// against), and a random pattern.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
#include "optim/sgd_step_math.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/ops.h"

namespace coppice::optim_test {

inline Tensor f64(const std::vector<double>& v, Shape shape = {}) {
  return from_vector(v, shape.empty() ? Shape{static_cast<int64_t>(v.size())} : shape, TensorOptions(DType::kF64));
}

inline std::vector<double> host(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64).to_vector<double>(); }

// Normal values from a seeded host generator (deterministic across runs).
inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::kF32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = n(rng);
  return from_vector(v, shape, TensorOptions(DType::kF64)).to(dtype);
}

// The values of `dense` at the stored slots of `pattern`, in its values'
// order and shape (0 at slots that store nothing: padding, masked-out).
inline Tensor values_at(const Tensor& pattern, const Tensor& dense) {
  const std::vector<int64_t> pos = stored_positions(pattern);
  const std::vector<double> d = host(dense);
  std::vector<double> out(pos.size(), 0.0);
  for (size_t i = 0; i < pos.size(); ++i) out[i] = pos[i] < 0 ? 0.0 : d[static_cast<size_t>(pos[i])];
  const Tensor& v = values(pattern);
  return from_vector(out, v.shape(), TensorOptions(DType::kF64)).to(v.dtype());
}

// A bool mask with about `density` of its entries true.
inline Tensor random_pattern(const Shape& shape, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = u(rng) < density ? 1.0 : 0.0;
  return ne(from_vector(v, shape, TensorOptions(DType::kF64)), 0.0);
}

// The bytes of t's elements (copied to the host, contiguous): equal exactly
// when the bits are, NaNs included.
inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  const auto* d = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(d, d + static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
}

// t (any dtype, on the host) with element `at` of its flat order replaced by
// `value` (an inf or a NaN, for the non-finite checks).
inline Tensor with_element(const Tensor& t, int64_t at, double value) {
  std::vector<double> v = host(t);
  v[static_cast<size_t>(at)] = value;
  return from_vector(v, t.shape(), TensorOptions(DType::kF64)).to(t.dtype()).to(t.device());
}

// The non-finite flags as 0 (finite) and 1 (set), to compare as a whole.
inline std::vector<int> flags_set(const Tensor& flags) {
  std::vector<int> out;
  for (double f : host(flags)) out.push_back(f != 0.0 ? 1 : 0);
  return out;
}

// The optimizers the step tests compare one path against another with, by
// index 0..kOptimizerKinds - 1 (optimizer_kind names them): SGD with
// momentum and decay (Nesterov's when asked), plain SGD, Adam with decay,
// AdamW.
inline constexpr int kOptimizerKinds = 4;

inline std::string optimizer_kind(int kind, bool nesterov = false) {
  switch (kind) {
    case 0: return nesterov ? "sgd momentum nesterov decay" : "sgd momentum decay";
    case 1: return "sgd";
    case 2: return "adam decay";
    default: return "adamw";
  }
}

inline std::unique_ptr<Optimizer> make_optimizer(int kind, std::vector<Variable> params, bool nesterov = false) {
  switch (kind) {
    case 0: {
      SgdOptions o;
      o.lr = 0.05;
      o.momentum = 0.9;
      o.weight_decay = 0.01;
      o.nesterov = nesterov;
      return std::make_unique<Sgd>(std::move(params), o);
    }
    case 1: return std::make_unique<Sgd>(std::move(params), SgdOptions{0.1});
    case 2: {
      AdamOptions o;
      o.lr = 0.01;
      o.weight_decay = 0.01;
      return std::make_unique<Adam>(std::move(params), o);
    }
    default: {
      AdamWOptions o;
      o.lr = 0.01;
      return std::make_unique<AdamW>(std::move(params), o);
    }
  }
}

// Every stored value and state tensor of `params` (any format), as bytes, to
// compare whole.
inline std::vector<std::vector<uint8_t>> snapshot(const Optimizer& opt, const std::vector<Variable>& params) {
  std::vector<std::vector<uint8_t>> out;
  for (const Variable& p : params) {
    out.push_back(raw_bytes(values(p.value())));
    if (const ParamState* st = opt.state(p)) {
      for (const auto& [name, t] : st->tensors) out.push_back(raw_bytes(t));
    }
  }
  return out;
}

// One combination of SGD's options, for suites that run over many.
struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov;

  SgdOptions options(double lr) const {
    SgdOptions o;
    o.lr = lr;
    o.momentum = momentum;
    o.dampening = dampening;
    o.weight_decay = weight_decay;
    o.nesterov = nesterov;
    return o;
  }
  // The fused step's arguments for the same case (optim/sgd_step_math.h);
  // `first` as given.
  SgdStepArgs step_args(double lr, bool first) const {
    SgdStepArgs a;
    a.lr = lr;
    a.momentum = momentum;
    a.dampening = dampening;
    a.weight_decay = weight_decay;
    a.nesterov = nesterov;
    a.first = first;
    return a;
  }
  std::string describe() const {
    return str_cat("momentum ", momentum, " dampening ", dampening, " weight_decay ", weight_decay,
                   nesterov ? " nesterov" : "");
  }
};

// How GoogleTest names a case in its messages.
inline void PrintTo(const SgdCase& c, std::ostream* os) { *os << c.describe(); }

// torch.optim.SGD on one element.
struct SgdRef {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  double buf = 0;
  bool has_buf = false;
  double step(double p, double g) {
    if (weight_decay != 0) g += weight_decay * p;
    if (momentum != 0) {
      buf = has_buf ? momentum * buf + (1 - dampening) * g : g;
      has_buf = true;
      g = nesterov ? g + momentum * buf : buf;
    }
    return p - lr * g;
  }
};

// torch.optim.Adam / AdamW on one element.
struct AdamRef {
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
  double m = 0, v = 0;
  int64_t t = 0;
  double step(double p, double g) {
    ++t;
    if (weight_decay != 0) {
      if (decoupled) {
        p *= 1 - lr * weight_decay;
      } else {
        g += weight_decay * p;
      }
    }
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(t));
    return p - lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

}  // namespace coppice::optim_test
