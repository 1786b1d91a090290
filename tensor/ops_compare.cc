// Comparison helpers for tests: computed on the host in f64, so that they do
// not depend on the kernels they are used to check.
#include <cmath>
#include <limits>

#include "tensor/ops.h"

namespace coppice {

namespace {

Tensor host_f64(const Tensor& t, const Shape& shape) {
  return t.to(TensorOptions(DType::kF64, Device::cpu())).expand(shape).contiguous();
}

}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_dense(a, "allclose", "a");
  check_dense(b, "allclose", "b");
  if (a.shape() != b.shape()) return false;
  Tensor ha = host_f64(a, a.shape()), hb = host_f64(b, b.shape());
  const double* pa = ha.data<double>();
  const double* pb = hb.data<double>();
  for (int64_t i = 0; i < ha.numel(); ++i) {
    if (pa[i] == pb[i]) continue;  // equal infinities
    if (std::isinf(pa[i]) || std::isinf(pb[i])) return false;
    if (!(std::abs(pa[i] - pb[i]) <= atol + rtol * std::abs(pb[i]))) return false;  // NaN fails here
  }
  return true;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  check_dense(a, "max_abs_diff", "a");
  check_dense(b, "max_abs_diff", "b");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "max_abs_diff");
  Tensor ha = host_f64(a, shape), hb = host_f64(b, shape);
  const double* pa = ha.data<double>();
  const double* pb = hb.data<double>();
  double worst = 0.0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    if (pa[i] == pb[i]) continue;
    double d = std::abs(pa[i] - pb[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace coppice
