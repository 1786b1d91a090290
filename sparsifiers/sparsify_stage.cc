#include "sparsifiers/sparsify_stage.h"

#include <string>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// A stage's result and what its backward needs: the kept entries (a bool
// mask of x's shape; undefined for a keep-all conversion) and their scale.
struct Stage {
  Tensor value;
  Tensor mask;
  double scale = 1.0;
};

Stage run_stage(const Tensor& x, const Sparsifier* sparsifier, const OutputFormat& format, const SparsifyContext& ctx) {
  if (sparsifier == nullptr) return {to_format(x, format.name, format.options), Tensor(), 1.0};
  const std::string why = sparsifier->format_mismatch(format);
  COPPICE_CHECK(why.empty(), "sparsify: ", sparsifier->describe(), " cannot produce format '", format.name, "': ", why);
  Tensor dense = to_dense(x);
  Tensor mask = sparsifier->keep_mask(dense, ctx);
  COPPICE_CHECK(mask.defined() && mask.dtype() == DType::kBool && mask.shape() == dense.shape(),
                "sparsify: ", sparsifier->describe(), " returned a keep_mask that is not a bool tensor of shape ",
                shape_to_string(dense.shape()));
  const double scale = sparsifier->value_scale();
  Tensor scaled = scale == 1.0 ? dense : mul(dense, scale);
  Tensor value = format.name == "dense" ? where(mask, scaled, zeros_like(scaled))
                                        : sparse_from_mask(scaled, mask, format.name, format.options);
  return {std::move(value), std::move(mask), scale};
}

// The gradient of the stage's input: g restricted to the kept entries (times
// the scale). `stored` is the result when it is sparse and the stage kept all
// (the positions it stores are then the kept ones); `x_pattern` is x when it
// is sparse (its gradient must keep x's format and pattern).
Tensor stage_backward(const Tensor& g, const Tensor& mask, double scale, const Tensor& stored,
                      const Tensor& x_pattern) {
  Tensor gd;
  if (mask.defined()) {
    Tensor dense = to_dense(g);
    gd = where(mask, scale == 1.0 ? dense : mul(dense, scale), zeros_like(dense));
  } else {
    gd = stored.defined() ? to_dense(project_grad(g, stored, "sparsify backward")) : to_dense(g);
  }
  return x_pattern.defined() ? project_grad(gd, x_pattern, "sparsify backward") : gd;
}

}  // namespace

Variable sparsify_stage(const Variable& x, const Sparsifier* sparsifier, const OutputFormat& format,
                        const SparsifyContext& ctx) {
  COPPICE_CHECK(x.defined(), "sparsify: the input is an undefined Variable");
  Tensor xv = x.value();
  Stage s = run_stage(xv, sparsifier, format, ctx);
  if (s.value.is_same(xv)) return x;  // keep-all into x's own format: nothing happened
  // Save only what the backward reads.
  Tensor stored = !s.mask.defined() && s.value.is_sparse() ? s.value : Tensor();
  Tensor x_pattern = xv.is_sparse() ? xv : Tensor();
  return record(std::move(s.value), "SparsifyBackward", {x},
                [mask = std::move(s.mask), scale = s.scale, stored, x_pattern](const Tensor& g, const GradNeeds&) {
                  return std::vector<Tensor>{stage_backward(g, mask, scale, stored, x_pattern)};
                });
}

Tensor sparsify_stage(const Tensor& x, const Sparsifier* sparsifier, const OutputFormat& format,
                      const SparsifyContext& ctx) {
  // No mask to save here: the sparsifier's own apply may take a faster path.
  if (sparsifier == nullptr) return to_format(x, format.name, format.options);
  return sparsifier->apply(x, format, ctx);
}

}  // namespace coppice
