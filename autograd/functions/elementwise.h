// Differentiable elementwise functions: binary ops (broadcasting; gradients
// are summed back to each input's shape), their scalar forms and operators,
// unary ops, clamp and where. Comparisons return plain bool Tensors.
#pragma once

#include <optional>

#include "autograd/variable.h"
#include "tensor/binary_ops.h"
#include "tensor/ops.h"
#include "tensor/unary_ops.h"

namespace coppice {

// Every differentiable binary op of tensor/binary_ops.h (Variable add(const
// Variable& a, const Variable& b), ..., maximum, minimum), its backward the
// table's grad() (pow's d/db needs a > 0: 0 where a == 0; maximum and minimum
// split ties evenly), keeping alive only what the needed gradients read. A
// sparse operand of an op with kSparseAutograd (add, mul) takes
// autograd/functions/sparse.h's path (its gradient keeps the pattern).
#define COPPICE_DECLARE_BINARY(fn, Op) Variable fn(const Variable& a, const Variable& b);
COPPICE_DIFFERENTIABLE_BINARY_OPS(COPPICE_DECLARE_BINARY)
#undef COPPICE_DECLARE_BINARY
// The scalar forms that the table's kScalars promises (written out).
Variable add(const Variable& a, double b);
Variable sub(const Variable& a, double b);
Variable mul(const Variable& a, double b);
Variable div(const Variable& a, double b);
Variable pow(const Variable& a, double exponent);
Variable add(double a, const Variable& b);
Variable sub(double a, const Variable& b);
Variable mul(double a, const Variable& b);
Variable div(double a, const Variable& b);

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
// gelu (GeluForm::kErf) or gelu_tanh (kTanh) of x.
Variable gelu_of_form(const Variable& x, GeluForm form);
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
