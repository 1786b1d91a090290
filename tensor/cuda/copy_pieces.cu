// PieceCopy (tensor/backend.h) in one launch per kMaxPieces pieces: cat of
// contiguous tensors, and a gradient exchange's bucket filled from its
// leaves' gradients (distributed/grad_sync.cc), where a copy per piece cost a
// launch, and its host time, per piece. The twin is copy_pieces_on_host
// (tensor/backend.cc): the same bytes land in the same places.
//
// Bytes move in units of the widest of 16, 8, 4, 2 or 1 bytes that every
// address, row length and offset of the launch is a multiple of (a bucket of
// bf16 gradients moves 16 bytes a thread when each gradient's size is a
// multiple of 8 elements). The piece table travels as a kernel parameter
// (nothing to copy to the device, capture-safe); each piece is cut into
// chunks of kChunk units, one block a chunk.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tensor/cuda/copy_pieces.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace coppice::cuda {
namespace {

constexpr int kMaxPieces = 64;
constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 8;  // units a block moves

struct PieceTable {
  const void* src[kMaxPieces];
  int64_t row_units[kMaxPieces];
  int64_t col_units[kMaxPieces];
  int64_t block_end[kMaxPieces];  // exclusive end of piece k's blocks
  int count;
  char* dst;
  int64_t rows;
  int64_t dst_row_units;
};

template <typename U>
__global__ void copy_pieces_kernel(PieceTable t) {
  const int64_t b = blockIdx.x;
  int k = 0;
  while (k + 1 < t.count && b >= t.block_end[k]) ++k;
  const int64_t first = k == 0 ? 0 : t.block_end[k - 1];
  const int64_t n = t.row_units[k];
  const int64_t total = n * t.rows;
  const int64_t begin = (b - first) * kChunk;
  const int64_t end = begin + kChunk < total ? begin + kChunk : total;
  const U* __restrict__ src = static_cast<const U*>(t.src[k]);
  U* __restrict__ dst = reinterpret_cast<U*>(t.dst) + t.col_units[k];
  if (t.rows == 1) {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const int64_t r = i / n;
    dst[r * t.dst_row_units + (i - r * n)] = src[i];
  }
}

// The widest unit every address and length of the copy is a multiple of.
int64_t unit_bytes(const PieceCopy& c) {
  uint64_t bits = reinterpret_cast<uintptr_t>(c.dst) | static_cast<uint64_t>(c.dst_row_bytes);
  for (size_t k = 0; k < c.src.size(); ++k) {
    bits |= reinterpret_cast<uintptr_t>(c.src[k]) | static_cast<uint64_t>(c.row_bytes[k]) |
            static_cast<uint64_t>(c.col_bytes[k]);
  }
  for (int64_t u : {16, 8, 4, 2}) {
    if (bits % static_cast<uint64_t>(u) == 0) return u;
  }
  return 1;
}

template <typename U>
void launch(const PieceCopy& c, size_t first, size_t count, cudaStream_t stream) {
  constexpr int64_t u = sizeof(U);
  PieceTable t{};
  t.dst = static_cast<char*>(c.dst);
  t.rows = c.rows;
  t.dst_row_units = c.dst_row_bytes / u;
  int64_t blocks = 0;
  for (size_t j = 0; j < count; ++j) {
    const size_t k = first + j;
    t.src[j] = c.src[k];
    t.row_units[j] = c.row_bytes[k] / u;
    t.col_units[j] = c.col_bytes[k] / u;
    blocks += (t.row_units[j] * c.rows + kChunk - 1) / kChunk;
    t.block_end[j] = blocks;
  }
  t.count = static_cast<int>(count);
  COPPICE_CHECK(blocks < (int64_t{1} << 31), "copy_pieces: ", blocks, " blocks exceed one launch's grid");
  copy_pieces_kernel<U><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(t);
  COPPICE_CUDA_CHECK(cudaGetLastError(), "copy_pieces");
}

}  // namespace

void copy_pieces(int device, const PieceCopy& c) {
  COPPICE_CHECK(c.src.size() == c.row_bytes.size() && c.src.size() == c.col_bytes.size(), "copy_pieces: ", c.src.size(),
                " sources but ", c.row_bytes.size(), " row lengths and ", c.col_bytes.size(), " offsets");
  // Empty pieces launch nothing (a launch needs at least one block per piece it lists).
  std::vector<size_t> live;
  for (size_t k = 0; k < c.src.size(); ++k) {
    if (c.row_bytes[k] > 0 && c.rows > 0) live.push_back(k);
  }
  if (live.empty()) return;
  PieceCopy kept;
  kept.dst = c.dst;
  kept.rows = c.rows;
  kept.dst_row_bytes = c.dst_row_bytes;
  for (size_t k : live) {
    kept.src.push_back(c.src[k]);
    kept.row_bytes.push_back(c.row_bytes[k]);
    kept.col_bytes.push_back(c.col_bytes[k]);
  }
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const int64_t unit = unit_bytes(kept);
  for (size_t first = 0; first < kept.src.size(); first += kMaxPieces) {
    const size_t count = std::min<size_t>(kMaxPieces, kept.src.size() - first);
    switch (unit) {
      case 16: launch<uint4>(kept, first, count, stream); break;
      case 8: launch<uint2>(kept, first, count, stream); break;
      case 4: launch<uint32_t>(kept, first, count, stream); break;
      case 2: launch<uint16_t>(kept, first, count, stream); break;
      default: launch<uint8_t>(kept, first, count, stream); break;
    }
  }
}

}  // namespace coppice::cuda
