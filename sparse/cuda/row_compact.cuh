// Row compaction of a dense 2-D tensor into CSR on the device: the kernels
// behind dense_mask_to_csr (sparse/cuda/dense_mask_to_csr.cu) and relu_to_csr
// (sparsifiers/cuda/relu_to_csr.cu), which differ only in which entries they
// keep. `Keep` says that (a mask, a threshold); this header does the rest.
//
// Two passes over the rows, not one as on the CPU: a CSR's column and value
// arrays are nnz long and each row's entries start where the rows before it
// end, so no thread can write an entry before every earlier row is counted,
// and the output cannot even be allocated before nnz is known. Hence: count
// the kept entries of every row, exclusive-scan the counts into the row
// pointers (CUB), read nnz back to the host once, allocate, then write. Both
// passes give a row to a warp; each lane takes 16 consecutive bytes of values
// per step (one vector load where aligned), and a warp-wide prefix sum of the
// lanes' counts places each kept entry, so a row's entries come out in
// ascending columns.
//
// A Keep is a copyable struct with
//   __device__ uint32_t bits(int64_t r, int64_t c, Chunk<T>* chunk) const;
// returning bit j set when column c + j (< cols) of row r is kept, and, when
// `chunk` is not null, filling chunk->v[j] with the stored value of every kept
// column (the count pass passes null: a mask then need not read the values).
#pragma once

#include <cstdint>
#include <cub/device/device_scan.cuh>
#include <vector>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/warp.cuh"

namespace coppice::cuda::row_compact {

// One lane's step: 16 bytes of consecutive elements.
template <typename T>
struct alignas(16) Chunk {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Loads the chunk of `row` starting at column c: a vector load when
// `vectorized` and the chunk is whole, else element by element (columns at
// or past `cols` are left unset).
template <typename T>
__device__ inline void load_chunk(const T* __restrict__ row, int64_t c, int64_t cols, bool vectorized,
                                  Chunk<T>& chunk) {
  constexpr int kSize = Chunk<T>::kSize;
  if (vectorized && c + kSize <= cols) {
    chunk = *reinterpret_cast<const Chunk<T>*>(row + c);
  } else {
#pragma unroll
    for (int j = 0; j < kSize; ++j) {
      if (c + j < cols) chunk.v[j] = row[c + j];
    }
  }
}

// Whether every row of a contiguous [rows, cols] tensor at `p` starts on a
// 16-byte boundary and holds whole chunks.
template <typename T>
inline bool vectorizable(const T* p, int64_t cols) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Chunk<T>) == 0 && cols % Chunk<T>::kSize == 0;
}

__device__ inline int64_t warp_id() { return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; }
__device__ inline int64_t warp_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp; }

// counts[r] = kept entries of row r, counts[rows] = 0 (so that the exclusive
// scan of rows + 1 counts ends in nnz).
template <typename T, typename Keep>
__global__ void count_kernel(Keep keep, int64_t rows, int64_t cols, int32_t* __restrict__ counts) {
  constexpr int kStep = kWarp * Chunk<T>::kSize;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = warp_id(); r < rows; r += warp_count()) {
    int count = 0;
    for (int64_t c = static_cast<int64_t>(lane) * Chunk<T>::kSize; c < cols; c += kStep) {
      count += __popc(keep.bits(r, c, static_cast<Chunk<T>*>(nullptr)));
    }
    for (int d = kWarp / 2; d > 0; d /= 2) count += shfl_down(count, d);
    if (lane == 0) counts[r] = count;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) counts[rows] = 0;
}

// Writes each row's kept columns and values from crow[r] on, in column order.
template <typename T, typename Keep>
__global__ void write_kernel(Keep keep, int64_t rows, int64_t cols, const int32_t* __restrict__ crow,
                             int32_t* __restrict__ col, T* __restrict__ val) {
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int kSize = Chunk<T>::kSize;
  constexpr int kStep = kWarp * kSize;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t r = warp_id(); r < rows; r += warp_count()) {
    int32_t next = crow[r];                               // where this step's first kept entry goes
    for (int64_t base = 0; base < cols; base += kStep) {  // the same trip count on every lane
      const int64_t c = base + static_cast<int64_t>(lane) * kSize;
      Chunk<T> chunk;
      const uint32_t bits = c < cols ? keep.bits(r, c, &chunk) : 0u;
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
          val[at] = chunk.v[j];
          ++at;
        }
      }
      next += __shfl_sync(kFull, inclusive, kWarp - 1);
    }
  }
}

// The CSR parts {crow i32 [rows + 1], col i32 [nnz], values [nnz] (`values`
// options)} of the entries `keep` keeps in a [rows, cols] tensor on `device`
// (fewer than 2^31 elements: the caller checks). Reads nnz back to the host
// once, so it cannot run inside a CUDA graph capture, and says so.
template <typename T, typename Keep>
std::vector<Tensor> compact_rows(const Keep& keep, int64_t rows, int64_t cols, Device device,
                                 const TensorOptions& values, const char* op) {
  // Said before any work is queued, so that the capture fails with this reason.
  COPPICE_CHECK(!capturing(device.index), op,
                ": reads nnz back to the host to size its outputs, which a CUDA graph capture cannot record");
  const TensorOptions i32(DType::kI32, device);
  Tensor crow = Tensor::empty({rows + 1}, i32);
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  const unsigned grid = grid_for(rows * kWarp);
  Tensor counts = Tensor::empty({rows + 1}, i32);
  count_kernel<T, Keep><<<grid, kThreads, 0, stream>>>(keep, rows, cols, counts.data<int32_t>());
  check_launch(op);
  // Exclusive scan of rows + 1 counts: the row pointers, nnz last.
  const int n = static_cast<int>(rows + 1);
  size_t temp_bytes = 0;
  COPPICE_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts.data<int32_t>(), crow.data<int32_t>(), n, stream), op);
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, TensorOptions(DType::kU8, device));
  COPPICE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), temp_bytes, counts.data<int32_t>(),
                                                   crow.data<int32_t>(), n, stream),
                     op);
  // The one read back: nnz sizes the outputs.
  int32_t nnz = 0;
  COPPICE_CUDA_CHECK(cudaMemcpyAsync(&nnz, crow.data<int32_t>() + rows, sizeof(nnz), cudaMemcpyDeviceToHost, stream),
                     op);
  COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
  Tensor col = Tensor::empty({nnz}, i32);
  Tensor val = Tensor::empty({nnz}, values);
  if (nnz > 0) {
    write_kernel<T, Keep><<<grid, kThreads, 0, stream>>>(keep, rows, cols, crow.data<int32_t>(), col.data<int32_t>(),
                                                         static_cast<T*>(val.data_ptr()));
    check_launch(op);
  }
  return {crow, col, val};
}

}  // namespace coppice::cuda::row_compact
