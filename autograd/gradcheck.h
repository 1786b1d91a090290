// Checks analytic gradients against central finite differences in f64.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  uint64_t seed = 0;  // for the random projection of the output
};

struct GradcheckResult {
  bool passed = true;
  // On failure: the worst element (which input, which index, analytic vs numeric).
  std::string message;
  double max_abs_error = 0.0;
  explicit operator bool() const { return passed; }
};

// Checks d<f(inputs), v>/d input for every input that requires grad, where v
// is a fixed random tensor of f's output shape: the analytic gradient (one
// backward pass seeded with v) against central differences of the same
// scalar. Inputs are copied to f64 on the CPU first; inputs that do not
// require grad are passed as constants. f may return any shape.
// A sparse input (any format) keeps its pattern: its stored values (numel of
// values()) are perturbed and compared with the values of its sparse gradient,
// which must have the input's format and pattern version. A sparse output is
// projected with a random v on its pattern.
GradcheckResult gradcheck(const std::function<Variable(const std::vector<Variable>&)>& f,
                          const std::vector<Variable>& inputs, const GradcheckOptions& options = {});

}  // namespace coppice
