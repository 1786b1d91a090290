// index_select, gather and scatter_add (kernels.h), with every index checked
// against its dimension (index_check.cuh): an out-of-range index throws
// coppice::Error and is never dereferenced.
//
// index_select and gather only move elements, so they have one kernel per
// element size. scatter_add adds with atomics: f32 and f64 directly, bf16 and
// f16 in an f32 copy of x (one rounding at the end, as a f32 accumulation on
// the CPU), u8 and bool in an i32 copy (u8 wraps, bool is "or"). Atomic
// float additions make the order of the sums, and so the last bits of f32/f64
// results with duplicate indices, vary from run to run.
#include <cstdint>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/index_check.cuh"
#include "tensor/cuda/launch.cuh"

namespace coppice::cuda {
namespace {

constexpr int kMaxDims = 8;

// out [outer, nidx, inner] = x [outer, size, inner] at index along the middle.
template <typename U>
__global__ void index_select_kernel(const U* x, const int64_t* index, U* out, int64_t total, int64_t nidx,
                                    int64_t size, int64_t inner, int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, total) {
    const int64_t in = i % inner;
    const int64_t j = (i / inner) % nidx;
    const int64_t o = i / (inner * nidx);
    const int64_t k = index[j];
    if (k < 0 || k >= size) {
      report_bad_index(bad, k);
      continue;
    }
    out[i] = x[(o * size + k) * inner + in];
  }
}

// Shapes for gather and scatter_add: index (= src, = out of gather) is
// contiguous with sizes `sizes`; x is contiguous with strides `x_strides`.
struct IndexGeometry {
  int ndim;
  int dim;
  int64_t dim_size;
  int64_t sizes[kMaxDims];
  int64_t x_strides[kMaxDims];

  // The element of x that index element `i` (holding `k` along dim) addresses.
  __device__ int64_t x_offset(int64_t i, int64_t k) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = i % sizes[d];
      i /= sizes[d];
      off += (d == dim ? k : c) * x_strides[d];
    }
    return off;
  }
};

template <typename U>
__global__ void gather_kernel(const U* x, const int64_t* index, U* out, int64_t total, IndexGeometry g, int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, total) {
    const int64_t k = index[i];
    if (k < 0 || k >= g.dim_size) {
      report_bad_index(bad, k);
      continue;
    }
    out[i] = x[g.x_offset(i, k)];
  }
}

__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {  // two's complement: unsigned addition wraps alike
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <typename A, typename S>
__global__ void scatter_add_kernel(A* acc, const int64_t* index, const S* src, int64_t total, IndexGeometry g,
                                   int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, total) {
    const int64_t k = index[i];
    if (k < 0 || k >= g.dim_size) {
      report_bad_index(bad, k);
      continue;
    }
    atomic_add(acc + g.x_offset(i, k), static_cast<A>(src[i]));
  }
}

void check_index(const Tensor& index, std::string_view op) {
  check_contiguous_cuda(index, op, "index");
  check_dtype(index, DType::kI64, op, "index");
}

std::vector<Tensor> index_select(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 2, "index_select");
  const Tensor& x = in[0];
  const Tensor& index = in[1];
  check_contiguous_cuda(x, "index_select", "input");
  check_index(index, "index_select");
  check_ndim(index, 1, "index_select", "index");
  COPPICE_CHECK(x.dim() > 0, "index_select: input must have at least one dimension");
  const int64_t dim = normalize_dim(attrs.get_int("dim"), x.dim(), "index_select");
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  Tensor out = Tensor::empty(out_shape, x.options());
  const int64_t total = out.numel();
  if (total == 0) return {out};
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int device = x.device().index;
  DeviceGuard guard(device);
  BadIndexSlot bad(x.device());
  by_element_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    index_select_kernel<U><<<grid_for(total), kThreads, 0, current_stream(device)>>>(
        static_cast<const U*>(x.data_ptr()), index.data<int64_t>(), static_cast<U*>(out.data_ptr()), total,
        index.numel(), x.size(dim), inner, bad.ptr());
  });
  check_launch("index_select");
  bad.check("index_select", dim, x.size(dim));
  return {out};
}

// Checks that index fits x as gather and scatter_add need, and describes it.
IndexGeometry make_geometry(const Tensor& x, const Tensor& index, int64_t dim, std::string_view op) {
  COPPICE_CHECK(index.dim() == x.dim(), op, ": index must have the input's ", x.dim(), " dimensions, got shape ",
                shape_to_string(index.shape()));
  COPPICE_CHECK(x.dim() <= kMaxDims, op, ": at most ", kMaxDims, " dimensions are supported, got ", x.dim());
  IndexGeometry g{};
  g.ndim = static_cast<int>(x.dim());
  g.dim = static_cast<int>(dim);
  g.dim_size = x.size(dim);
  for (int64_t d = 0; d < x.dim(); ++d) {
    COPPICE_CHECK(d == dim || index.size(d) <= x.size(d), op, ": index of shape ", shape_to_string(index.shape()),
                  " is larger than the input ", shape_to_string(x.shape()), " in dim ", d);
    g.sizes[d] = index.size(d);
    g.x_strides[d] = x.stride(d);
  }
  return g;
}

std::vector<Tensor> gather(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 2, "gather");
  const Tensor& x = in[0];
  const Tensor& index = in[1];
  check_contiguous_cuda(x, "gather", "input");
  check_index(index, "gather");
  COPPICE_CHECK(x.dim() > 0, "gather: input must have at least one dimension");
  const int64_t dim = normalize_dim(attrs.get_int("dim"), x.dim(), "gather");
  const IndexGeometry g = make_geometry(x, index, dim, "gather");
  Tensor out = Tensor::empty(index.shape(), x.options());
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
  check_launch("gather");
  bad.check("gather", dim, x.size(dim));
  return {out};
}

std::vector<Tensor> scatter_add(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 3, "scatter_add");
  const Tensor& x = in[0];
  const Tensor& index = in[1];
  const Tensor& src = in[2];
  check_contiguous_cuda(x, "scatter_add", "input");
  check_index(index, "scatter_add");
  check_contiguous_cuda(src, "scatter_add", "src");
  COPPICE_CHECK(src.dtype() == x.dtype(), "scatter_add: src must have the input's dtype ", dtype_name(x.dtype()),
                ", got ", dtype_name(src.dtype()));
  COPPICE_CHECK(src.shape() == index.shape(), "scatter_add: src of shape ", shape_to_string(src.shape()),
                " must have the index's shape ", shape_to_string(index.shape()));
  COPPICE_CHECK(x.dim() > 0, "scatter_add: input must have at least one dimension");
  const int64_t dim = normalize_dim(attrs.get_int("dim"), x.dim(), "scatter_add");
  const IndexGeometry g = make_geometry(x, index, dim, "scatter_add");
  const int device = x.device().index;
  DeviceGuard guard(device);
  // The accumulator: x's own type where CUDA has the atomic, else a wider copy.
  DType acc_dtype = x.dtype();
  if (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16) acc_dtype = DType::kF32;
  if (x.dtype() == DType::kU8 || x.dtype() == DType::kBool) acc_dtype = DType::kI32;
  Tensor acc = acc_dtype == x.dtype() ? x.clone() : x.to(acc_dtype);
  const int64_t total = index.numel();
  if (total > 0) {
    BadIndexSlot bad(x.device());
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using S = typename decltype(tag)::type;
      auto launch = [&](auto acc_tag) {
        using A = typename decltype(acc_tag)::type;
        scatter_add_kernel<A, S><<<grid_for(total), kThreads, 0, current_stream(device)>>>(
            static_cast<A*>(acc.data_ptr()), index.data<int64_t>(), static_cast<const S*>(src.data_ptr()), total, g,
            bad.ptr());
      };
      if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>) {
        launch(TypeTag<float>{});
      } else if constexpr (std::is_same_v<S, uint8_t> || std::is_same_v<S, bool>) {
        launch(TypeTag<int32_t>{});
      } else {
        launch(TypeTag<S>{});
      }
    });
    check_launch("scatter_add");
    bad.check("scatter_add", dim, x.size(dim));
  }
  return {acc_dtype == x.dtype() ? acc : acc.to(x.dtype())};
}

const KernelRegistrar kIndexSelect("index_select", DeviceType::kCuda, {"dense", "dense"}, index_select);
const KernelRegistrar kGather("gather", DeviceType::kCuda, {"dense", "dense"}, gather);
const KernelRegistrar kScatterAdd("scatter_add", DeviceType::kCuda, {"dense", "dense", "dense"}, scatter_add);

}  // namespace
}  // namespace coppice::cuda
