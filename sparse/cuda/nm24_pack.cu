// The device kernels that build and take apart 2:4 (and n:m) operands
// (nm24_pack.h): metadata words, the transposable check, the transposed
// pack of S^T, the selection by magnitude and by mask, the transposable mask,
// and the gather and scatter between n:m values and dense rows. The products
// that read what these write are nm24_mma.cu's and nm24_wgmma.cu's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "sparse/cuda/nm24_pack.h"
#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/cuda_check.h"

namespace coppice::sparse_cuda {
namespace {

// The 4-bit field of one group: its two in-group indices, first in the low bits.
__device__ __forceinline__ uint32_t field(uint32_t first, uint32_t second) { return first | (second << 2); }

// One thread per metadata word (row, 16 columns): four groups' index pairs.
__global__ void metadata_kernel(const uint8_t* __restrict__ indices, uint16_t* __restrict__ meta, int64_t words) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= words) return;
  // A row holds a whole number of words, so word w's groups are 4w..4w+3 and
  // its index bytes 8w..8w+7.
  const uint2 bytes = *reinterpret_cast<const uint2*>(indices + 8 * w);
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t pair = ((j < 2 ? bytes.x : bytes.y) >> (16 * (j % 2))) & 0xFFFF;
    word |= field(pair & 3, (pair >> 8) & 3) << (4 * j);
  }
  meta[w] = static_cast<uint16_t>(word);
}

// Whether S stores column `col` (0..3 within its group) in the group of row
// `row` that holds it, and at which slot: -1 if not.
__device__ __forceinline__ int slot_of(const uint8_t* __restrict__ indices, int64_t half_cols, int64_t row,
                                       int64_t col) {
  const int64_t base = row * half_cols + (col / 4) * 2;
  const int in_group = static_cast<int>(col % 4);
  if (indices[base] == in_group) return 0;
  if (indices[base + 1] == in_group) return 1;
  return -1;
}

// One thread per (column of S, four rows): flags a count above two.
__global__ void check_transposable_kernel(const uint8_t* __restrict__ indices, int64_t rows, int64_t cols, int* flag) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= (rows / 4) * cols) return;
  const int64_t col = i % cols, row0 = (i / cols) * 4;
  int count = 0;
  for (int r = 0; r < 4; ++r) count += slot_of(indices, cols / 2, row0 + r, col) >= 0;
  if (count > 2) atomicExch(flag, 1);
}

// S^T's hardware form, a tile of 64 x 64 of S a block: the tile's stored
// values and indices are read in rows (coalesced) into a dense tile with a
// stored flag per position, then each thread writes one row of S^T over 16
// of the tile's rows (8 stored values, 16 bytes, and one metadata word).
// Reading S's indices column-wise instead, a thread per (column, 16 rows),
// took 0.18 ms for a 4096 x 4096 weight, more than the product it feeds
// (H200).
constexpr int kPackTile = 64;

template <typename T>
__global__ void __launch_bounds__(256)
    pack_transposed_kernel(const T* __restrict__ values, const uint8_t* __restrict__ indices, T* __restrict__ values_t,
                           uint16_t* __restrict__ meta_t, int64_t rows, int64_t cols) {
  __shared__ T tile[kPackTile][kPackTile + 2];
  __shared__ uint8_t stored[kPackTile][kPackTile + 4];
  const int tid = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kPackTile, c0 = static_cast<int64_t>(blockIdx.x) * kPackTile;
  const int64_t half_cols = cols / 2;
  for (int k = tid; k < kPackTile * kPackTile; k += 256) {
    tile[k / kPackTile][k % kPackTile] = from_float<T>(0.0f);
    stored[k / kPackTile][k % kPackTile] = 0;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPackTile * kPackTile / 2 / 256; ++i) {  // the tile's stored slots, row by row
    const int k = tid + 256 * i, r = k / (kPackTile / 2), slot = k % (kPackTile / 2);
    const int64_t at = (r0 + r) * half_cols + c0 / 2 + slot;
    const int col = (slot / 2) * 4 + indices[at];
    tile[r][col] = values[at];
    stored[r][col] = 1;
  }
  __syncthreads();
  // Thread (c, chunk): row c0 + c of S^T, its stored values of S's rows
  // r0 + 16 chunk .. + 15. A 4x4 tile of a 2:4 pattern stores 8 entries; with
  // at most 2 per column (nm24_check_transposable) every column holds
  // exactly 2. (Named registers, not arrays indexed by a count: those went
  // to local memory.)
  const int c = tid / 4, chunk = tid % 4;
  alignas(16) T out[8];
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int first = -1, second = -1;
    T v0 = from_float<T>(0.0f), v1 = from_float<T>(0.0f);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = chunk * 16 + 4 * j + r;
      if (stored[row][c] == 0) continue;
      if (first < 0) {
        first = r;
        v0 = tile[row][c];
      } else if (second < 0) {
        second = r;
        v1 = tile[row][c];
      }
    }
    if (first < 0) first = 0;
    if (second < 0) second = first == 1 ? 2 : 1;
    out[2 * j] = v0;
    out[2 * j + 1] = v1;
    word |= field(first, second) << (4 * j);
  }
  *reinterpret_cast<uint4*>(values_t + (c0 + c) * (rows / 2) + r0 / 2 + chunk * 8) =
      *reinterpret_cast<const uint4*>(out);
  meta_t[(c0 + c) * (rows / 16) + r0 / 16 + chunk] = static_cast<uint16_t>(word);
}

// |v| for ranking, NaN above everything (nm_compress's order).
template <typename T>
__device__ __forceinline__ float magnitude(T v, bool& nan) {
  const float f = to_float(v);
  nan = isnan(f);
  return fabsf(f);
}

// One thread per group of four: the two largest |x| by rank (ties to the
// lower index), written in increasing column order.
template <typename T>
__global__ void select_kernel(const T* __restrict__ dense, T* __restrict__ values, uint8_t* __restrict__ indices,
                              uint16_t* __restrict__ meta, int64_t groups) {
  const int64_t gi = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Lanes past the end stay to the shuffles below (every lane takes part).
  const bool valid = gi < groups;
  T x[4];
  float mag[4];
  bool nan[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    x[j] = valid ? dense[gi * 4 + j] : from_float<T>(0.0f);
    mag[j] = magnitude(x[j], nan[j]);
  }
  int kept[2], n = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int beaten_by = 0;
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      if (o == j) continue;
      const bool o_first = nan[o] != nan[j] ? nan[o] : (nan[o] || mag[o] == mag[j]) ? o < j : mag[o] > mag[j];
      beaten_by += o_first;
    }
    if (beaten_by < 2 && n < 2) kept[n++] = j;
  }
  if (valid) {
    values[gi * 2] = x[kept[0]];
    values[gi * 2 + 1] = x[kept[1]];
    indices[gi * 2] = static_cast<uint8_t>(kept[0]);
    indices[gi * 2 + 1] = static_cast<uint8_t>(kept[1]);
  }
  if (meta == nullptr) return;
  // The four groups of a metadata word sit in consecutive lanes (a row holds
  // whole words): lane 4w + j contributes group j's field.
  const uint32_t mine = field(kept[0], kept[1]) << (4 * (gi % 4));
  uint32_t word = mine;
  word |= __shfl_down_sync(0xFFFFFFFF, mine, 1, 4);
  word |= __shfl_down_sync(0xFFFFFFFF, mine, 2, 4);
  word |= __shfl_down_sync(0xFFFFFFFF, mine, 3, 4);
  if (valid && gi % 4 == 0) meta[gi / 4] = static_cast<uint16_t>(word);
}

// One thread per 4 x 4 tile: the transposable 2:4 mask of
// sparse/nm_transposable.h, computed as its CPU twin computes it (the same
// patterns in the same order, the same scores summed in f64 in the same
// order, ties to the earlier pattern), so the two agree bit for bit.
struct TileScore {
  int nans = 0, infs = 0;
  double finite = 0.0;
  __device__ void add(double v) {
    if (isnan(v)) {
      ++nans;
    } else if (isinf(v)) {
      ++infs;
    } else {
      finite += fabs(v);
    }
  }
  __device__ void add(const TileScore& s) {
    nans += s.nans;
    infs += s.infs;
    finite += s.finite;
  }
  __device__ bool beats(const TileScore& s) const {
    if (nans != s.nans) return nans > s.nans;
    if (infs != s.infs) return infs > s.infs;
    return finite > s.finite;
  }
};

template <typename T>
__device__ __forceinline__ double as_double(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<double>(to_float(v));
  }
}

// The two-of-four choices of a tile row in lexicographic order: {0,1},
// {0,2}, {0,3}, {1,2}, {1,3}, {2,3}.
__host__ __device__ constexpr uint32_t pair_bits(int c) {
  return (0x3 | (0x5 << 4) | (0x9 << 8) | (0x6 << 12) | (0xA << 16) | (0xC << 20)) >> (4 * c) & 0xF;
}

// The 90 transposable 2:4 tile patterns (one choice per row) in the CPU
// twin's order: depth first over rows, each row's choices in order, every
// column taking two.
struct TilePatterns {
  int choice[90][4] = {};
};
__host__ __device__ constexpr TilePatterns tile_patterns() {
  TilePatterns p;
  int k = 0;
  for (int c0 = 0; c0 < 6; ++c0)
    for (int c1 = 0; c1 < 6; ++c1)
      for (int c2 = 0; c2 < 6; ++c2)
        for (int c3 = 0; c3 < 6; ++c3) {
          bool fits = true;
          for (int j = 0; j < 4; ++j) {
            const int count = (pair_bits(c0) >> j & 1) + (pair_bits(c1) >> j & 1) + (pair_bits(c2) >> j & 1) +
                              (pair_bits(c3) >> j & 1);
            fits = fits && count == 2;
          }
          if (fits && k < 90) {
            p.choice[k][0] = c0, p.choice[k][1] = c1, p.choice[k][2] = c2, p.choice[k][3] = c3;
            ++k;
          }
        }
  return p;
}

// The patterns unrolled at compile time, so that the row scores stay in
// registers (a loop over choices indexed them from local memory and took
// 0.35 s a step for two 4096-wide layers, H200).
template <typename T>
__global__ void transposable_mask_kernel(const T* __restrict__ w, bool* __restrict__ mask, int64_t rows, int64_t cols) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t tile_cols = cols / 4;
  if (t >= rows / 4 * tile_cols) return;
  const int64_t origin = (t / tile_cols) * 4 * cols + (t % tile_cols) * 4;
  TileScore row_scores[4][6];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    double v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = as_double(w[origin + r * cols + j]);
#pragma unroll
    for (int c = 0; c < 6; ++c) {
      constexpr int kFirst[6] = {0, 0, 0, 1, 1, 2}, kSecond[6] = {1, 2, 3, 2, 3, 3};
      TileScore s;
      s.add(v[kFirst[c]]);
      s.add(v[kSecond[c]]);
      row_scores[r][c] = s;
    }
  }
  constexpr TilePatterns kPatterns = tile_patterns();
  int best = 0;
  TileScore best_score;
#pragma unroll
  for (int k = 0; k < 90; ++k) {
    TileScore s;
#pragma unroll
    for (int r = 0; r < 4; ++r) s.add(row_scores[r][kPatterns.choice[k][r]]);
    if (k == 0 || s.beats(best_score)) {  // strictly better: ties keep the earlier pattern
      best = k;
      best_score = s;
    }
  }
  uint32_t keep = 0;  // the winner's four row choices, 4 bits a row
#pragma unroll
  for (int k = 0; k < 90; ++k) {
    if (k == best) {
#pragma unroll
      for (int r = 0; r < 4; ++r) keep |= pair_bits(kPatterns.choice[k][r]) << (4 * r);
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j) mask[origin + r * cols + j] = ((keep >> (4 * r + j)) & 1u) != 0;
}

// One thread per group of four: the entries `mask` keeps, then explicit
// zeros at the lowest free positions up to two (nm_compress with a mask, as
// its host loop does it); a group keeping more than two lowers *bad_group to
// its index.
template <typename T>
__global__ void masked_select_kernel(const T* __restrict__ dense, const bool* __restrict__ mask, T* __restrict__ values,
                                     uint8_t* __restrict__ indices, int64_t groups, unsigned long long* bad_group) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  bool keep[4];
  int count = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    keep[j] = mask[g * 4 + j];
    count += keep[j];
  }
  if (count > 2) {
    atomicMin(bad_group, static_cast<unsigned long long>(g));
    return;
  }
  int fill = 2 - count, s = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (s == 2) break;
    if (keep[j] || fill > 0) {
      if (!keep[j]) --fill;
      values[g * 2 + s] = keep[j] ? dense[g * 4 + j] : from_float<T>(0.0f);
      indices[g * 2 + s] = static_cast<uint8_t>(j);
      ++s;
    }
  }
}

template <typename T>
__global__ void gather_kernel(const T* __restrict__ product, const uint8_t* __restrict__ indices,
                              T* __restrict__ values, int64_t slots, int n, int m) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= slots) return;
  values[s] = product[(s / n) * m + indices[s]];
}

template <typename T>
__global__ void scatter_kernel(const T* __restrict__ values, const uint8_t* __restrict__ indices, T* __restrict__ dense,
                               int64_t slots, int n, int m) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= slots) return;
  dense[(s / n) * m + indices[s]] = values[s];
}

unsigned blocks_for(int64_t threads, int per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

}  // namespace

void nm24_metadata(const uint8_t* indices, uint16_t* meta, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t words = rows * (cols / 16);
  if (words == 0) return;
  metadata_kernel<<<blocks_for(words, 256), 256, 0, stream>>>(indices, meta, words);
  cuda::check_launch("nm24 metadata");
}

void nm24_check_transposable(const uint8_t* indices, int64_t rows, int64_t cols, int* flag, cudaStream_t stream) {
  const int64_t threads = (rows / 4) * cols;
  if (threads == 0) return;
  check_transposable_kernel<<<blocks_for(threads, 256), 256, 0, stream>>>(indices, rows, cols, flag);
  cuda::check_launch("nm24 transposable check");
}

template <typename T>
void nm24_pack_transposed(const T* values, const uint8_t* indices, T* values_t, uint16_t* meta_t, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>(cols / kPackTile), static_cast<unsigned>(rows / kPackTile));
  pack_transposed_kernel<T><<<grid, 256, 0, stream>>>(values, indices, values_t, meta_t, rows, cols);
  cuda::check_launch("nm24 transposed pack");
}

template <typename T>
void nm24_select(const T* dense, T* values, uint8_t* indices, uint16_t* meta, int64_t rows, int64_t cols,
                 cudaStream_t stream) {
  const int64_t groups = rows * (cols / 4);
  if (groups == 0) return;
  // Blocks of 256 threads hold whole metadata words (4 groups each).
  select_kernel<T><<<blocks_for(groups, 256), 256, 0, stream>>>(dense, values, indices, meta, groups);
  cuda::check_launch("nm24 selection");
}

template <typename T>
void nm24_transposable_mask(const T* w, bool* mask, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t tiles = (rows / 4) * (cols / 4);
  if (tiles == 0) return;
  transposable_mask_kernel<T><<<blocks_for(tiles, 128), 128, 0, stream>>>(w, mask, rows, cols);
  cuda::check_launch("nm24 transposable mask");
}

template <typename T>
void nm24_select_masked(const T* dense, const bool* mask, T* values, uint8_t* indices, int64_t rows, int64_t cols,
                        unsigned long long* bad_group, cudaStream_t stream) {
  const int64_t groups = rows * (cols / 4);
  if (groups == 0) return;
  masked_select_kernel<T><<<blocks_for(groups, 256), 256, 0, stream>>>(dense, mask, values, indices, groups, bad_group);
  cuda::check_launch("nm24 masked selection");
}

template <typename T>
void nm_gather(const T* product, const uint8_t* indices, T* values, int64_t rows, int64_t cols, int n, int m,
               cudaStream_t stream) {
  const int64_t slots = rows * (cols / m) * n;
  if (slots == 0) return;
  gather_kernel<T><<<blocks_for(slots, 256), 256, 0, stream>>>(product, indices, values, slots, n, m);
  cuda::check_launch("nm gather");
}

template <typename T>
void nm_scatter(const T* values, const uint8_t* indices, T* dense, int64_t rows, int64_t cols, int n, int m,
                cudaStream_t stream) {
  if (rows * cols == 0) return;
  COPPICE_CUDA_CHECK(cudaMemsetAsync(dense, 0, static_cast<size_t>(rows * cols) * sizeof(T), stream), "nm scatter");
  const int64_t slots = rows * (cols / m) * n;
  scatter_kernel<T><<<blocks_for(slots, 256), 256, 0, stream>>>(values, indices, dense, slots, n, m);
  cuda::check_launch("nm scatter");
}

template void nm24_pack_transposed<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, uint16_t*,
                                                  int64_t, int64_t, cudaStream_t);
template void nm24_pack_transposed<__half>(const __half*, const uint8_t*, __half*, uint16_t*, int64_t, int64_t,
                                           cudaStream_t);
template void nm24_select<float>(const float*, float*, uint8_t*, uint16_t*, int64_t, int64_t, cudaStream_t);
template void nm24_select<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, uint8_t*, uint16_t*, int64_t, int64_t,
                                         cudaStream_t);
template void nm24_select<__half>(const __half*, __half*, uint8_t*, uint16_t*, int64_t, int64_t, cudaStream_t);
template void nm_gather<float>(const float*, const uint8_t*, float*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_gather<double>(const double*, const uint8_t*, double*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_gather<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int64_t, int64_t, int, int,
                                       cudaStream_t);
template void nm_gather<__half>(const __half*, const uint8_t*, __half*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_scatter<float>(const float*, const uint8_t*, float*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_scatter<double>(const double*, const uint8_t*, double*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_scatter<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int64_t, int64_t, int,
                                        int, cudaStream_t);
template void nm_scatter<__half>(const __half*, const uint8_t*, __half*, int64_t, int64_t, int, int, cudaStream_t);

template void nm24_transposable_mask<float>(const float*, bool*, int64_t, int64_t, cudaStream_t);
template void nm24_transposable_mask<double>(const double*, bool*, int64_t, int64_t, cudaStream_t);
template void nm24_transposable_mask<__nv_bfloat16>(const __nv_bfloat16*, bool*, int64_t, int64_t, cudaStream_t);
template void nm24_transposable_mask<__half>(const __half*, bool*, int64_t, int64_t, cudaStream_t);

template void nm24_select_masked<float>(const float*, const bool*, float*, uint8_t*, int64_t, int64_t,
                                        unsigned long long*, cudaStream_t);
template void nm24_select_masked<double>(const double*, const bool*, double*, uint8_t*, int64_t, int64_t,
                                         unsigned long long*, cudaStream_t);
template void nm24_select_masked<__nv_bfloat16>(const __nv_bfloat16*, const bool*, __nv_bfloat16*, uint8_t*, int64_t,
                                                int64_t, unsigned long long*, cudaStream_t);
template void nm24_select_masked<__half>(const __half*, const bool*, __half*, uint8_t*, int64_t, int64_t,
                                         unsigned long long*, cudaStream_t);

}  // namespace coppice::sparse_cuda
