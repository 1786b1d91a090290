// Differentiable shape and indexing functions. The views return Variables
// whose values share storage with their input's.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

Variable cat(const std::vector<Variable>& xs, int64_t dim = 0);
Variable stack(const std::vector<Variable>& xs, int64_t dim = 0);
Variable index_select(const Variable& x, int64_t dim, const Tensor& index);
Variable gather(const Variable& x, int64_t dim, const Tensor& index);
// x with src added at index along dim; gradients flow to both x and src.
Variable scatter_add(const Variable& x, int64_t dim, const Tensor& index, const Variable& src);

Variable reshape(const Variable& x, const Shape& shape);
Variable view(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x, int64_t start_dim = 0, int64_t end_dim = -1);
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable t(const Variable& x);  // 2-D transpose
Variable permute(const Variable& x, const std::vector<int64_t>& dims);
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable select(const Variable& x, int64_t dim, int64_t index);
Variable expand(const Variable& x, const Shape& shape);
Variable squeeze(const Variable& x);
Variable squeeze(const Variable& x, int64_t dim);
Variable unsqueeze(const Variable& x, int64_t dim);

// x converted to `dtype` (a floating type); the gradient is converted back to
// x's dtype. Mixed precision casts bf16/f16 logits to f32 before the loss
// with it, as autocast does. x itself when it already has the dtype.
Variable to_dtype(const Variable& x, DType dtype);

}  // namespace coppice
