#include "autograd/functions/reduce.h"

#include <cmath>

#include "autograd/function.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/sparse.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice {

using autograd_detail::mask_grad;
using autograd_detail::normalize_dims;
using autograd_detail::unsqueeze_dims;
using Grads = std::vector<Tensor>;

namespace {

// The gradient of a reduction output, broadcast back over the input: g with
// the reduced dims put back (when !keepdim) and expanded to `shape`.
Tensor expand_back(const Tensor& g, const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor r = keepdim ? g : unsqueeze_dims(g, dims);
  return r.expand(shape);
}

// Sends g (shaped like `indices`) to the positions `indices` name along `dim`.
Tensor scatter_to(const Tensor& g, const Shape& shape, int64_t dim, const Tensor& indices) {
  return scatter_add(zeros(shape, g.options()), dim, indices, g.contiguous());
}

VariableIndices select_along(const Variable& x, int64_t dim, bool keepdim, bool is_max) {
  ValuesIndices r = is_max ? max(x.value(), dim, keepdim) : min(x.value(), dim, keepdim);
  int64_t d = normalize_dim(dim, x.dim(), is_max ? "max" : "min");
  Shape shape = x.shape();
  Tensor indices = r.indices;
  Variable values = record(r.values, is_max ? "MaxBackward" : "MinBackward", {x},
                           [shape, d, keepdim, indices](const Tensor& g, const GradNeeds&) {
                             Tensor gk = keepdim ? g : g.unsqueeze(d);
                             Tensor ik = keepdim ? indices : indices.unsqueeze(d);
                             return Grads{scatter_to(gk, shape, d, ik.contiguous())};
                           });
  return {values, r.indices};
}

// max/min over all elements: the value at the first extreme index.
Variable select_all(const Variable& x, bool is_max) {
  if (!should_record(x.value(), {x})) return Variable(is_max ? max(x.value()) : min(x.value()));
  Tensor flat = x.value().reshape({-1});
  ValuesIndices r = is_max ? max(flat, 0) : min(flat, 0);
  Shape shape = x.shape();
  Tensor index = r.indices.reshape({1});
  return record(r.values, is_max ? "MaxAllBackward" : "MinAllBackward", {x},
                [shape, index](const Tensor& g, const GradNeeds&) {
                  return Grads{scatter_to(g.reshape({1}), {shape_numel(shape)}, 0, index).reshape(shape)};
                });
}

// d/dx ||x||_p, with `norm` broadcast against x.
Tensor norm_grad(const Tensor& g, const Tensor& x, const Tensor& norm, double p) {
  if (p == 0.0) return zeros(x.shape(), g.options());
  if (p == 1.0) return mul(g, sign(x));
  Tensor nonzero = ne(norm, 0.0);
  if (p == 2.0) return mask_grad(mul(g, div(x, norm)), nonzero);
  if (std::isinf(p)) {
    // All elements whose magnitude is the norm share the gradient.
    Tensor at = eq(abs(x), norm).to(g.dtype());
    Shape reduced = norm.shape();
    std::vector<int64_t> dims;
    for (size_t i = 0; i < reduced.size(); ++i) {
      if (reduced[i] == 1 && x.shape()[i] != 1) dims.push_back(static_cast<int64_t>(i));
    }
    Tensor count = dims.empty() ? at : sum(at, dims, /*keepdim=*/true);
    return mul(g, div(mul(sign(x), at), count));
  }
  // sign(x) |x|^(p-1) / ||x||^(p-1)
  Tensor r = mul(g, div(mul(sign(x), pow(abs(x), p - 1.0)), pow(norm, p - 1.0)));
  return mask_grad(r, nonzero);
}

}  // namespace

Variable sum(const Variable& x) {
  if (x.value().is_sparse()) return autograd_detail::sparse_sum(x, {}, false, true);
  Shape shape = x.shape();
  return record(sum(x.value()), "SumBackward", {x},
                [shape](const Tensor& g, const GradNeeds&) { return Grads{g.expand(shape)}; });
}

Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (x.value().is_sparse()) return autograd_detail::sparse_sum(x, dims, keepdim, false);
  Shape shape = x.shape();
  std::vector<int64_t> nd = normalize_dims(dims, x.dim(), op::kSum);
  return record(
      sum(x.value(), dims, keepdim), "SumBackward", {x},
      [shape, nd, keepdim](const Tensor& g, const GradNeeds&) { return Grads{expand_back(g, shape, nd, keepdim)}; });
}

Variable mean(const Variable& x) {
  Shape shape = x.shape();
  double n = static_cast<double>(x.numel());
  return record(mean(x.value()), "MeanBackward", {x},
                [shape, n](const Tensor& g, const GradNeeds&) { return Grads{div(g, n).expand(shape)}; });
}

Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  Shape shape = x.shape();
  std::vector<int64_t> nd = normalize_dims(dims, x.dim(), "mean");
  double n = 1.0;
  for (int64_t d : nd) n *= static_cast<double>(shape[d]);
  return record(mean(x.value(), dims, keepdim), "MeanBackward", {x},
                [shape, nd, keepdim, n](const Tensor& g, const GradNeeds&) {
                  return Grads{expand_back(div(g, n), shape, nd, keepdim)};
                });
}

Variable max(const Variable& x) { return select_all(x, true); }
Variable min(const Variable& x) { return select_all(x, false); }
VariableIndices max(const Variable& x, int64_t dim, bool keepdim) { return select_along(x, dim, keepdim, true); }
VariableIndices min(const Variable& x, int64_t dim, bool keepdim) { return select_along(x, dim, keepdim, false); }
Tensor argmax(const Variable& x, int64_t dim, bool keepdim) { return argmax(x.value(), dim, keepdim); }
Tensor argmin(const Variable& x, int64_t dim, bool keepdim) { return argmin(x.value(), dim, keepdim); }

Variable norm(const Variable& x, double p) {
  Tensor xv = x.value();
  Tensor y = norm(xv, p);
  return record(y, "NormBackward", {x}, [xv, y, p](const Tensor& g, const GradNeeds&) {
    Shape ones_shape(xv.dim(), 1);
    return Grads{norm_grad(g.reshape(ones_shape), xv, y.reshape(ones_shape), p)};
  });
}

Variable norm(const Variable& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor xv = x.value();
  Tensor y = norm(xv, p, dims, keepdim);
  std::vector<int64_t> nd = normalize_dims(dims, x.dim(), "norm");
  return record(y, "NormBackward", {x}, [xv, y, p, nd, keepdim](const Tensor& g, const GradNeeds&) {
    Tensor gk = keepdim ? g : unsqueeze_dims(g, nd);
    Tensor yk = keepdim ? y : unsqueeze_dims(y, nd);
    return Grads{norm_grad(gk, xv, yk, p)};
  });
}

VariableIndices topk(const Variable& x, int64_t k, int64_t dim, bool largest) {
  ValuesIndices r = topk(x.value(), k, dim, largest);
  int64_t d = normalize_dim(dim, x.dim(), op::kTopk);
  Shape shape = x.shape();
  Tensor indices = r.indices;
  Variable values = record(r.values, "TopkBackward", {x}, [shape, d, indices](const Tensor& g, const GradNeeds&) {
    return Grads{scatter_to(g, shape, d, indices.contiguous())};
  });
  return {values, r.indices};
}

}  // namespace coppice
