// Differentiable reductions. max/min/topk send the gradient to the selected
// index only (the first of equal values); argmax/argmin return plain Tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

Variable sum(const Variable& x);  // 0-dimensional
Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);
Variable mean(const Variable& x);
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);
Variable max(const Variable& x);
Variable min(const Variable& x);
VariableIndices max(const Variable& x, int64_t dim, bool keepdim = false);
VariableIndices min(const Variable& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Variable& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Variable& x, int64_t dim, bool keepdim = false);
// p-norm; the gradient at a zero norm is 0 (p > 1), sign(x) for p == 1.
Variable norm(const Variable& x, double p = 2.0);
Variable norm(const Variable& x, double p, const std::vector<int64_t>& dims, bool keepdim = false);
VariableIndices topk(const Variable& x, int64_t k, int64_t dim = -1, bool largest = true);

}  // namespace coppice
