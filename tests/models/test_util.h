// Shared helpers for the model tests: a gradcheck over a module's input and
// parameters and plain SGD steps (an Error's message: tests/util/error_matchers.h).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "models/module.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice::testing {

// gradcheck of m.forward(x) with respect to x (when it requires grad) and
// every parameter of m (any format: sparse ones keep their pattern).
inline GradcheckResult gradcheck_module(Module& m, const Variable& x, const GradcheckOptions& options = {}) {
  NamedParameters params = m.named_parameters();
  std::vector<Variable> inputs = {x};
  for (const auto& [name, v] : params) inputs.push_back(v);
  auto f = [&m, params](const std::vector<Variable>& in) {
    for (size_t i = 0; i < params.size(); ++i) m.set_parameter(params[i].first, in[i + 1]);
    return m.forward(in[0]);
  };
  GradcheckResult r = gradcheck(f, inputs, options);
  for (const auto& [name, v] : params) m.set_parameter(name, v);
  return r;
}

// p.values -= lr * p.grad.values for every parameter with a gradient (the
// gradient of a sparse parameter is in its pattern); clears the gradients.
inline void sgd_step(Module& m, double lr) {
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor v = values(p.value());
    v.copy_(sub(v, mul(values(g), lr)));
  }
  m.zero_grad();
}

inline double item(const Variable& v) { return v.value().item(); }

}  // namespace coppice::testing

#define EXPECT_GRADCHECK_OK(expr)                       \
  do {                                                  \
    ::coppice::GradcheckResult gc_result = (expr);      \
    EXPECT_TRUE(gc_result.passed) << gc_result.message; \
  } while (0)
