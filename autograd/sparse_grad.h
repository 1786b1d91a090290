// What the layers above autograd need of sparse gradients (the sparse
// functions in functions/sparse.h, the engine, sparsifiers' backward passes,
// the data-parallel exchange, the trainer's dense-gradient steps).
//
// A sparse Variable's gradient keeps its value's format, pattern and pattern
// version (functions/sparse.h): these functions move a gradient between that
// compact form, its values array and the dense form, and refuse, naming the
// caller's `what`, a gradient of another pattern.
#pragma once

#include "tensor/tensor.h"

namespace coppice {

// `dense` (broadcast to pattern's shape) at sparse `pattern`'s stored
// positions, aligned with values(pattern).
Tensor sample_at(const Tensor& dense, const Tensor& pattern);

// The values of gradient `g` aligned with sparse `pattern`: values(g) when g
// is sparse with pattern's format and version (else throws, naming `what`),
// g sampled at the stored positions when g is dense.
Tensor grad_values(const Tensor& g, const Tensor& pattern, const char* what);

// `g` as a gradient for sparse `pattern`: g itself when it already has the
// pattern (has_pattern_of), else with_values(pattern, grad_values(g, ...)).
Tensor project_grad(const Tensor& g, const Tensor& pattern, const char* what);
// Whether g is sparse with `pattern`'s format and pattern.
bool has_pattern_of(const Tensor& g, const Tensor& pattern);

// The sum of two gradients for one variable (engine and leaf accumulation):
// sparse + sparse of one format and pattern version adds values; two
// row-sparse ones (sparse/row_sparse.h) of different rows give their union;
// other different versions throw; sparse + dense adds densely.
Tensor accumulate_grads(const Tensor& a, const Tensor& b, const char* what);

// A gradient of any format converted to `dtype` (the pattern version is kept).
Tensor grad_to_dtype(const Tensor& g, DType dtype);

}  // namespace coppice
