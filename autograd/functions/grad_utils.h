// Helpers shared by the backward formulas (not a public API).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice::autograd_detail {

// Sums `grad` down to `shape`, undoing NumPy broadcasting (leading dims, and
// dims of size 1 in `shape`).
Tensor sum_to(const Tensor& grad, const Shape& shape);

// `grad` where `mask` (bool, broadcast) holds, zero elsewhere.
Tensor mask_grad(const Tensor& grad, const Tensor& mask);

// Dims in [0, ndim), sorted and unique; an empty list means all dims.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, std::string_view op);

// Puts back the size-1 dims that a reduction without keepdim removed
// (`dims` normalized and sorted), so that the result broadcasts against the input.
Tensor unsqueeze_dims(const Tensor& t, const std::vector<int64_t>& dims);

// The gradient at the input of a relu fused into an op (linear_relu), from
// the gradient `g` at its output `y` (what such a node saves, as relu's does):
// relu_backward(g, y); `g` unchanged when `y` is undefined (no relu fused).
Tensor through_relu(const Tensor& g, const Tensor& y);

// A linear layer's gradient at its pre-activation as rows [-1, out]
// (through_relu of g at y) and, when `bias`, its sum over the rows (the bias
// gradient; undefined otherwise): one pass (relu_backward_col_sums) where a
// relu is fused and the bias asked for.
std::pair<Tensor, Tensor> linear_output_grads(const Tensor& g, const Tensor& y, bool bias);

// `t` when `keep`, else an undefined Tensor (to save only what a backward needs).
inline Tensor saved_if(bool keep, const Tensor& t) { return keep ? t : Tensor(); }

}  // namespace coppice::autograd_detail
