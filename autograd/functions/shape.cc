#include "autograd/functions/shape.h"

#include "autograd/function.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/sparse_nn.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice {

using autograd_detail::sum_to;
using Grads = std::vector<Tensor>;

namespace {

std::vector<Tensor> values_of(const std::vector<Variable>& xs) {
  std::vector<Tensor> out;
  out.reserve(xs.size());
  for (const Variable& x : xs) out.push_back(x.value());
  return out;
}

// A view's backward: its gradient written into zeros of the input's shape
// through the same view.
template <typename ViewFn>
Tensor scatter_view(const Tensor& g, const Shape& shape, ViewFn&& view) {
  Tensor out = zeros(shape, g.options());
  view(out).copy_(g);
  return out;
}

// Shape-only changes: the gradient is reshaped back.
Variable reshaped(const Variable& x, Tensor y, const char* name) {
  Shape shape = x.shape();
  return record(std::move(y), name, {x},
                [shape](const Tensor& g, const GradNeeds&) { return Grads{g.reshape(shape)}; });
}

}  // namespace

Variable cat(const std::vector<Variable>& xs, int64_t dim) {
  for (const Variable& x : xs)
    if (x.defined() && x.value().is_sparse()) return autograd_detail::sparse_cat(xs, dim);
  Tensor y = cat(values_of(xs), dim);
  int64_t d = normalize_dim(dim, y.dim(), "cat");
  std::vector<int64_t> sizes;
  for (const Variable& x : xs) sizes.push_back(x.dim() == y.dim() ? x.size(d) : 0);
  return record(y, "CatBackward", xs, [d, sizes](const Tensor& g, const GradNeeds& n) {
    Grads out(sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (n[i]) out[i] = g.narrow(d, offset, sizes[i]);
      offset += sizes[i];
    }
    return out;
  });
}

Variable stack(const std::vector<Variable>& xs, int64_t dim) {
  Tensor y = stack(values_of(xs), dim);
  int64_t d = normalize_dim(dim, y.dim(), "stack");
  return record(y, "StackBackward", xs, [d](const Tensor& g, const GradNeeds& n) {
    Grads out(n.size());
    for (size_t i = 0; i < n.size(); ++i) {
      if (n[i]) out[i] = g.select(d, static_cast<int64_t>(i));
    }
    return out;
  });
}

Variable index_select(const Variable& x, int64_t dim, const Tensor& index) {
  Shape shape = x.shape();
  int64_t d = normalize_dim(dim, x.dim(), op::kIndexSelect);
  return record(index_select(x.value(), dim, index), "IndexSelectBackward", {x},
                [shape, d, index](const Tensor& g, const GradNeeds&) {
                  // index_select is a gather with the index broadcast over the other dims.
                  Shape ishape(shape.size(), 1);
                  ishape[d] = index.numel();
                  Tensor full_index = index.to(DType::kI64).reshape(ishape).expand(g.shape()).contiguous();
                  return Grads{scatter_add(zeros(shape, g.options()), d, full_index, g.contiguous())};
                });
}

Variable gather(const Variable& x, int64_t dim, const Tensor& index) {
  Shape shape = x.shape();
  return record(gather(x.value(), dim, index), "GatherBackward", {x},
                [shape, dim, index](const Tensor& g, const GradNeeds&) {
                  return Grads{scatter_add(zeros(shape, g.options()), dim, index, g.contiguous())};
                });
}

Variable scatter_add(const Variable& x, int64_t dim, const Tensor& index, const Variable& src) {
  Shape src_shape = src.shape();
  return record(scatter_add(x.value(), dim, index, src.value()), "ScatterAddBackward", {x, src},
                [dim, index, src_shape](const Tensor& g, const GradNeeds& n) {
                  Tensor gsrc;
                  if (n[1]) {
                    gsrc = gather(g, dim, index);
                    if (gsrc.shape() != src_shape) {
                      // Only src's leading index-shaped part was read; the rest gets no gradient.
                      gsrc = scatter_view(gsrc, src_shape, [&](const Tensor& t) {
                        Tensor part = t;
                        for (int64_t k = 0; k < t.dim(); ++k) part = part.narrow(k, 0, index.size(k));
                        return part;
                      });
                    }
                  }
                  return Grads{n[0] ? g : Tensor(), gsrc};
                });
}

Variable reshape(const Variable& x, const Shape& shape) {
  return reshaped(x, x.value().reshape(shape), "ReshapeBackward");
}
Variable view(const Variable& x, const Shape& shape) { return reshaped(x, x.value().view(shape), "ViewBackward"); }
Variable flatten(const Variable& x, int64_t start_dim, int64_t end_dim) {
  return reshaped(x, x.value().flatten(start_dim, end_dim), "FlattenBackward");
}
Variable squeeze(const Variable& x) { return reshaped(x, x.value().squeeze(), "SqueezeBackward"); }
Variable squeeze(const Variable& x, int64_t dim) { return reshaped(x, x.value().squeeze(dim), "SqueezeBackward"); }
Variable unsqueeze(const Variable& x, int64_t dim) {
  return reshaped(x, x.value().unsqueeze(dim), "UnsqueezeBackward");
}

Variable to_dtype(const Variable& x, DType dtype) {
  COPPICE_CHECK(is_floating(dtype) && is_floating(x.dtype()), "to_dtype: converts between floating types, got ",
                dtype_name(x.dtype()), " -> ", dtype_name(dtype));
  if (x.dtype() == dtype) return x;
  const DType from = x.dtype();
  return record(x.value().to(dtype), "ToDtypeBackward", {x},
                [from](const Tensor& g, const GradNeeds&) { return Grads{g.to(from)}; });
}

Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  return record(x.value().transpose(d0, d1), "TransposeBackward", {x},
                [d0, d1](const Tensor& g, const GradNeeds&) { return Grads{g.transpose(d0, d1)}; });
}

Variable t(const Variable& x) {
  return record(x.value().t(), "TBackward", {x}, [](const Tensor& g, const GradNeeds&) { return Grads{g.t()}; });
}

Variable permute(const Variable& x, const std::vector<int64_t>& dims) {
  Tensor y = x.value().permute(dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inverse[normalize_dim(dims[i], x.dim(), "permute")] = static_cast<int64_t>(i);
  return record(y, "PermuteBackward", {x},
                [inverse](const Tensor& g, const GradNeeds&) { return Grads{g.permute(inverse)}; });
}

Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Shape shape = x.shape();
  return record(x.value().slice(dim, start, end, step), "SliceBackward", {x},
                [shape, dim, start, end, step](const Tensor& g, const GradNeeds&) {
                  return Grads{scatter_view(g, shape, [&](const Tensor& t) { return t.slice(dim, start, end, step); })};
                });
}

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  Shape shape = x.shape();
  return record(x.value().narrow(dim, start, length), "NarrowBackward", {x},
                [shape, dim, start, length](const Tensor& g, const GradNeeds&) {
                  return Grads{scatter_view(g, shape, [&](const Tensor& t) { return t.narrow(dim, start, length); })};
                });
}

Variable select(const Variable& x, int64_t dim, int64_t index) {
  Shape shape = x.shape();
  return record(x.value().select(dim, index), "SelectBackward", {x},
                [shape, dim, index](const Tensor& g, const GradNeeds&) {
                  return Grads{scatter_view(g, shape, [&](const Tensor& t) { return t.select(dim, index); })};
                });
}

Variable expand(const Variable& x, const Shape& shape) {
  Shape xshape = x.shape();
  return record(x.value().expand(shape), "ExpandBackward", {x},
                [xshape](const Tensor& g, const GradNeeds&) { return Grads{sum_to(g, xshape)}; });
}

}  // namespace coppice
