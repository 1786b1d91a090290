#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sparse/masked.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {

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

}  // namespace coppice
