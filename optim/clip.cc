#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "optim/multi_tensor.h"
#include "sparse/masked.h"
#include "sparse/sparse_impl.h"
#include "tensor/half.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// The CPU twin of the multi-tensor norm's partial (optim/cuda/multi_tensor.cu):
// the terms |x|^p (x^2, |x|) summed in f64, or the maximum |x| with a NaN
// winning, as a sum would make it NaN.
template <typename V>
double partial_norm(const V* v, int64_t n, double p) {
  const bool inf = std::isinf(p);
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(static_cast<float>(v[i])));
    if (inf) {
      acc = (a > acc || std::isnan(a)) ? a : acc;
    } else {
      acc += p == 2.0 ? a * a : p == 1.0 ? a : std::pow(a, p);
    }
  }
  return acc;
}

template <>
double partial_norm<double>(const double* v, int64_t n, double p) {
  const bool inf = std::isinf(p);
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(v[i]);
    if (inf) {
      acc = (a > acc || std::isnan(a)) ? a : acc;
    } else {
      acc += p == 2.0 ? a * a : p == 1.0 ? a : std::pow(a, p);
    }
  }
  return acc;
}

double partial_norm_of(const Tensor& v, double p) {
  switch (v.dtype()) {
    case DType::kF32: return partial_norm(v.data<float>(), v.numel(), p);
    case DType::kF64: return partial_norm(v.data<double>(), v.numel(), p);
    case DType::kBF16: return partial_norm(v.data<BFloat16>(), v.numel(), p);
    case DType::kF16: return partial_norm(v.data<Half>(), v.numel(), p);
    default: fail("clip_grad_norm_on_device: gradients must be f32, f64, bf16 or f16, got ", dtype_name(v.dtype()));
  }
}

}  // namespace

GradNorm grad_norm_checked(const std::vector<Variable>& params, double norm_type) {
  COPPICE_CHECK(norm_type > 0.0, "clip_grad_norm: norm_type must be positive, got ", norm_type);
  const bool inf = std::isinf(norm_type);
  GradNorm out;
  double total = 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Variable& p = params[i];
    COPPICE_CHECK(p.defined(), "clip_grad_norm: an undefined Variable among the parameters");
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor v = stored_values(g);
    if (v.numel() == 0) continue;
    const double n = inf ? max(abs(v)).to(DType::kF64).item() : norm(v.to(DType::kF64), norm_type).item();
    if (!std::isfinite(n) && out.first_nonfinite.empty())
      out.first_nonfinite = p.name().empty() ? str_cat("parameter ", i) : p.name();
    total = inf ? std::max(total, n) : total + std::pow(n, norm_type);
  }
  out.total = inf ? total : std::pow(total, 1.0 / norm_type);
  return out;
}

double grad_norm(const std::vector<Variable>& params, double norm_type) {
  return grad_norm_checked(params, norm_type).total;
}

GradNorm clip_grad_norm_checked(const std::vector<Variable>& params, double max_norm, double norm_type) {
  const GradNorm measured = grad_norm_checked(params, norm_type);
  const double coef = max_norm / (measured.total + 1e-6);
  if (!(coef < 1.0) && !std::isnan(coef)) return measured;
  for (const Variable& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    p.set_grad(with_values(g, mul(values(g), coef)));
  }
  return measured;
}

double clip_grad_norm(const std::vector<Variable>& params, double max_norm, double norm_type) {
  return clip_grad_norm_checked(params, max_norm, norm_type).total;
}

DeviceClip clip_grad_norm_on_device(const std::vector<Variable>& params, double max_norm, double norm_type,
                                    NonfiniteFlag* nonfinite) {
  COPPICE_CHECK(norm_type > 0.0, "clip_grad_norm_on_device: norm_type must be positive, got ", norm_type);
  COPPICE_CHECK(nonfinite == nullptr || nonfinite->slots() >= static_cast<int64_t>(params.size()),
                "clip_grad_norm_on_device: the non-finite flags have ", nonfinite == nullptr ? 0 : nonfinite->slots(),
                " slots for ", params.size(), " parameters");
  // The stored values of every gradient that has any (contiguous, alive
  // until the kernels are enqueued) and the slots they flag.
  std::vector<Tensor> values;
  std::vector<size_t> slots;
  std::optional<Device> device;
  for (size_t i = 0; i < params.size(); ++i) {
    const Variable& p = params[i];
    COPPICE_CHECK(p.defined(), "clip_grad_norm_on_device: an undefined Variable among the parameters");
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor v = stored_values(g);
    if (v.numel() == 0) continue;
    if (!device) device = v.device();
    COPPICE_CHECK(v.device() == *device, "clip_grad_norm_on_device: the gradient of ",
                  p.name().empty() ? str_cat("parameter ", i) : str_cat("'", p.name(), "'"), " is on ",
                  v.device().to_string(), " but an earlier one is on ", device->to_string(),
                  " (one device for all gradients)");
    values.push_back(v.contiguous());
    slots.push_back(i);
  }
  const Device d = device ? *device : params.empty() ? Device::cpu() : params[0].value().device();
  DeviceClip out{empty({}, TensorOptions(DType::kF32, d)), empty({}, TensorOptions(DType::kF32, d))};
  // Each gradient's flag, where its partial norm is not finite.
  std::vector<float*> flags(values.size(), nullptr);
  if (nonfinite != nullptr) {
    for (size_t k = 0; k < values.size(); ++k) {
      const Tensor slot = nonfinite->slot_on(static_cast<int64_t>(slots[k]), d);
      COPPICE_CHECK(slot.defined(), "clip_grad_norm_on_device: the non-finite flags are on ",
                    nonfinite->value().device().to_string(), ", the gradients on ", d.to_string());
      flags[k] = slot.data<float>();
    }
  }
  const MultiTensorKernels* kernels = multi_tensor_kernels(d.type);
  if (kernels != nullptr && kernels->norm != nullptr) {
    MultiNorm work;
    work.device = d;
    work.norm_type = norm_type;
    work.max_norm = max_norm;
    for (size_t k = 0; k < values.size(); ++k) {
      work.entries.push_back({values[k].data_ptr(), values[k].dtype(), values[k].numel(), flags[k]});
    }
    work.norm = out.norm.data<float>();
    work.factor = out.factor.data<float>();
    kernels->norm(work);
    return out;
  }
  COPPICE_CHECK(d.type == DeviceType::kCpu, "clip_grad_norm_on_device: no multi-tensor norm for ", d.to_string());
  // The CPU twin: the same partials and the same finish (multi_tensor.cu).
  const bool inf = std::isinf(norm_type);
  double total = 0.0;
  for (size_t k = 0; k < values.size(); ++k) {
    const double partial = partial_norm_of(values[k], norm_type);
    if (!std::isfinite(partial) && flags[k] != nullptr) *flags[k] = std::numeric_limits<float>::quiet_NaN();
    total = inf ? ((partial > total || std::isnan(partial)) ? partial : total) : total + partial;
  }
  const double n = inf || norm_type == 1.0 ? total
                   : norm_type == 2.0      ? std::sqrt(total)
                                           : std::pow(total, 1.0 / norm_type);
  const double coef = max_norm / (n + 1e-6);
  *out.norm.data<float>() = static_cast<float>(n);
  *out.factor.data<float>() =
      std::isfinite(n) ? static_cast<float>(coef < 1.0 ? coef : 1.0) : std::numeric_limits<float>::quiet_NaN();
  return out;
}

}  // namespace coppice
