// index_select, gather, scatter_add and index_copy_ (kernels.h), twins of
// tensor/cpu/indexing.cc. Indices are i64 in [0, size of dim): negative ones
// do not wrap, and an out-of-range index is never dereferenced. It throws
// coppice::Error naming the op, the index and its position, as the CPU does:
// at the next synchronization or read of a result (index_check.cuh,
// deferred_checks.h), except index_copy_, which writes in place and so
// checks before it writes. Any dtype. gather and scatter_add take an index
// no larger than the other operands in any dim (except dim for the tensor
// indexed).
//
// index_select and gather only move elements: one kernel per element size;
// index_select and index_copy_ move each slice of the indexed dimension as a
// run, in units of up to 16 bytes (by_run_width).
// scatter_add is deterministic and matches the CPU bit for bit: the (target,
// position) pairs are radix-sorted by target (stable, sort.h), then one thread
// per target adds its sources in index order, in the compute type, rounding
// to the element type after each addition exactly as the CPU loop does
// (integers wrap, bool adds as "or"). No float atomics.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/deferred_checks.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/index_check.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/sort.h"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

constexpr int kMaxDims = 8;

// Reports the first index outside [0, size).
__global__ void range_check(const int64_t* index, int64_t n, int64_t size, int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, n) {
    const int64_t k = index[i];
    if (k < 0 || k >= size) report_bad_index(bad, i);
  }
}

// out [outer, nidx, inner] = x [outer, size, inner] at index (checked) along the middle.
template <typename U>
__global__ void index_select_kernel(const U* x, const int64_t* index, U* out, int64_t total, int64_t nidx, int64_t size,
                                    int64_t inner) {
  COPPICE_KERNEL_LOOP(i, total) {
    const int64_t in = i % inner;
    const int64_t j = (i / inner) % nidx;
    const int64_t o = i / (inner * nidx);
    const int64_t k = index[j];  // in range unless a trusted index was wrong: then zero, never a stray read
    out[i] = k >= 0 && k < size ? x[(o * size + k) * inner + in] : U{};
  }
}

// x [outer, size, inner] at index (checked) along the middle = src [outer, nidx, inner], in place.
template <typename U>
__global__ void index_copy_kernel(U* x, const int64_t* index, const U* src, int64_t total, int64_t nidx, int64_t size,
                                  int64_t inner) {
  COPPICE_KERNEL_LOOP(i, total) {
    const int64_t in = i % inner;
    const int64_t j = (i / inner) % nidx;
    const int64_t o = i / (inner * nidx);
    const int64_t k = index[j];
    if (k >= 0 && k < size) x[(o * size + k) * inner + in] = src[i];  // out of range only in a graph's replay
  }
}

// The contiguous index (sizes `sizes`) addresses x (strides `x_strides`) and,
// for scatter_add, src (strides `src_strides`) at the same coordinates.
struct IndexGeometry {
  int ndim;
  int dim;
  int64_t dim_size;
  int64_t sizes[kMaxDims];
  int64_t x_strides[kMaxDims];
  int64_t src_strides[kMaxDims];

  // Offsets in x (with `k` along dim) and in src of index element `i`.
  __device__ void offsets(int64_t i, int64_t k, int64_t* x_off, int64_t* src_off) const {
    int64_t xo = 0, so = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = i % sizes[d];
      i /= sizes[d];
      xo += (d == dim ? k : c) * x_strides[d];
      so += c * src_strides[d];
    }
    *x_off = xo;
    *src_off = so;
  }
};

template <typename U>
__global__ void gather_kernel(const U* x, const int64_t* index, U* out, int64_t total, IndexGeometry g, int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, total) {
    const int64_t k = index[i];
    if (k < 0 || k >= g.dim_size) {
      report_bad_index(bad, i);
      continue;
    }
    int64_t x_off, unused;
    g.offsets(i, k, &x_off, &unused);
    out[i] = x[x_off];
  }
}

// keys[i] = offset in out that index element i adds to; ids[i] = i.
__global__ void scatter_keys(const int64_t* index, uint64_t* keys, int32_t* ids, int64_t total, IndexGeometry g,
                             int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, total) {
    int64_t k = index[i];
    if (k < 0 || k >= g.dim_size) {
      report_bad_index(bad, i);
      k = 0;  // keeps the key in range: the sums are wrong, and the deferred check throws
    }
    int64_t x_off, unused;
    g.offsets(i, k, &x_off, &unused);
    keys[i] = static_cast<uint64_t>(x_off);
    ids[i] = static_cast<int32_t>(i);
  }
}

template <typename C>
__device__ inline C accumulate(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

// One thread per run of equal keys (sorted): adds the run's sources in order.
template <typename T>
__global__ void scatter_sums(const uint64_t* keys, const int32_t* ids, const T* src, T* out, int64_t total,
                             IndexGeometry g) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(j, total) {
    const uint64_t key = keys[j];
    if (j > 0 && keys[j - 1] == key) continue;
    T cur = out[key];
    for (int64_t t = j; t < total && keys[t] == key; ++t) {
      int64_t unused, src_off;
      g.offsets(ids[t], 0, &unused, &src_off);
      cur = T(accumulate(static_cast<C>(cur), static_cast<C>(src[src_off])));
    }
    out[key] = cur;
  }
}

void check_index_tensor(const Tensor& index, std::string_view op) {
  check_cuda_tensor(index, op, "index");
  check_dtype(index, DType::kI64, op, "index");
}

// A 0-dimensional tensor as [1], so the kernels always have a dim to index.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t.contiguous(); }

std::vector<Tensor> index_select(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 2, op::kIndexSelect);
  check_cuda_tensor(in[0], op::kIndexSelect, "input");
  check_index_tensor(in[1], op::kIndexSelect);
  check_ndim(in[1], 1, op::kIndexSelect, "index");
  COPPICE_CHECK(in[0].dim() >= 1, "index_select: input must have at least one dimension");
  const int64_t dim = normalize_dim(attrs.get_int("dim"), in[0].dim(), op::kIndexSelect);
  const Tensor x = in[0].contiguous(), index = in[1].contiguous();
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  Tensor out = Tensor::empty(out_shape, x.options());
  const int64_t total = out.numel();
  const int64_t size = x.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int device = x.device().index;
  DeviceGuard guard(device);
  const int64_t nidx = index.numel();
  if (nidx > 0 && !attrs.get_bool("trusted", false)) {  // checked first, even when the result is empty, as on the CPU
    BadIndexSlot bad(x.device());
    range_check<<<grid_for(nidx), kThreads, 0, current_stream(device)>>>(index.data<int64_t>(), nidx, size, bad.ptr());
    check_launch(op::kIndexSelect);
    bad.check(op::kIndexSelect, index, dim, size);
  }
  if (total == 0) return {out};
  // Each of the outer * nidx slices is a run of inner elements, moved in the widest units that fit.
  const int64_t run_bytes = inner * dtype_size(x.dtype());
  by_run_width(run_bytes, {x.data_ptr(), out.data_ptr()}, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const int64_t units = run_bytes / static_cast<int64_t>(sizeof(U)), n = total / inner * units;
    index_select_kernel<U><<<grid_for(n), kThreads, 0, current_stream(device)>>>(
        static_cast<const U*>(x.data_ptr()), index.data<int64_t>(), static_cast<U*>(out.data_ptr()), n, nidx, size,
        units);
  });
  check_launch(op::kIndexSelect);
  return {out};
}

// In place; the indices are checked before anything is written. Threads
// write only the k slices: a row-sparse optimizer step costs its rows.
std::vector<Tensor> index_copy(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 3, op::kIndexCopy);
  const Tensor& x = in[0];
  check_cuda_tensor(x, op::kIndexCopy, "input");
  check_index_tensor(in[1], op::kIndexCopy);
  check_ndim(in[1], 1, op::kIndexCopy, "index");
  check_cuda_tensor(in[2], op::kIndexCopy, "src");
  COPPICE_CHECK(x.is_contiguous(), "index_copy_: the destination must be contiguous");
  const int64_t dim = normalize_dim(attrs.get_int("dim"), x.dim(), op::kIndexCopy);
  const Tensor index = in[1].contiguous(), src = in[2].contiguous();
  const int64_t size = x.size(dim), nidx = index.numel();
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t total = x.numel() / std::max<int64_t>(size, 1) * nidx;
  COPPICE_CHECK(src.numel() == total && src.dtype() == x.dtype(),
                "index_copy_: src must be the destination's slices at the ", nidx, " indices, got ",
                shape_to_string(src.shape()));
  if (nidx == 0) return {};
  const int device = x.device().index;
  DeviceGuard guard(device);
  {
    BadIndexSlot bad(x.device());
    range_check<<<grid_for(nidx), kThreads, 0, current_stream(device)>>>(index.data<int64_t>(), nidx, size, bad.ptr());
    check_launch(op::kIndexCopy);
    bad.check(op::kIndexCopy, index, dim, size);
    if (!capturing(device)) settle_checks(device, true);  // in place: nothing written past a bad index
  }
  if (total == 0) return {};
  const int64_t run_bytes = inner * dtype_size(x.dtype());
  by_run_width(run_bytes, {x.data_ptr(), src.data_ptr()}, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const int64_t units = run_bytes / static_cast<int64_t>(sizeof(U)), n = total / inner * units;
    index_copy_kernel<U><<<grid_for(n), kThreads, 0, current_stream(device)>>>(
        static_cast<U*>(x.data_ptr()), index.data<int64_t>(), static_cast<const U*>(src.data_ptr()), n, nidx, size,
        units);
  });
  check_launch(op::kIndexCopy);
  return {};
}

// Checks that index fits x (and src) as gather and scatter_add need, and describes them.
IndexGeometry make_geometry(const Tensor& x, const Tensor& index, const Tensor* src, int64_t dim, std::string_view op) {
  COPPICE_CHECK(x.dim() <= kMaxDims, op, ": at most ", kMaxDims, " dimensions are supported, got ", x.dim());
  IndexGeometry g{};
  g.ndim = static_cast<int>(x.dim());
  g.dim = static_cast<int>(dim);
  g.dim_size = x.size(dim);
  for (int64_t d = 0; d < x.dim(); ++d) {
    COPPICE_CHECK(d == dim || index.size(d) <= x.size(d), op, ": index of shape ", shape_to_string(index.shape()),
                  " is larger than the input ", shape_to_string(x.shape()), " in dim ", d);
    if (src != nullptr) {
      COPPICE_CHECK(index.size(d) <= src->size(d), op, ": index of shape ", shape_to_string(index.shape()),
                    " is larger than src ", shape_to_string(src->shape()), " in dim ", d);
      g.src_strides[d] = src->stride(d);
    }
    g.sizes[d] = index.size(d);
    g.x_strides[d] = x.stride(d);
  }
  return g;
}

std::vector<Tensor> gather(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 2, op::kGather);
  check_cuda_tensor(in[0], op::kGather, "input");
  check_index_tensor(in[1], op::kGather);
  const int64_t dim = normalize_dim(attrs.get_int("dim"), in[0].dim(), op::kGather);
  COPPICE_CHECK(in[1].dim() == in[0].dim(), "gather: index must have the input's ", in[0].dim(),
                " dimensions, got shape ", shape_to_string(in[1].shape()));
  const Tensor x = at_least_1d(in[0]), index = at_least_1d(in[1]);
  const IndexGeometry g = make_geometry(x, index, nullptr, dim, op::kGather);
  Tensor out = Tensor::empty(in[1].shape(), x.options());
  const int64_t total = out.numel();
  if (total == 0) return {out};
  const int device = x.device().index;
  DeviceGuard guard(device);
  BadIndexSlot bad(x.device());
  by_element_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    gather_kernel<U><<<grid_for(total), kThreads, 0, current_stream(device)>>>(
        static_cast<const U*>(x.data_ptr()), index.data<int64_t>(), static_cast<U*>(out.data_ptr()), total, g,
        bad.ptr());
  });
  check_launch(op::kGather);
  bad.check(op::kGather, index, dim, x.size(dim));
  return {out};
}

std::vector<Tensor> scatter_add(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 3, op::kScatterAdd);
  const Tensor& input = in[0];
  check_cuda_tensor(input, op::kScatterAdd, "input");
  check_index_tensor(in[1], op::kScatterAdd);
  check_cuda_tensor(in[2], op::kScatterAdd, "src");
  COPPICE_CHECK(in[2].dtype() == input.dtype(), "scatter_add: src must have the input's dtype ",
                dtype_name(input.dtype()), ", got ", dtype_name(in[2].dtype()));
  const int64_t dim = normalize_dim(attrs.get_int("dim"), input.dim(), op::kScatterAdd);
  COPPICE_CHECK(in[1].dim() == input.dim() && in[2].dim() == input.dim(),
                "scatter_add: index and src must have the input's ", input.dim(), " dimensions, got shapes ",
                shape_to_string(in[1].shape()), " and ", shape_to_string(in[2].shape()));
  const Tensor index = at_least_1d(in[1]), src = at_least_1d(in[2]);
  Tensor out = Tensor::empty(input.shape(), input.options());
  const Tensor out1 = out.dim() == 0 ? out.view({1}) : out;
  const IndexGeometry g = make_geometry(out1, index, &src, dim, op::kScatterAdd);
  const int64_t total = index.numel();
  COPPICE_CHECK(total < INT_MAX, "scatter_add: the CUDA kernel takes fewer than 2^31 indices, got ", total);
  const Device device = input.device();
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  dispatch(op::kCopy, {out, input});
  if (total == 0) return {out};
  const TensorOptions i64(DType::kI64, device), i32(DType::kI32, device);
  Tensor key_buf[2] = {Tensor::empty({total}, i64), Tensor::empty({total}, i64)};
  Tensor id_buf[2] = {Tensor::empty({total}, i32), Tensor::empty({total}, i32)};
  SortBuffers<uint64_t> sb;
  for (int b = 0; b < 2; ++b) {
    sb.keys[b] = static_cast<uint64_t*>(key_buf[b].data_ptr());
    sb.values[b] = id_buf[b].data<int32_t>();
  }
  {
    BadIndexSlot bad(device);
    scatter_keys<<<grid_for(total), kThreads, 0, stream>>>(index.data<int64_t>(), sb.keys[0], sb.values[0], total, g,
                                                           bad.ptr());
    check_launch(op::kScatterAdd);
    if (!attrs.get_bool("trusted", false)) bad.check(op::kScatterAdd, index, dim, g.dim_size);
  }
  radix_sort_pairs(sb, static_cast<int>(total), bits_for(static_cast<uint64_t>(std::max<int64_t>(out1.numel(), 1) - 1)),
                   device);
  dispatch_dtype(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    scatter_sums<T><<<grid_for(total), kThreads, 0, stream>>>(sb.keys[sb.current_key], sb.values[sb.current_value],
                                                              static_cast<const T*>(src.data_ptr()),
                                                              static_cast<T*>(out1.data_ptr()), total, g);
  });
  check_launch(op::kScatterAdd);
  return {out};
}

// The gradient of an embedding (tensor/cpu/indexing.cc's twin): the row
// indices sorted once (stable), the bounds of each index's run, then a
// thread per (embedding, column) sums its rows in index order in the compute
// type and rounds once. Where scatter_add of the expanded [N, D] index sorted
// N * D keys, this sorts N.
__global__ void embedding_keys(const int64_t* index, uint32_t* keys, int32_t* ids, int64_t n, int64_t v, int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, n) {
    const int64_t k = index[i];
    if (k < 0 || k >= v) {
      report_bad_index(bad, i);
      keys[i] = 0;
    } else {
      keys[i] = static_cast<uint32_t>(k);
    }
    ids[i] = static_cast<int32_t>(i);
  }
}

__global__ void run_bounds(const uint32_t* keys, int64_t n, int32_t* begin, int32_t* end) {
  COPPICE_KERNEL_LOOP(i, n) {
    if (i == 0 || keys[i - 1] != keys[i]) begin[keys[i]] = static_cast<int32_t>(i);
    if (i == n - 1 || keys[i + 1] != keys[i]) end[keys[i]] = static_cast<int32_t>(i + 1);
  }
}

template <typename T>
__global__ void embedding_sums(const T* g, const int32_t* ids, const int32_t* begin, const int32_t* end, T* out,
                               int64_t v, int64_t d) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(x, v * d) {
    const int64_t row = x / d, c = x % d;
    C s = 0;
    for (int32_t p = begin[row]; p < end[row]; ++p) s += convert<C>(g[static_cast<int64_t>(ids[p]) * d + c]);
    out[x] = convert<T>(s);
  }
}

std::vector<Tensor> embedding_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kEmbeddingBackward;
  check_inputs(in, 2, op);
  const Tensor g = in[0].contiguous(), index = in[1].contiguous();
  check_cuda_tensor(g, op, "grad");
  const int64_t n = index.numel(), d = g.size(1), v = attrs.get_int("num_embeddings");
  COPPICE_CHECK(n < INT_MAX && v < INT_MAX, op, ": the CUDA kernel takes fewer than 2^31 rows and embeddings");
  const Device device = g.device();
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  Tensor out = Tensor::empty({v, d}, g.options());
  const TensorOptions i32(DType::kI32, device);
  Tensor begin = Tensor::empty({v}, i32), end = Tensor::empty({v}, i32);
  begin.fill_(0.0);  // an embedding no index names has an empty run
  end.fill_(0.0);
  if (n > 0) {
    Tensor key_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
    Tensor id_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
    SortBuffers<uint32_t> sb;
    for (int b = 0; b < 2; ++b) {
      sb.keys[b] = static_cast<uint32_t*>(key_buf[b].data_ptr());
      sb.values[b] = id_buf[b].data<int32_t>();
    }
    {
      BadIndexSlot bad(device);
      embedding_keys<<<grid_for(n), kThreads, 0, stream>>>(index.data<int64_t>(), sb.keys[0], sb.values[0], n, v,
                                                           bad.ptr());
      check_launch(op);
      bad.check(op, index, 0, v);
    }
    radix_sort_pairs(sb, static_cast<int>(n), bits_for(static_cast<uint64_t>(std::max<int64_t>(v, 1) - 1)), device);
    run_bounds<<<grid_for(n), kThreads, 0, stream>>>(sb.keys[sb.current_key], n, begin.data<int32_t>(),
                                                     end.data<int32_t>());
    check_launch(op);
    dispatch_floating(g.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      embedding_sums<T><<<grid_for(v * d), kThreads, 0, stream>>>(
          g.data<T>(), sb.values[sb.current_value], begin.data<int32_t>(), end.data<int32_t>(), out.data<T>(), v, d);
    });
  } else {
    out.fill_(0.0);
  }
  check_launch(op);
  return {out};
}

const KernelRegistrar kEmbeddingBackward(op::kEmbeddingBackward, DeviceType::kCuda, {"dense", "dense"},
                                         embedding_backward);
const KernelRegistrar kIndexSelect(op::kIndexSelect, DeviceType::kCuda, {"dense", "dense"}, index_select);
const KernelRegistrar kIndexCopy(op::kIndexCopy, DeviceType::kCuda, {"dense", "dense", "dense"}, index_copy);
const KernelRegistrar kGather(op::kGather, DeviceType::kCuda, {"dense", "dense"}, gather);
const KernelRegistrar kScatterAdd(op::kScatterAdd, DeviceType::kCuda, {"dense", "dense", "dense"}, scatter_add);

}  // namespace
}  // namespace coppice::cuda
