// CUDA twins of csr_row_softmax and csr_row_softmax_backward (sparse/ops.h
// has the table; sparse/cpu/row_softmax.cc is the CPU side). They exist so
// that the block-sparse attention's softmax stays on the device: no copy to
// the host, no synchronization, nothing a CUDA graph capture cannot record.
//
// One warp per row (grid-stride over rows): attention rows are short (tens to
// hundreds of entries), so a warp keeps its lanes busy without the block-wide
// reductions a block per row would need, and a row of any length still works
// (each lane strides by 32). Lanes read consecutive entries, so every pass is
// coalesced. The forward makes three passes over the row (max, sum, write)
// rather than caching the row, which would bound the row length.
//
// Numerics against the CPU twin: the CPU sums in f64 in row order; here each
// lane sums its entries and a butterfly adds the lanes' partial sums, in f32
// for f32/bf16/f16 and in f64 for f64. The max propagates NaN as the CPU's
// does, so NaN rows, -inf rows (NaN) and empty rows (nothing written) agree.
// exp is the IEEE-accurate libdevice one (device_math.cuh), within 2 ulp of
// libm; the sums differ from the CPU's by at most about (len/32 + 5) ulp of
// the compute type (tests/sparse/cuda/row_softmax_test.cc states its bound).
#include <cstdint>
#include <limits>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/warp.cuh"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ inline int64_t warp_id() { return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; }
__device__ inline int64_t warp_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp; }

// The CPU's rule: v replaces m when v is NaN or larger; a NaN m stays (v > NaN
// is false). Symmetric in NaN-ness, so the butterfly gives every lane NaN when
// any lane saw one.
template <typename C>
__device__ inline C nan_max(C m, C v) {
  return math::isnan(v) || v > m ? v : m;
}

// After the butterfly every lane holds the warp's result.
template <typename C>
__device__ inline C warp_max(C m) {
#pragma unroll
  for (int d = kWarp / 2; d > 0; d /= 2) m = nan_max(m, __shfl_xor_sync(kFull, m, d));
  return m;
}

template <typename T>
__global__ void row_softmax_kernel(const int32_t* __restrict__ crow, int64_t rows, const T* __restrict__ x,
                                   T* __restrict__ y) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = warp_id(); r < rows; r += warp_count()) {  // warp-uniform: shuffles see all 32 lanes
    const int64_t b = crow[r], e = crow[r + 1];
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t i = b + lane; i < e; i += kWarp) m = nan_max(m, convert<C>(x[i]));
    m = warp_max(m);
    C s = 0;
    for (int64_t i = b + lane; i < e; i += kWarp) s += math::exp(convert<C>(x[i]) - m);
    s = warp_sum(s);
    for (int64_t i = b + lane; i < e; i += kWarp) y[i] = convert<T>(math::exp(convert<C>(x[i]) - m) / s);
  }
}

template <typename T>
__global__ void row_softmax_backward_kernel(const int32_t* __restrict__ crow, int64_t rows, const T* __restrict__ y,
                                            const T* __restrict__ g, T* __restrict__ gx) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = warp_id(); r < rows; r += warp_count()) {
    const int64_t b = crow[r], e = crow[r + 1];
    C dot = 0;
    for (int64_t i = b + lane; i < e; i += kWarp) dot += convert<C>(g[i]) * convert<C>(y[i]);
    dot = warp_sum(dot);
    for (int64_t i = b + lane; i < e; i += kWarp) gx[i] = convert<T>(convert<C>(y[i]) * (convert<C>(g[i]) - dot));
  }
}

// The frontends (sparse/ops/ops.cc) checked formats, dtypes, shapes and
// devices; the pointers are a CSR's, trusted (reading them back would
// synchronize).
void check_operands(const std::vector<Tensor>& in, size_t n, const char* op) {
  check_inputs(in, n, op);
  check_contiguous_cuda(in[0], op, "crow");
  check_dtype(in[0], DType::kI32, op, "crow");
  for (size_t k = 1; k < n; ++k) check_contiguous_cuda(in[k], op, "values");
}

std::vector<Tensor> csr_row_softmax(const std::vector<Tensor>& in, const Attrs&) {
  constexpr const char* op = op::kCsrRowSoftmax;
  check_operands(in, 2, op);
  const Tensor& crow = in[0];
  const Tensor& x = in[1];
  const int64_t rows = crow.numel() - 1;
  Tensor y = Tensor::empty(x.shape(), x.options());  // the only allocation
  if (rows == 0 || x.numel() == 0) return {y};
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);  // a capture's stream while one records
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_softmax_kernel<T><<<grid_for(rows * kWarp), kThreads, 0, stream>>>(
        crow.data<int32_t>(), rows, static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()));
  });
  check_launch(op);
  return {y};
}

std::vector<Tensor> csr_row_softmax_backward(const std::vector<Tensor>& in, const Attrs&) {
  constexpr const char* op = op::kCsrRowSoftmaxBackward;
  check_operands(in, 3, op);
  const Tensor& crow = in[0];
  const Tensor& y = in[1];
  const Tensor& g = in[2];
  const int64_t rows = crow.numel() - 1;
  Tensor gx = Tensor::empty(y.shape(), y.options());
  if (rows == 0 || y.numel() == 0) return {gx};
  DeviceGuard guard(y.device().index);
  cudaStream_t stream = current_stream(y.device().index);
  dispatch_floating(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_softmax_backward_kernel<T><<<grid_for(rows * kWarp), kThreads, 0, stream>>>(
        crow.data<int32_t>(), rows, static_cast<const T*>(y.data_ptr()), static_cast<const T*>(g.data_ptr()),
        static_cast<T*>(gx.data_ptr()));
  });
  check_launch(op);
  return {gx};
}

const KernelRegistrar kRowSoftmax(op::kCsrRowSoftmax, DeviceType::kCuda, {"dense", "dense"}, csr_row_softmax);
const KernelRegistrar kRowSoftmaxBackward(op::kCsrRowSoftmaxBackward, DeviceType::kCuda, {"dense", "dense", "dense"},
                                          csr_row_softmax_backward);

}  // namespace
}  // namespace coppice::cuda
