// Reductions: sum, mean, max/min (with indices), norms and top-k.
//
// The row kernels reduce the last dimension of a contiguous [outer, r]
// matrix: the frontends move the reduced dims last (a permutation), make the
// result contiguous, run the kernel and put the kept dims back. On CUDA a sum
// over one run of dims with kept dims after it (leading or middle dims) runs
// in place instead, as the column sums of [outer, r, inner] (sum_impl).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// The reduced dims of an ndim-D tensor as a sorted mask; an empty list means all.
std::vector<bool> reduced_mask(const std::vector<int64_t>& dims, int64_t ndim, std::string_view op) {
  std::vector<bool> mask(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    int64_t k = normalize_dim(d, ndim, op);
    if (ndim == 0) continue;
    COPPICE_CHECK(!mask[k], op, ": dim ", k, " appears more than once in the reduced dims");
    mask[k] = true;
  }
  return mask;
}

// The tensor's dims permuted so that the masked ones come last, viewed as a
// contiguous [outer, r] matrix. Sets the kept shape (without reduced dims).
Tensor as_rows(const Tensor& x, const std::vector<bool>& mask, Shape* kept, int64_t* r) {
  std::vector<int64_t> perm;
  kept->clear();
  *r = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d]) {
      perm.push_back(d);
      kept->push_back(x.size(d));
    }
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[d]) {
      perm.push_back(d);
      *r *= x.size(d);
    }
  }
  return x.permute(perm).contiguous().reshape({shape_numel(*kept), *r});
}

// Reinserts the reduced dims as size 1 when keepdim is set.
Shape output_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d]) {
      out.push_back(x.size(d));
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// The dtype sum produces: x's own for floats, i64 for integers and bool.
DType sum_dtype(DType t) { return is_floating(t) ? t : DType::kI64; }

Tensor sum_impl(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape out_shape = output_shape(x, mask, keepdim);
  DType out_dtype = sum_dtype(x.dtype());
  Shape kept;
  int64_t r = 0;
  Tensor in = x.dtype() == DType::kBool ? x.to(DType::kI64) : x;
  if (x.numel() == 0) return zeros(out_shape, TensorOptions(out_dtype, x.device()));
  // One run of reduced dims with kept dims after it, of a contiguous floating
  // tensor on the GPU: leading dims (a bias gradient: a sum over the batch)
  // or middle ones (a mean over a sequence's tokens) are column sums of
  // [outer, r, inner] in place, not a permuted copy first. (The CPU keeps its
  // blocked row sums, which round less; its reduce_sum_cols is the GPU
  // kernel's twin for the parity test.)
  int64_t first = 0;
  while (first < x.dim() && !mask[first]) ++first;
  int64_t last = first;
  while (last < x.dim() && mask[last]) ++last;
  bool one_inner_run = first < last && last < x.dim();
  for (int64_t d = last; d < x.dim() && one_inner_run; ++d) one_inner_run = !mask[d];
  if (one_inner_run && x.device().is_cuda() && is_floating(x.dtype()) && x.is_contiguous()) {
    int64_t outer = 1, reduced = 1;
    for (int64_t d = 0; d < first; ++d) outer *= x.size(d);
    for (int64_t d = first; d < last; ++d) reduced *= x.size(d);
    const int64_t inner = x.numel() / (outer * reduced);
    const Tensor slabs = outer == 1 ? x.reshape({reduced, inner}) : x.reshape({outer, reduced, inner});
    return dispatch(op::kReduceSumCols, {slabs})[0].reshape(out_shape);
  }
  // The row sums of a transposed view (dy^T, as a sparse linear's bias
  // gradient meets it) are the column sums of the contiguous tensor under it:
  // in place as well (the rows path would copy the transpose first).
  if (x.dim() == 2 && !mask[0] && mask[1] && x.device().is_cuda() && is_floating(x.dtype()) && !x.is_contiguous() &&
      x.t().is_contiguous()) {
    return dispatch(op::kReduceSumCols, {x.t()})[0].reshape(out_shape);
  }
  Tensor rows = as_rows(in, mask, &kept, &r);
  Tensor out = dispatch(op::kReduceSum, {rows})[0];
  return out.reshape(out_shape);
}

// A sparse input (sparse/ops.h): "sum" dispatches by format with the reduced
// dims spelled out, to a sparse kernel or the counted dense fallback.
Tensor sparse_sum(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[d]) dims.push_back(d);
  }
  Attrs attrs;
  attrs.set("dims", dims).set("keepdim", keepdim);
  return dispatch(op::kSum, {x}, attrs)[0];
}

// The dense kernel of "sum", for the dispatcher's dense fallback.
std::vector<Tensor> dense_sum_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  return {sum(in[0], attrs.get_ints("dims"), attrs.get_bool("keepdim"))};
}
const bool kDenseSum = [] {
  for (DeviceType d : {DeviceType::kCpu, DeviceType::kCuda}) {
    Dispatcher::instance().register_kernel(op::kSum, d, {"dense"}, dense_sum_kernel);
  }
  return true;
}();

// Floating inputs stay; integers and bool become f32 (as NumPy's mean of ints is a float).
Tensor as_floating(const Tensor& x) { return is_floating(x.dtype()) ? x : x.to(DType::kF32); }

ValuesIndices extremum(const Tensor& x, int64_t dim, bool keepdim, bool is_max, std::string_view op) {
  check_dense(x, op, "input");
  int64_t k = normalize_dim(dim, x.dim(), op);
  if (x.dim() == 0) { return {x.clone(), zeros({}, TensorOptions(DType::kI64, x.device()))}; }
  COPPICE_CHECK(x.size(k) > 0, op, ": cannot reduce dim ", k, " of size 0 (shape ", shape_to_string(x.shape()), ")");
  std::vector<bool> mask(static_cast<size_t>(x.dim()), false);
  mask[k] = true;
  Shape out_shape = output_shape(x, mask, keepdim);
  Tensor in = x.dtype() == DType::kBool ? x.to(DType::kU8) : x;
  Shape kept;
  int64_t r = 0;
  if (x.numel() == 0) {
    return {empty(out_shape, x.options()), empty(out_shape, TensorOptions(DType::kI64, x.device()))};
  }
  Tensor rows = as_rows(in, mask, &kept, &r);
  std::vector<Tensor> out = dispatch(is_max ? op::kReduceMax : op::kReduceMin, {rows});
  Tensor values = out[0].reshape(out_shape);
  if (x.dtype() == DType::kBool) values = values.to(DType::kBool);
  return {values, out[1].reshape(out_shape)};
}

Tensor extremum_all(const Tensor& x, bool is_max) {
  const char* op = is_max ? "max" : "min";
  check_dense(x, op, "input");
  COPPICE_CHECK(x.numel() > 0, op, ": cannot reduce an empty tensor (shape ", shape_to_string(x.shape()), ")");
  return extremum(x.reshape({-1}), 0, false, is_max, op).values;
}

}  // namespace

Tensor sum(const Tensor& x) {
  if (any_sparse({x})) return sparse_sum(x, std::vector<bool>(static_cast<size_t>(x.dim()), true), false);
  check_dense(x, op::kSum, "input");
  return sum_impl(x, std::vector<bool>(static_cast<size_t>(x.dim()), true), false);
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (any_sparse({x})) return sparse_sum(x, reduced_mask(dims, x.dim(), op::kSum), keepdim);
  check_dense(x, op::kSum, "input");
  return sum_impl(x, reduced_mask(dims, x.dim(), op::kSum), keepdim);
}

Tensor mean(const Tensor& x) {
  check_dense(x, "mean", "input");
  return mean(x, {}, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_dense(x, "mean", "input");
  std::vector<bool> mask = reduced_mask(dims, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[d]) count *= x.size(d);
  }
  Tensor s = sum_impl(as_floating(x), mask, keepdim);
  // 16-bit sums divide in f32 (a count like 1001 is not exact in bf16) and round once more.
  // An empty reduction divides 0 by 0: NaN, as in NumPy and PyTorch.
  return div(s.to(compute_dtype(s.dtype())), static_cast<double>(count)).to(s.dtype());
}

Tensor max(const Tensor& x) { return extremum_all(x, true); }
Tensor min(const Tensor& x) { return extremum_all(x, false); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return extremum(x, dim, keepdim, true, "max"); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return extremum(x, dim, keepdim, false, "min"); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return extremum(x, dim, keepdim, true, "argmax").indices; }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return extremum(x, dim, keepdim, false, "argmin").indices; }

Tensor norm(const Tensor& x, double p) {
  check_dense(x, "norm", "input");
  return norm(x, p, {}, false);
}

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  check_dense(x, "norm", "input");
  COPPICE_CHECK(!std::isnan(p), "norm: p must not be NaN");
  std::vector<bool> mask = reduced_mask(dims, x.dim(), "norm");
  // 16-bit inputs are reduced in f32 and the result rounded once.
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::kF32;
  Tensor a = abs(x.to(compute_dtype(out_dtype)));
  Tensor result;
  if (p == 2.0) {
    result = sqrt(sum_impl(mul(a, a), mask, keepdim));
  } else if (p == 1.0) {
    result = sum_impl(a, mask, keepdim);
  } else if (p == 0.0) {
    result = sum_impl(ne(a, 0.0), mask, keepdim).to(a.dtype());
  } else if (std::isinf(p)) {
    Shape out_shape = output_shape(x, mask, keepdim);
    int64_t r = 1;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (mask[d]) r *= x.size(d);
    }
    if (r == 0 || x.numel() == 0) {
      result = zeros(out_shape, a.options());  // the norm of an empty vector
    } else {
      Shape kept;
      int64_t rr = 0;
      Tensor rows = as_rows(a, mask, &kept, &rr);
      result = (p > 0 ? max(rows, 1) : min(rows, 1)).values.reshape(out_shape);
    }
  } else {
    result = pow(sum_impl(pow(a, p), mask, keepdim), 1.0 / p);
  }
  return result.to(out_dtype);
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  check_dense(x, op::kTopk, "input");
  int64_t d = normalize_dim(dim, x.dim(), op::kTopk);
  int64_t n = x.dim() == 0 ? 1 : x.size(d);
  COPPICE_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", d, " of size ", n, " (shape ",
                shape_to_string(x.shape()), ")");
  if (x.dim() == 0) {
    if (k == 1) return {x.clone(), zeros({}, TensorOptions(DType::kI64, x.device()))};
    return {empty({0}, x.options()), empty({0}, TensorOptions(DType::kI64, x.device()))};
  }
  // Move `dim` last, keeping the order of the others.
  std::vector<int64_t> perm, inverse(static_cast<size_t>(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i != d) perm.push_back(i);
  }
  perm.push_back(d);
  for (int64_t i = 0; i < x.dim(); ++i) inverse[perm[i]] = i;
  Tensor moved = x.permute(perm);
  Shape moved_shape = moved.shape();
  moved_shape.back() = k;
  Shape out_shape = x.shape();
  out_shape[d] = k;
  if (shape_numel(out_shape) == 0) {
    return {empty(out_shape, x.options()), empty(out_shape, TensorOptions(DType::kI64, x.device()))};
  }
  int64_t outer = shape_numel(moved_shape) / k;
  Tensor rows = moved.contiguous().reshape({outer, n});
  Attrs attrs;
  attrs.set("k", k).set("largest", largest);
  std::vector<Tensor> out = dispatch(op::kTopk, {rows}, attrs);
  Tensor values = out[0].reshape(moved_shape).permute(inverse).contiguous();
  Tensor indices = out[1].reshape(moved_shape).permute(inverse).contiguous();
  return {values, indices};
}

}  // namespace coppice
