#include "autograd/sparse_grad.h"

#include <string>
#include <vector>

#include "sparse/ops.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

std::string describe_pattern(const Tensor& t) {
  return str_cat("format '", t.format(), "' with pattern version ", pattern_version(t));
}

}  // namespace

Tensor sample_at(const Tensor& dense, const Tensor& pattern) {
  if (pattern.dim() == 2 || pattern.device().is_cpu()) {
    Tensor ones_pattern = with_values(pattern, ones_like(values(pattern)));
    return values(mul(ones_pattern, dense.contiguous()));
  }
  // A sparse tensor of another rank on a device, whose kernels take
  // matrices: a gather at the stored flat positions (padding reads a zero).
  std::vector<int64_t> positions = stored_positions(pattern);
  const int64_t zero_slot = pattern.numel();
  for (int64_t& p : positions)
    if (p < 0) p = zero_slot;
  const Tensor flat = cat({dense.expand(pattern.shape()).contiguous().reshape({-1}), zeros({1}, dense.options())}, 0);
  const Tensor at = from_vector(positions, {static_cast<int64_t>(positions.size())}).to(pattern.device());
  return index_select(flat, 0, at).reshape(values(pattern).shape()).to(values(pattern).dtype());
}

Tensor grad_values(const Tensor& g, const Tensor& pattern, const char* what) {
  if (g.is_sparse()) {
    COPPICE_CHECK(g.layout() == pattern.layout() && pattern_version(g) == pattern_version(pattern), what,
                  ": a sparse gradient of ", describe_pattern(g), " for a sparse value of ", describe_pattern(pattern),
                  "; a gradient must keep its value's format and pattern (remap state after a mask change)");
    return values(g);
  }
  COPPICE_CHECK(g.shape() == pattern.shape(), what, ": a dense gradient of shape ", shape_to_string(g.shape()),
                " for a sparse value of shape ", shape_to_string(pattern.shape()));
  return sample_at(g, pattern);
}

bool has_pattern_of(const Tensor& g, const Tensor& pattern) {
  return g.is_sparse() && g.layout() == pattern.layout() && pattern_version(g) == pattern_version(pattern);
}

Tensor project_grad(const Tensor& g, const Tensor& pattern, const char* what) {
  if (has_pattern_of(g, pattern)) return g;
  return with_values(pattern, grad_values(g, pattern, what).contiguous());
}

Tensor accumulate_grads(const Tensor& a, const Tensor& b, const char* what) {
  if (a.is_dense() && b.is_dense()) return add(a, b);
  // Row-sparse gradients of a dense weight (embedding's sparse_grad) of
  // different rows: their union.
  if (is_row_sparse(a) && is_row_sparse(b) && pattern_version(a) != pattern_version(b)) { return row_sparse_add(a, b); }
  if (a.is_sparse() && b.is_sparse()) {
    COPPICE_CHECK(a.layout() == b.layout() && pattern_version(a) == pattern_version(b), what,
                  ": cannot accumulate a sparse gradient of ", describe_pattern(b), " into one of ",
                  describe_pattern(a), " (different patterns; clear the gradient with set_grad(Tensor()) or remap ",
                  "it after a mask change)");
    Tensor bv = values(b);
    if (bv.dtype() != values(a).dtype()) bv = bv.to(values(a).dtype());
    return with_values(a, add(values(a), bv));
  }
  // Mixed: the sum is dense (a sparse consumer projects it back onto its pattern).
  return add(to_dense(a), to_dense(b));
}

Tensor grad_to_dtype(const Tensor& g, DType dtype) {
  if (g.dtype() == dtype) return g;
  return g.is_dense() ? g.to(dtype) : to_dtype(g, dtype);
}

}  // namespace coppice
