// CUDA twin of the relu-into-CSR kernel (sparsifiers/fused_relu.h has the
// op; fused_relu.cc holds the CPU side). Keeps v > threshold by the rule of
// mask_keys.h (relu_keeps), so both devices store the same entries.
//
// Two passes over x, not one as on the CPU: a CSR's column and value arrays
// are nnz long and each row's entries start where the rows before it end, so
// no thread can write an entry before every earlier row is counted, and the
// output cannot even be allocated before nnz is known. Hence: count the kept
// entries of every row, exclusive-scan the counts into the row pointers
// (CUB), read nnz back to the host once, allocate, then write. Both passes
// give a row to a warp; each lane takes 16 consecutive bytes per step (one
// vector load where aligned), and a warp-wide prefix sum of the lanes' counts
// places each kept entry, so a row's entries come out in ascending columns.
#include <cub/device/device_scan.cuh>

#include <cstdint>

#include "sparsifiers/mask_keys.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/warp.cuh"

namespace coppice::cuda {
namespace {

constexpr const char* kOp = "relu_to_csr";
constexpr unsigned kFull = 0xffffffffu;

// One lane's step: 16 bytes of consecutive elements.
template <typename T>
struct alignas(16) Chunk {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Loads the chunk of `row` starting at column c (vector load when `vectorized`
// and the chunk is whole) and returns its keep bits (bit j: column c + j).
template <typename T>
__device__ inline uint32_t load_keeps(const T* __restrict__ row, int64_t c, int64_t cols,
                                      compute_t<T> bound, bool vectorized, Chunk<T>& chunk) {
  using C = compute_t<T>;
  constexpr int kSize = Chunk<T>::kSize;
  uint32_t bits = 0;
  if (vectorized && c + kSize <= cols) {
    chunk = *reinterpret_cast<const Chunk<T>*>(row + c);
#pragma unroll
    for (int j = 0; j < kSize; ++j) {
      bits |= static_cast<uint32_t>(sparsify_detail::relu_keeps(static_cast<C>(chunk.v[j]), bound)) << j;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kSize; ++j) {
      if (c + j < cols) {
        chunk.v[j] = row[c + j];
        bits |= static_cast<uint32_t>(sparsify_detail::relu_keeps(static_cast<C>(chunk.v[j]), bound)) << j;
      }
    }
  }
  return bits;
}

__device__ inline int64_t warp_id() { return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; }
__device__ inline int64_t warp_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp; }

// counts[r] = kept entries of row r, counts[rows] = 0 (so that the exclusive
// scan of rows + 1 counts ends in nnz).
template <typename T>
__global__ void count_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, compute_t<T> bound,
                             bool vectorized, int32_t* __restrict__ counts) {
  constexpr int kStep = kWarp * Chunk<T>::kSize;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = warp_id(); r < rows; r += warp_count()) {
    const T* row = x + r * cols;
    int count = 0;
    Chunk<T> chunk;
    for (int64_t c = static_cast<int64_t>(lane) * Chunk<T>::kSize; c < cols; c += kStep) {
      count += __popc(load_keeps(row, c, cols, bound, vectorized, chunk));
    }
    for (int d = kWarp / 2; d > 0; d /= 2) count += shfl_down(count, d);
    if (lane == 0) counts[r] = count;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) counts[rows] = 0;
}

// Writes each row's kept columns and values from crow[r] on, in column order.
template <typename T>
__global__ void write_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, compute_t<T> bound,
                             bool vectorized, const int32_t* __restrict__ crow, int32_t* __restrict__ col,
                             T* __restrict__ val) {
  constexpr int kSize = Chunk<T>::kSize;
  constexpr int kStep = kWarp * kSize;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = warp_id(); r < rows; r += warp_count()) {
    const T* row = x + r * cols;
    int32_t next = crow[r];  // where this step's first kept entry goes
    for (int64_t base = 0; base < cols; base += kStep) {  // the same trip count on every lane
      const int64_t c = base + static_cast<int64_t>(lane) * kSize;
      Chunk<T> chunk;
      const uint32_t bits = c < cols ? load_keeps(row, c, cols, bound, vectorized, chunk) : 0u;
      const int n = __popc(bits);
      int inclusive = n;
#pragma unroll
      for (int d = 1; d < kWarp; d *= 2) {
        const int up = __shfl_up_sync(kFull, inclusive, d);
        if (lane >= d) inclusive += up;
      }
      int32_t at = next + inclusive - n;
#pragma unroll
      for (int j = 0; j < kSize; ++j) {
        if ((bits >> j) & 1u) {
          col[at] = static_cast<int32_t>(c + j);
          val[at] = chunk.v[j];  // relu(v) = v where kept
          ++at;
        }
      }
      next += __shfl_sync(kFull, inclusive, kWarp - 1);
    }
  }
}

// Inputs {x}: dense, contiguous, 2-D, floating, fewer than 2^31 elements (the
// frontend checks). Outputs {crow_indices i32 [rows + 1], col_indices i32
// [nnz], values [nnz] in x's dtype}.
std::vector<Tensor> relu_to_csr(const std::vector<Tensor>& in, const Attrs& a) {
  check_inputs(in, 1, kOp);
  check_contiguous_cuda(in[0], kOp, "input");
  check_ndim(in[0], 2, kOp, "input");
  const Tensor& x = in[0];
  const double threshold = a.get_double("threshold");
  COPPICE_CHECK(threshold >= 0.0, kOp, ": the threshold must be >= 0, got ", threshold);
  COPPICE_CHECK(x.numel() <= INT32_MAX, kOp, ": the CUDA kernel takes fewer than 2^31 elements, got ", x.numel());
  const Device device = x.device();
  // Said before any work is queued, so that the capture fails with this reason.
  COPPICE_CHECK(!capturing(device.index), kOp,
                ": reads nnz back to the host to size its outputs, which a CUDA graph capture cannot record");
  const int64_t rows = x.size(0), cols = x.size(1);
  const TensorOptions i32(DType::kI32, device);
  Tensor crow = Tensor::empty({rows + 1}, i32);
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  return dispatch_floating(x.dtype(), kOp, [&](auto tag) -> std::vector<Tensor> {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const C bound = sparsify_detail::relu_keep_bound<C>(threshold);
    // Every row starts on a 16-byte boundary when the base does and a row
    // holds whole chunks.
    const bool vectorized =
        reinterpret_cast<uintptr_t>(xp) % sizeof(Chunk<T>) == 0 && cols % Chunk<T>::kSize == 0;
    const unsigned grid = grid_for(rows * kWarp);
    Tensor counts = Tensor::empty({rows + 1}, i32);
    count_kernel<T><<<grid, kThreads, 0, stream>>>(xp, rows, cols, bound, vectorized, counts.data<int32_t>());
    check_launch(kOp);
    // Exclusive scan of rows + 1 counts: the row pointers, nnz last.
    const int n = static_cast<int>(rows + 1);
    size_t temp_bytes = 0;
    COPPICE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts.data<int32_t>(),
                                                     crow.data<int32_t>(), n, stream),
                       kOp);
    Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, TensorOptions(DType::kU8, device));
    COPPICE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), temp_bytes, counts.data<int32_t>(),
                                                     crow.data<int32_t>(), n, stream),
                       kOp);
    // The one read back: nnz sizes the outputs.
    int32_t nnz = 0;
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(&nnz, crow.data<int32_t>() + rows, sizeof(nnz), cudaMemcpyDeviceToHost,
                                       stream),
                       kOp);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), kOp);
    Tensor col = Tensor::empty({nnz}, i32);
    Tensor val = Tensor::empty({nnz}, x.options());
    if (nnz > 0) {
      write_kernel<T><<<grid, kThreads, 0, stream>>>(xp, rows, cols, bound, vectorized, crow.data<int32_t>(),
                                                     col.data<int32_t>(), static_cast<T*>(val.data_ptr()));
      check_launch(kOp);
    }
    return {crow, col, val};
  });
}

const KernelRegistrar kReluToCsr(kOp, DeviceType::kCuda, {"dense"}, relu_to_csr);

}  // namespace
}  // namespace coppice::cuda
