// One sparsification stage, differentiable: what a sparsified op
// (sparsified_op.h) runs for each forward output and each input gradient.
//
// A stage is (sparsifier, format). A null sparsifier means keep-all: the
// value is only converted, keeping its stored pattern (sparse/convert.h; from
// dense, a sparse format stores the non-zeros). With a sparsifier, the kept
// entries are keep_mask(dense form of x), scaled by value_scale(), stored in
// `format` (dropped entries are zeros of a dense result).
//
// Gradient: exactly that of y = x * mask * scale, where mask is the entries
// kept (for a keep-all conversion, the positions the result stores). The
// mask is computed once and saved, instead of calling Sparsifier::apply and
// recomputing it for the backward pass, so that a materializing sparsifier
// (a top-k selection) runs once per step.
#pragma once

#include "autograd/variable.h"
#include "sparsifiers/sparsifier.h"
#include "tensor/tensor.h"

namespace coppice {

// x's kept entries in `format`, with a graph node when x requires grad.
// A sparse x is sparsified through its dense form; its gradient keeps x's
// format and pattern (autograd's rule for sparse variables).
Variable sparsify_stage(const Variable& x, const Sparsifier* sparsifier, const OutputFormat& format,
                        const SparsifyContext& ctx);

// The same on a plain tensor, no graph (for gradients in the backward pass):
// Sparsifier::apply, or a conversion for null.
Tensor sparsify_stage(const Tensor& x, const Sparsifier* sparsifier, const OutputFormat& format,
                      const SparsifyContext& ctx);

}  // namespace coppice
