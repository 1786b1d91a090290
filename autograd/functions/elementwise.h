// Differentiable elementwise functions: binary ops (broadcasting; gradients
// are summed back to each input's shape), their scalar forms and operators,
// unary ops, clamp and where. Comparisons return plain bool Tensors.
#pragma once

#include <optional>

#include "autograd/variable.h"
#include "tensor/unary_ops.h"

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

// Every unary op of tensor/unary_ops.h (Variable gelu(const Variable& x),
// ...), its backward the table's grad(). A sparse x of an op with f(0) = 0
// maps its stored values, so its gradient keeps x's pattern.
#define COPPICE_DECLARE_UNARY(fn, Op) Variable fn(const Variable& x);
COPPICE_UNARY_OPS(COPPICE_DECLARE_UNARY)
#undef COPPICE_DECLARE_UNARY
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
