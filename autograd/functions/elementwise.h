// Differentiable elementwise functions: binary ops (broadcasting; gradients
// are summed back to each input's shape), their scalar forms and operators,
// unary ops, clamp and where. Comparisons return plain bool Tensors.
#pragma once

#include <optional>

#include "autograd/variable.h"

namespace coppice {

Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable pow(const Variable& a, const Variable& b);      // d/db needs a > 0 (0 where a == 0)
Variable maximum(const Variable& a, const Variable& b);  // ties split the gradient evenly
Variable minimum(const Variable& a, const Variable& b);
Variable add(const Variable& a, double b);
Variable sub(const Variable& a, double b);
Variable mul(const Variable& a, double b);
Variable div(const Variable& a, double b);
Variable pow(const Variable& a, double exponent);

Tensor eq(const Variable& a, const Variable& b);
Tensor ne(const Variable& a, const Variable& b);
Tensor lt(const Variable& a, const Variable& b);
Tensor le(const Variable& a, const Variable& b);
Tensor gt(const Variable& a, const Variable& b);
Tensor ge(const Variable& a, const Variable& b);
Tensor eq(const Variable& a, double b);
Tensor ne(const Variable& a, double b);
Tensor lt(const Variable& a, double b);
Tensor le(const Variable& a, double b);
Tensor gt(const Variable& a, double b);
Tensor ge(const Variable& a, double b);

Variable neg(const Variable& x);
Variable abs(const Variable& x);   // gradient sign(x) (0 at 0)
Variable sign(const Variable& x);  // gradient 0
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable rsqrt(const Variable& x);
Variable relu(const Variable& x);  // gradient 0 at 0
Variable gelu(const Variable& x);  // exact (erf) form
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);
Variable erf(const Variable& x);
// Gradient 1 inside [min, max] (bounds included), 0 outside.
Variable clamp(const Variable& x, std::optional<double> min, std::optional<double> max);
// cond is a bool Tensor; a and b broadcast against it.
Variable where(const Tensor& cond, const Variable& a, const Variable& b);

Variable operator+(const Variable& a, const Variable& b);
Variable operator-(const Variable& a, const Variable& b);
Variable operator*(const Variable& a, const Variable& b);
Variable operator/(const Variable& a, const Variable& b);
Variable operator-(const Variable& x);
Variable operator+(const Variable& a, double b);
Variable operator-(const Variable& a, double b);
Variable operator*(const Variable& a, double b);
Variable operator/(const Variable& a, double b);
Variable operator+(double a, const Variable& b);
Variable operator-(double a, const Variable& b);
Variable operator*(double a, const Variable& b);
Variable operator/(double a, const Variable& b);

}  // namespace coppice
