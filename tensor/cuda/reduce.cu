// reduce_sum, reduce_max and reduce_min over the rows of a contiguous
// [outer, r] tensor (kernels.h).
//
// A row is reduced by a group of threads: one warp when rows are short, the
// whole block (256 threads) when they are long. Each thread strides through
// the row, then the group combines its partials in a fixed tree, so results
// are deterministic run to run. Sums accumulate in f32 for bf16/f16 and in
// i64 for integers and bool (wrapping, as the output is i64). max/min keep
// the first index among equal values and propagate NaN (the first NaN wins),
// which equals a left-to-right scan.
#include <cstdint>

#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/cuda/warp.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

constexpr int kLongRow = 1024;  // rows at least this long get a whole block

template <typename T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, int64_t>;

template <typename A>
__device__ inline A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}

// Sums `v` over the `group` threads of a row (32 or the whole block);
// every thread of the group calls it; the result is valid in the group's first thread.
template <typename V, typename Combine>
__device__ V group_reduce(V v, int group, Combine combine) {
  for (int d = kWarp / 2; d > 0; d /= 2) v = combine(v, shfl_down(v, d));
  if (group == kWarp) return v;
  __shared__ V partial[kThreads / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // `partial` may still be read from the previous row
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / kWarp ? partial[lane] : V(0);  // 0: the identity of the sums this serves
    for (int d = kWarp / 2; d > 0; d /= 2) v = combine(v, shfl_down(v, d));
  }
  return v;
}

template <typename T, typename Out>
__global__ void sum_rows(const T* x, Out* out, int64_t outer, int64_t r, int group) {
  using A = sum_acc_t<T>;
  const int rows_per_block = kThreads / group;
  const int lane = threadIdx.x % group;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / group; row < outer;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const T* p = x + row * r;
    A acc = A(0);
    for (int64_t j = lane; j < r; j += group) acc = add(acc, static_cast<A>(static_cast<compute_t<T>>(p[j])));
    acc = group_reduce(acc, group, [](A a, A b) { return add(a, b); });
    if (lane == 0) out[row] = convert<Out>(acc);
  }
}

// The better of two (value, index) candidates: NaN beats numbers, then the
// larger (smaller) value, then the lower index.
template <typename V>
struct ArgBetter {
  bool largest;
  __device__ bool operator()(V a, int64_t ia, V b, int64_t ib) const {
    if constexpr (std::is_floating_point_v<V>) {
      const bool na = math::isnan(a), nb = math::isnan(b);
      if (na || nb) return na && (!nb || ia < ib);
    }
    if (a == b) return ia < ib;
    return largest ? a > b : a < b;
  }
};

template <typename V>
struct ValIdx {
  V v;
  int64_t i;
};

template <typename T>
__global__ void arg_rows(const T* x, T* values, int64_t* indices, int64_t outer, int64_t r, int group,
                         bool largest) {
  using V = compute_t<T>;
  const ArgBetter<V> better{largest};
  const int rows_per_block = kThreads / group;
  const int lane = threadIdx.x % group;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / group; row < outer;
       row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const T* p = x + row * r;
    // Every thread starts from a real element of the row (r > 0), so no identity is needed.
    int64_t first = lane < r ? lane : 0;
    V best = static_cast<V>(p[first]);
    int64_t best_i = first;
    for (int64_t j = lane + group; j < r; j += group) {
      V v = static_cast<V>(p[j]);
      if (better(v, j, best, best_i)) {
        best = v;
        best_i = j;
      }
    }
    // Reduce the pair as two shuffles per step.
    for (int d = kWarp / 2; d > 0; d /= 2) {
      V ov = shfl_down(best, d);
      int64_t oi = shfl_down(best_i, d);
      if (better(ov, oi, best, best_i)) {
        best = ov;
        best_i = oi;
      }
    }
    if (group != kWarp) {
      __shared__ ValIdx<V> partial[kThreads / kWarp];
      const int warp = threadIdx.x / kWarp, wl = threadIdx.x % kWarp;
      __syncthreads();
      if (wl == 0) partial[warp] = {best, best_i};
      __syncthreads();
      if (warp == 0) {
        ValIdx<V> mine = partial[wl < kThreads / kWarp ? wl : 0];
        best = mine.v;
        best_i = mine.i;
        for (int d = kWarp / 2; d > 0; d /= 2) {
          V ov = shfl_down(best, d);
          int64_t oi = shfl_down(best_i, d);
          if (better(ov, oi, best, best_i)) {
            best = ov;
            best_i = oi;
          }
        }
      }
    }
    if (lane == 0) {
      values[row] = p[best_i];
      indices[row] = best_i;
    }
  }
}

// The input as contiguous rows [outer, r] (copied when the caller did not make it so).
Tensor as_rows(const Tensor& x, std::string_view op) {
  check_cuda_tensor(x, op, "input");
  check_ndim(x, 2, op, "input");
  return x.contiguous();
}

unsigned blocks_for_rows(int64_t outer, int group) { return grid_for(outer, kThreads / group); }

std::vector<Tensor> reduce_sum(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 1, "reduce_sum: expected 1 input, got ", in.size());
  const Tensor x = as_rows(in[0], "reduce_sum");
  const int64_t outer = x.size(0), r = x.size(1);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::kI64;
  Tensor out = Tensor::empty({outer}, TensorOptions(out_dtype, x.device()));
  if (outer == 0) return {out};
  const int device = x.device().index;
  const int group = r >= kLongRow ? kThreads : kWarp;
  DeviceGuard guard(device);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      sum_rows<T, T><<<blocks_for_rows(outer, group), kThreads, 0, current_stream(device)>>>(
          static_cast<const T*>(x.data_ptr()), out.data<T>(), outer, r, group);
    } else {
      sum_rows<T, int64_t><<<blocks_for_rows(outer, group), kThreads, 0, current_stream(device)>>>(
          static_cast<const T*>(x.data_ptr()), out.data<int64_t>(), outer, r, group);
    }
  });
  check_launch("reduce_sum");
  return {out};
}

std::vector<Tensor> reduce_arg(std::string_view op, bool largest, const std::vector<Tensor>& in) {
  COPPICE_CHECK(in.size() == 1, op, ": expected 1 input, got ", in.size());
  const Tensor x = as_rows(in[0], op);
  const int64_t outer = x.size(0), r = x.size(1);
  COPPICE_CHECK(r > 0 || outer == 0, op, ": cannot reduce an empty dimension (input shape ",
                shape_to_string(x.shape()), ")");
  Tensor values = Tensor::empty({outer}, x.options());
  Tensor indices = Tensor::empty({outer}, TensorOptions(DType::kI64, x.device()));
  if (outer == 0) return {values, indices};
  const int device = x.device().index;
  const int group = r >= kLongRow ? kThreads : kWarp;
  DeviceGuard guard(device);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    arg_rows<T><<<blocks_for_rows(outer, group), kThreads, 0, current_stream(device)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(values.data_ptr()), indices.data<int64_t>(), outer, r,
        group, largest);
  });
  check_launch(op);
  return {values, indices};
}

const KernelRegistrar kSum("reduce_sum", DeviceType::kCuda, {"dense"}, reduce_sum);
const KernelRegistrar kMax("reduce_max", DeviceType::kCuda, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs&) { return reduce_arg("reduce_max", true, in); });
const KernelRegistrar kMin("reduce_min", DeviceType::kCuda, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs&) { return reduce_arg("reduce_min", false, in); });

}  // namespace
}  // namespace coppice::cuda
