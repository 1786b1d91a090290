#include "autograd/gradcheck.h"

#include <cmath>
#include <limits>

#include "autograd/no_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// Row-major multi-index of flat element `i` of `shape`, as "[a, b]".
std::string index_string(int64_t i, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return shape_to_string(idx);
}

std::string input_label(size_t i, const Variable& v) {
  return v.name().empty() ? str_cat("input ", i) : str_cat("input ", i, " ('", v.name(), "')");
}

}  // namespace

GradcheckResult gradcheck(const std::function<Variable(const std::vector<Variable>&)>& f,
                          const std::vector<Variable>& inputs, const GradcheckOptions& options) {
  // Private f64 copies: the numeric pass perturbs them in place.
  std::vector<Tensor> data;
  for (const Variable& v : inputs) {
    COPPICE_CHECK(v.defined(), "gradcheck: an input is an undefined Variable");
    const Tensor& t = v.value();
    if (t.is_sparse()) {
      // A sparse input keeps its format and pattern version; its values are perturbed.
      Tensor host = to_dtype(to_device(t, Device::cpu()), DType::kF64);
      data.push_back(with_values(host, values(host).contiguous().clone()));
      continue;
    }
    Tensor host = t.to(Device::cpu());
    data.push_back(is_floating(t.dtype()) ? host.to(DType::kF64).clone() : host.clone());
  }
  auto make_inputs = [&](bool track) {
    std::vector<Variable> vs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      vs.emplace_back(data[i], track && inputs[i].requires_grad(), inputs[i].name());
    }
    return vs;
  };

  // Analytic: one backward pass seeded with the projection v.
  std::vector<Variable> leaves = make_inputs(true);
  Variable out = f(leaves);
  COPPICE_CHECK(out.defined(), "gradcheck: f returned an undefined Variable");
  COPPICE_CHECK(out.dtype() == DType::kF64, "gradcheck: f returned ", dtype_name(out.dtype()),
                " for f64 inputs; compute in f64");
  Generator gen(options.seed);
  // A sparse output is projected with a sparse v of its pattern (a random value per stored entry).
  const bool sparse_out = out.value().is_sparse();
  Tensor v = sparse_out ? with_values(out.value(), randn(values(out.value()).shape(), DType::kF64, gen))
                        : randn(out.shape(), DType::kF64, gen);
  Tensor vv = sparse_out ? values(v).clone() : v.clone();
  if (out.requires_grad()) out.backward(v);

  auto objective = [&]() {
    NoGradGuard no_grad;
    Variable y = f(make_inputs(false));
    if (y.value().is_sparse()) return sum(mul(values(y.value()), vv)).item();
    return sum(mul(y.value(), vv)).item();
  };

  GradcheckResult result;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    // For a sparse input: its stored values against the values of the sparse gradient.
    const bool sparse_in = data[i].is_sparse();
    Tensor x = sparse_in ? values(data[i]) : data[i];
    const Tensor& g = leaves[i].grad();
    if (sparse_in && g.defined() &&
        (g.is_dense() || g.layout() != data[i].layout() || pattern_version(g) != pattern_version(data[i]))) {
      result.passed = false;
      result.message = str_cat("gradcheck: ", input_label(i, inputs[i]), " is sparse (format '", data[i].format(),
                               "', pattern version ", pattern_version(data[i]), ") but its gradient has format '",
                               g.format(), "' and pattern version ", pattern_version(g));
      return result;
    }
    // A dense input's gradient may be sparse (embedding's row-sparse one): compared densely.
    Tensor analytic = !g.defined() ? zeros(x.shape(), DType::kF64)
                      : sparse_in  ? values(g).to(DType::kF64).contiguous()
                                   : to_dense(g).to(DType::kF64).contiguous();
    if (analytic.shape() != x.shape()) {
      result.passed = false;
      result.message = str_cat("gradcheck: ", input_label(i, inputs[i]), " has shape ", shape_to_string(x.shape()),
                               " but its gradient has shape ", shape_to_string(analytic.shape()));
      return result;
    }
    const double* a = analytic.data<double>();
    double* p = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      double saved = p[j];
      p[j] = saved + options.eps;
      double plus = objective();
      p[j] = saved - options.eps;
      double minus = objective();
      p[j] = saved;
      double numeric = (plus - minus) / (2.0 * options.eps);
      double err = std::abs(a[j] - numeric);
      double excess = err - (options.atol + options.rtol * std::abs(numeric));
      if (std::isnan(a[j]) != std::isnan(numeric)) excess = std::numeric_limits<double>::infinity();
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (excess > worst_excess) {
        worst_excess = excess;
        if (excess > 0) {
          result.passed = false;
          result.message =
              str_cat("gradcheck: worst mismatch at ", input_label(i, inputs[i]), " index ", index_string(j, x.shape()),
                      ": analytic ", a[j], " vs numeric ", numeric, " (|difference| ", err, " > atol ", options.atol,
                      " + rtol ", options.rtol, " * |numeric|)");
        }
      }
    }
  }
  return result;
}

}  // namespace coppice
