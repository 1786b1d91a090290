// topk (kernels.h): the k largest (or smallest) of each row of a contiguous
// [outer, r] tensor, sorted, ties by lower index first.
//
// Two stable device-wide radix sorts (CUB): first every element by its value
// key, carrying its linear index, then by row. Stability makes equal values
// keep index order, so the result is deterministic and equals a stable sort
// of each row on the CPU. Keys map values to unsigned integers whose order is
// the values' order: NaN above +inf (so NaN counts as the largest, as in
// PyTorch), -0 equal to +0; for `largest` the keys are complemented. One
// device-wide sort, instead of a segmented one, stays fast when there are few,
// very long rows (a top-k over a whole flattened weight).
// Limit: outer * r below 2^31 elements.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cstdint>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/launch.cuh"

namespace coppice::cuda {
namespace {

template <typename T>
using key_t = std::conditional_t<sizeof(compute_t<T>) == 8, uint64_t, uint32_t>;

template <typename T>
__device__ inline key_t<T> order_key(T v) {
  using C = compute_t<T>;
  const C c = static_cast<C>(v);
  if constexpr (std::is_same_v<C, float>) {
    if (c != c) return 0xffffffffu;  // NaN, any payload
    uint32_t u = __float_as_uint(c == 0.0f ? 0.0f : c);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  } else if constexpr (std::is_same_v<C, double>) {
    if (c != c) return ~uint64_t{0};
    uint64_t u = static_cast<uint64_t>(__double_as_longlong(c == 0.0 ? 0.0 : c));
    return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
  } else if constexpr (std::is_signed_v<C>) {
    using U = key_t<T>;
    return static_cast<U>(static_cast<std::make_unsigned_t<C>>(c)) ^ (U{1} << (sizeof(C) * 8 - 1));
  } else {
    return static_cast<uint32_t>(c);
  }
}

template <typename T, typename K>
__global__ void make_keys(const T* x, K* keys, int32_t* ids, int64_t n, bool largest) {
  COPPICE_KERNEL_LOOP(i, n) {
    const K k = order_key<T>(x[i]);
    keys[i] = largest ? static_cast<K>(~k) : k;
    ids[i] = static_cast<int32_t>(i);
  }
}

__global__ void row_keys(const int32_t* ids, uint32_t* rows, int64_t n, int64_t r) {
  COPPICE_KERNEL_LOOP(i, n) rows[i] = static_cast<uint32_t>(ids[i] / r);
}

template <typename U>
__global__ void take_first_k(const U* x, const int32_t* ids, U* values, int64_t* indices, int64_t outer, int64_t r,
                             int64_t k) {
  COPPICE_KERNEL_LOOP(i, outer * k) {
    const int64_t row = i / k, t = i % k;
    const int64_t id = ids[row * r + t];
    values[i] = x[id];
    indices[i] = id - row * r;
  }
}

int bits_for(int64_t max_value) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= max_value) ++bits;
  return bits;
}

// Sorts (keys, ids) by key, stably; the sorted ids end up in ids.Current().
template <typename K>
void radix_sort(cub::DoubleBuffer<K>& keys, cub::DoubleBuffer<int32_t>& ids, int n, int end_bit, Device device) {
  cudaStream_t stream = current_stream(device.index);
  size_t temp_bytes = 0;
  COPPICE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, ids, n, 0, end_bit, stream), "topk");
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, TensorOptions(DType::kU8, device));
  COPPICE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys, ids, n, 0, end_bit, stream),
                     "topk");
}

std::vector<Tensor> topk(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, "topk");
  const Tensor& x = in[0];
  check_contiguous_cuda(x, "topk", "input");
  check_ndim(x, 2, "topk", "input");
  const int64_t outer = x.size(0), r = x.size(1);
  const int64_t k = attrs.get_int("k");
  const bool largest = attrs.get_bool("largest", true);
  COPPICE_CHECK(k >= 0 && k <= r, "topk: k = ", k, " is out of range for rows of length ", r);
  const int64_t n = x.numel();
  COPPICE_CHECK(n < INT_MAX, "topk: the CUDA kernel sorts at most 2^31 - 1 elements, got ", n);
  Tensor values = Tensor::empty({outer, k}, x.options());
  Tensor indices = Tensor::empty({outer, k}, TensorOptions(DType::kI64, x.device()));
  if (outer == 0 || k == 0) return {values, indices};
  const Device device = x.device();
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  const TensorOptions i32(DType::kI32, device);
  Tensor id_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
  cub::DoubleBuffer<int32_t> ids(id_buf[0].data<int32_t>(), id_buf[1].data<int32_t>());
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = key_t<T>;
    const TensorOptions key_options(sizeof(K) == 8 ? DType::kI64 : DType::kI32, device);
    Tensor key_buf[2] = {Tensor::empty({n}, key_options), Tensor::empty({n}, key_options)};
    cub::DoubleBuffer<K> keys(static_cast<K*>(key_buf[0].data_ptr()), static_cast<K*>(key_buf[1].data_ptr()));
    make_keys<T, K><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data_ptr()), keys.Current(),
                                                          ids.Current(), n, largest);
    check_launch("topk");
    radix_sort(keys, ids, static_cast<int>(n), sizeof(K) * 8, device);
  });
  if (outer > 1) {  // regroup by row; stability keeps each row's value order
    Tensor row_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
    cub::DoubleBuffer<uint32_t> rows(static_cast<uint32_t*>(row_buf[0].data_ptr()),
                                     static_cast<uint32_t*>(row_buf[1].data_ptr()));
    row_keys<<<grid_for(n), kThreads, 0, stream>>>(ids.Current(), rows.Current(), n, r);
    check_launch("topk");
    radix_sort(rows, ids, static_cast<int>(n), bits_for(outer - 1), device);
  }
  by_element_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    take_first_k<U><<<grid_for(outer * k), kThreads, 0, stream>>>(static_cast<const U*>(x.data_ptr()), ids.Current(),
                                                                  static_cast<U*>(values.data_ptr()),
                                                                  indices.data<int64_t>(), outer, r, k);
  });
  check_launch("topk");
  return {values, indices};
}

const KernelRegistrar kTopk("topk", DeviceType::kCuda, {"dense"}, topk);

}  // namespace
}  // namespace coppice::cuda
