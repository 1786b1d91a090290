// index_select, gather, scatter_add and index_copy_ along one dim.
//
// Indices are i64 and must lie in [0, size of dim): negative indices do not
// wrap, and any out-of-range index throws coppice::Error naming the op,
// before anything is read or written. Any dtype. As in PyTorch, gather and
// scatter_add take an index no larger than the other operands in any dim
// (except dim for the tensor being indexed); the kernels.h contract (src of
// index's shape, all contiguous) is the common case. scatter_add adds the
// duplicates of one position in index order (deterministic), in the compute
// type; integers wrap and bool adds as "or".
#include <cstring>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

void check_index_tensor(const Tensor& index, std::string_view op) { check_dtype(index, DType::kI64, op, "index"); }

// Throws naming `op` at the first index outside [0, size).
void check_range(const int64_t* idx, int64_t n, int64_t size, int64_t dim, std::string_view op) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= size) {
      fail(op, ": index ", idx[i], " (at position ", i, ") is out of range for dim ", dim, " of size ", size);
    }
  }
}

int64_t prod(const Shape& s, int64_t lo, int64_t hi) {
  int64_t p = 1;
  for (int64_t d = lo; d < hi; ++d) p *= s[d];
  return p;
}

// For each linear position in shape[lo, hi), the offset of those coordinates under `strides`.
std::vector<int64_t> offsets(const Shape& shape, const Shape& strides, int64_t lo, int64_t hi) {
  std::vector<int64_t> out(static_cast<size_t>(prod(shape, lo, hi)), 0);
  for (size_t linear = 0; linear < out.size(); ++linear) {
    int64_t rest = static_cast<int64_t>(linear), off = 0;
    for (int64_t d = hi - 1; d >= lo; --d) {
      off += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    out[linear] = off;
  }
  return out;
}

Tensor index_select(const Tensor& input, const Tensor& index_in, int64_t dim_attr) {
  check_index_tensor(index_in, op::kIndexSelect);
  check_ndim(index_in, 1, op::kIndexSelect, "index");
  COPPICE_CHECK(input.dim() >= 1, "index_select: input must have at least one dimension");
  const int64_t dim = normalize_dim(dim_attr, input.dim(), op::kIndexSelect);
  Tensor x = input.contiguous(), index = index_in.contiguous();
  const int64_t size = x.size(dim), nidx = index.numel();
  const int64_t* idx = index.data<int64_t>();
  check_range(idx, nidx, size, dim, op::kIndexSelect);
  Shape shape = x.shape();
  shape[dim] = nidx;
  Tensor out = Tensor::empty(shape, x.options());
  const int64_t outer = prod(x.shape(), 0, dim), inner = prod(x.shape(), dim + 1, x.dim());
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  if (out.numel() == 0) return out;
  parallel_for(0, outer * nidx, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / nidx, j = r % nidx;
      std::memcpy(po + r * row_bytes, px + (o * size + idx[j]) * row_bytes, row_bytes);
    }
  });
  return out;
}

// Checks shared by gather and scatter_add: index no larger than `other`
// anywhere, nor than x outside dim.
void check_index_shape(const Tensor& x, const Tensor& index, const Tensor* other, int64_t dim, std::string_view op) {
  COPPICE_CHECK(index.dim() == x.dim(), op, ": index must have the input's ", x.dim(), " dimensions, got shape ",
                shape_to_string(index.shape()));
  for (int64_t d = 0; d < x.dim(); ++d) {
    COPPICE_CHECK(d == dim || index.size(d) <= x.size(d), op, ": index of shape ", shape_to_string(index.shape()),
                  " is larger than the input ", shape_to_string(x.shape()), " in dim ", d);
    if (other != nullptr) {
      COPPICE_CHECK(index.size(d) <= other->size(d), op, ": index of shape ", shape_to_string(index.shape()),
                    " is larger than src ", shape_to_string(other->shape()), " in dim ", d);
    }
  }
}

// A 0-dimensional tensor as [1], so the loops below always have a dim to index.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t.contiguous(); }

Tensor gather(const Tensor& input, const Tensor& index_in, int64_t dim_attr) {
  check_index_tensor(index_in, op::kGather);
  const int64_t dim = normalize_dim(dim_attr, input.dim(), op::kGather);
  COPPICE_CHECK(index_in.dim() == input.dim(), "gather: index must have the input's ", input.dim(),
                " dimensions, got shape ", shape_to_string(index_in.shape()));
  Tensor x = at_least_1d(input), index = at_least_1d(index_in);
  check_index_shape(x, index, nullptr, dim, op::kGather);
  const int64_t* idx = index.data<int64_t>();
  check_range(idx, index.numel(), x.size(dim), dim, op::kGather);
  Tensor out = Tensor::empty(index_in.shape(), x.options());
  if (out.numel() == 0) return out;
  const Shape& is = index.shape();
  const int64_t nd = index.dim(), len = is[dim], inner = prod(is, dim + 1, nd);
  const std::vector<int64_t> outer_off = offsets(is, x.strides(), 0, dim);
  const std::vector<int64_t> inner_off = offsets(is, x.strides(), dim + 1, nd);
  const int64_t xs = x.stride(dim);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const int64_t rows = static_cast<int64_t>(outer_off.size()) * len;
    parallel_for(0, rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* base = px + outer_off[r / len];
        const int64_t* ir = idx + r * inner;
        T* orow = po + r * inner;
        for (int64_t i = 0; i < inner; ++i) orow[i] = base[ir[i] * xs + inner_off[i]];
      }
    });
  });
  return out;
}

template <typename C>
C accumulate(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

Tensor scatter_add(const Tensor& input, const Tensor& index_in, const Tensor& src_in, int64_t dim_attr) {
  check_index_tensor(index_in, op::kScatterAdd);
  COPPICE_CHECK(src_in.dtype() == input.dtype(), "scatter_add: src must have the input's dtype ",
                dtype_name(input.dtype()), ", got ", dtype_name(src_in.dtype()));
  const int64_t dim = normalize_dim(dim_attr, input.dim(), op::kScatterAdd);
  COPPICE_CHECK(index_in.dim() == input.dim() && src_in.dim() == input.dim(),
                "scatter_add: index and src must have the input's ", input.dim(), " dimensions, got shapes ",
                shape_to_string(index_in.shape()), " and ", shape_to_string(src_in.shape()));
  Tensor x = at_least_1d(input), index = at_least_1d(index_in), src = at_least_1d(src_in);
  check_index_shape(x, index, &src, dim, op::kScatterAdd);
  const int64_t* idx = index.data<int64_t>();
  check_range(idx, index.numel(), x.size(dim), dim, op::kScatterAdd);
  Tensor out = Tensor::empty(input.shape(), x.options());
  dispatch(op::kCopy, {out, input});
  if (index.numel() == 0) return out;
  Tensor out1 = out.dim() == 0 ? out.view({1}) : out;
  const Shape& is = index.shape();
  const int64_t nd = index.dim(), len = is[dim], inner = prod(is, dim + 1, nd);
  const std::vector<int64_t> out_outer = offsets(is, out1.strides(), 0, dim);
  const std::vector<int64_t> out_inner = offsets(is, out1.strides(), dim + 1, nd);
  const std::vector<int64_t> src_outer = offsets(is, src.strides(), 0, dim);
  const std::vector<int64_t> src_inner = offsets(is, src.strides(), dim + 1, nd);
  const int64_t os = out1.stride(dim), ss = src.stride(dim);
  // Tasks own (outer position, run of inner positions): disjoint outputs, so
  // no races, and each output's additions happen in index order.
  constexpr int64_t kInnerRun = 1024;
  const int64_t runs = (inner + kInnerRun - 1) / kInnerRun;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* ps = src.data<T>();
    T* po = out1.data<T>();
    const int64_t tasks = static_cast<int64_t>(out_outer.size()) * runs;
    parallel_for(0, tasks, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, len * std::min(inner, kInnerRun))),
                 [&](int64_t b, int64_t e) {
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t o = t / runs, i0 = (t % runs) * kInnerRun, i1 = std::min(inner, i0 + kInnerRun);
                     for (int64_t k = 0; k < len; ++k) {
                       const int64_t* ir = idx + (o * len + k) * inner;
                       const T* srow = ps + src_outer[o] + k * ss;
                       T* obase = po + out_outer[o];
                       for (int64_t i = i0; i < i1; ++i) {
                         T& dst = obase[ir[i] * os + out_inner[i]];
                         dst = T(accumulate(static_cast<C>(dst), static_cast<C>(srow[src_inner[i]])));
                       }
                     }
                   }
                 });
  });
  return out;
}

// The gradient of an embedding: out[v] = the sum of grad's rows whose index
// is v, in index order, in the compute type, rounded once (the CUDA kernel's
// twin). Rows split over threads by v, so each sum keeps its order.
std::vector<Tensor> embedding_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 2, "embedding_backward: expected 2 inputs, got ", in.size());
  const Tensor g = in[0].contiguous(), index = in[1].contiguous();
  const int64_t rows = index.numel(), d = g.size(1), v = attrs.get_int("num_embeddings");
  const int64_t* ix = index.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i) {
    COPPICE_CHECK(ix[i] >= 0 && ix[i] < v, "embedding_backward: index ", ix[i], " (at position ", i,
                  ") is out of range for dim 0 of size ", v);
  }
  Tensor out = Tensor::empty({v, d}, g.options());
  dispatch_floating(g.dtype(), op::kEmbeddingBackward, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pg = g.data<T>();
    T* po = out.data<T>();
    parallel_for(0, v, 1, [&](int64_t b, int64_t e) {
      std::vector<C> acc(static_cast<size_t>((e - b) * d), C(0));
      for (int64_t i = 0; i < rows; ++i) {
        if (ix[i] < b || ix[i] >= e) continue;
        C* a = acc.data() + (ix[i] - b) * d;
        for (int64_t c = 0; c < d; ++c) a[c] += C(pg[i * d + c]);
      }
      for (int64_t x = 0; x < (e - b) * d; ++x) po[b * d + x] = T(acc[static_cast<size_t>(x)]);
    });
  });
  return {out};
}

// x [outer, size, inner] at index along the middle = src [outer, k, inner],
// in place; a repeated index takes its last source (kernels.h leaves it
// unspecified: the CUDA twin's writes race).
std::vector<Tensor> index_copy(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 3, "index_copy_: expected 3 inputs, got ", in.size());
  const Tensor &x = in[0], index = in[1].contiguous(), src = in[2].contiguous();
  check_index_tensor(index, op::kIndexCopy);
  check_ndim(index, 1, op::kIndexCopy, "index");
  COPPICE_CHECK(x.is_contiguous(), "index_copy_: the destination must be contiguous");
  const int64_t dim = normalize_dim(attrs.get_int("dim"), x.dim(), op::kIndexCopy);
  const int64_t size = x.size(dim), nidx = index.numel();
  const int64_t* idx = index.data<int64_t>();
  check_range(idx, nidx, size, dim, op::kIndexCopy);
  const int64_t outer = prod(x.shape(), 0, dim), inner = prod(x.shape(), dim + 1, x.dim());
  COPPICE_CHECK(src.numel() == outer * nidx * inner && src.dtype() == x.dtype(),
                "index_copy_: src must be the destination's slices at the ", nidx, " indices, got ",
                shape_to_string(src.shape()));
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
  char* px = static_cast<char*>(x.data_ptr());
  const char* ps = static_cast<const char*>(src.data_ptr());
  // Sequential over the indices within an outer slice, so the last of a repeat lands.
  parallel_for(0, outer, 1, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      for (int64_t j = 0; j < nidx; ++j) {
        std::memcpy(px + (o * size + idx[j]) * row_bytes, ps + (o * nidx + j) * row_bytes, row_bytes);
      }
    }
  });
  return {};
}

KernelRegistrar embedding_backward_reg(op::kEmbeddingBackward, DeviceType::kCpu, {"dense", "dense"},
                                       embedding_backward);
KernelRegistrar index_select_reg(op::kIndexSelect, DeviceType::kCpu, {"dense", "dense"},
                                 [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                                   COPPICE_CHECK(in.size() == 2, "index_select: expected 2 inputs, got ", in.size());
                                   return {index_select(in[0], in[1], attrs.get_int("dim"))};
                                 });
KernelRegistrar index_copy_reg(op::kIndexCopy, DeviceType::kCpu, {"dense", "dense", "dense"}, index_copy);
KernelRegistrar gather_reg(op::kGather, DeviceType::kCpu, {"dense", "dense"},
                           [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                             COPPICE_CHECK(in.size() == 2, "gather: expected 2 inputs, got ", in.size());
                             return {gather(in[0], in[1], attrs.get_int("dim"))};
                           });
KernelRegistrar scatter_add_reg(op::kScatterAdd, DeviceType::kCpu, {"dense", "dense", "dense"},
                                [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                                  COPPICE_CHECK(in.size() == 3, "scatter_add: expected 3 inputs, got ", in.size());
                                  return {scatter_add(in[0], in[1], in[2], attrs.get_int("dim"))};
                                });

}  // namespace
}  // namespace coppice::cpu
