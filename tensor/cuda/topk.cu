// topk (kernels.h), twin of tensor/cpu/topk.cc: the k largest (or smallest)
// of each row of [outer, r], sorted, ties by lower index first; NaN counts as
// larger than every number (first when largest, last otherwise); any dtype.
//
// Two stable device-wide radix sorts (sort.h): every element by a value key,
// carrying its linear index, then by row. Stability keeps equal values in
// index order, so the result is deterministic and equals the CPU's. Keys map
// values to unsigned integers in the same order: NaN above +inf, -0 equal to
// +0; for `largest` they are complemented. One device-wide sort, rather than
// a segmented one, stays fast when there are few, very long rows (a top-k
// over a whole flattened weight). Limit: fewer than 2^31 elements.
#include <climits>
#include <cstdint>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/sort.h"
#include "tensor/op_table.h"

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
    const uint32_t u = __float_as_uint(c == 0.0f ? 0.0f : c);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  } else if constexpr (std::is_same_v<C, double>) {
    if (c != c) return ~uint64_t{0};
    const uint64_t u = static_cast<uint64_t>(__double_as_longlong(c == 0.0 ? 0.0 : c));
    return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
  } else if constexpr (std::is_signed_v<C>) {
    using K = key_t<T>;
    return static_cast<K>(static_cast<std::make_unsigned_t<C>>(c)) ^ (K{1} << (sizeof(C) * 8 - 1));
  } else {
    return static_cast<uint32_t>(c);  // u8, bool
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

std::vector<Tensor> topk(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kTopk);
  check_cuda_tensor(in[0], op::kTopk, "input");
  check_ndim(in[0], 2, op::kTopk, "input");
  const Tensor x = in[0].contiguous();
  const int64_t outer = x.size(0), r = x.size(1);
  const int64_t k = attrs.get_int("k");
  const bool largest = attrs.get_bool("largest", true);
  COPPICE_CHECK(k >= 0 && k <= r, "topk: k = ", k, " is out of range for a dimension of size ", r);
  const int64_t n = x.numel();
  COPPICE_CHECK(n < INT_MAX, "topk: the CUDA kernel sorts fewer than 2^31 elements, got ", n);
  Tensor values = Tensor::empty({outer, k}, x.options());
  Tensor indices = Tensor::empty({outer, k}, TensorOptions(DType::kI64, x.device()));
  if (values.numel() == 0) return {values, indices};
  const Device device = x.device();
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  const TensorOptions i32(DType::kI32, device);
  Tensor id_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
  int32_t* ids = nullptr;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = key_t<T>;
    const TensorOptions key_options(sizeof(K) == 8 ? DType::kI64 : DType::kI32, device);
    Tensor key_buf[2] = {Tensor::empty({n}, key_options), Tensor::empty({n}, key_options)};
    SortBuffers<K> sb;
    sb.keys[0] = static_cast<K*>(key_buf[0].data_ptr());
    sb.keys[1] = static_cast<K*>(key_buf[1].data_ptr());
    sb.values[0] = id_buf[0].data<int32_t>();
    sb.values[1] = id_buf[1].data<int32_t>();
    make_keys<T, K><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data_ptr()), sb.keys[0], sb.values[0],
                                                          n, largest);
    check_launch(op::kTopk);
    radix_sort_pairs(sb, static_cast<int>(n), sizeof(K) * 8, device);
    ids = sb.values[sb.current_value];
  });
  if (outer > 1) {  // regroup by row; stability keeps each row's value order
    Tensor row_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
    SortBuffers<uint32_t> sb;
    sb.keys[0] = static_cast<uint32_t*>(row_buf[0].data_ptr());
    sb.keys[1] = static_cast<uint32_t*>(row_buf[1].data_ptr());
    sb.values[0] = ids;
    sb.values[1] = ids == id_buf[0].data<int32_t>() ? id_buf[1].data<int32_t>() : id_buf[0].data<int32_t>();
    row_keys<<<grid_for(n), kThreads, 0, stream>>>(ids, sb.keys[0], n, r);
    check_launch(op::kTopk);
    radix_sort_pairs(sb, static_cast<int>(n), bits_for(static_cast<uint64_t>(outer - 1)), device);
    ids = sb.values[sb.current_value];
  }
  by_element_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    take_first_k<U><<<grid_for(outer * k), kThreads, 0, stream>>>(static_cast<const U*>(x.data_ptr()), ids,
                                                                  static_cast<U*>(values.data_ptr()),
                                                                  indices.data<int64_t>(), outer, r, k);
  });
  check_launch(op::kTopk);
  return {values, indices};
}

const KernelRegistrar kTopk(op::kTopk, DeviceType::kCuda, {"dense"}, topk);

}  // namespace
}  // namespace coppice::cuda
