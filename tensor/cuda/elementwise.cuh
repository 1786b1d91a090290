// One templated elementwise kernel for every pointwise primitive (fill_,
// copy_, the unary and binary ops, where).
//
// The host side builds a StridedIndexer over the output shape (operands
// broadcast, adjacent contiguous dimensions merged); when every operand turns
// out to be contiguous the kernel skips the index arithmetic, and one or two
// merged dimensions take a kernel with at most one 32-bit division.
//
// 16-byte packs: the unary and binary ops on bf16/f16 operands that are all
// contiguous, of one shape and 16-byte aligned move 8 elements per load and
// store (launch_packed); the same element function, so the same bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/strided_indexer.h"
#include "tensor/tensor.h"

namespace coppice::cuda {

// `f(offsets)` is called once per output element with the element offsets of
// every operand (output first).
template <typename F>
__global__ void elementwise_kernel(int64_t n, StridedIndexer ix, bool contiguous, F f) {
  COPPICE_KERNEL_LOOP(i, n) {
    int64_t off[kMaxIndexerOperands];
    if (contiguous) {
#pragma unroll
      for (int k = 0; k < kMaxIndexerOperands; ++k) off[k] = i;
    } else {
      ix.offsets(i, off);
    }
    f(off);
  }
}

// Every operand contiguous: no index arithmetic at all, and each thread
// takes kIlp elements a block apart, so that its loads are independent and
// every warp's accesses stay coalesced.
constexpr int kIlp = 4;

template <typename F>
__global__ void contiguous_kernel(int64_t n, F f) {
  const int64_t tile = static_cast<int64_t>(blockDim.x) * kIlp;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * tile; base < n; base += tile * gridDim.x) {
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < n) {
        int64_t off[kMaxIndexerOperands];
#pragma unroll
        for (int k = 0; k < kMaxIndexerOperands; ++k) off[k] = i;
        f(off);
      }
    }
  }
}

// One or two dimensions after merging, which is what the common broadcasts
// leave (a scalar: stride 0; a bias row over a matrix; a column): the offsets
// of element i are r * outer + c * inner with (r, c) = divmod(i, cols), one
// 32-bit division where the size allows, and kIlp elements per thread as
// above. The generic kernel's per-dimension 64-bit div/mod made a scalar
// compare of 16M f32 (relu's backward) 8x slower than a copy.
struct SmallRankIndexer {
  int64_t cols = 1;  // the inner size (two dimensions)
  int64_t outer[kMaxIndexerOperands] = {}, inner[kMaxIndexerOperands] = {};
};

template <bool kTwoDims, typename F>
__global__ void small_rank_kernel(int64_t n, SmallRankIndexer ix, F f) {
  const int64_t tile = static_cast<int64_t>(blockDim.x) * kIlp;
  const bool narrow = n <= static_cast<int64_t>(UINT32_MAX);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * tile; base < n; base += tile * gridDim.x) {
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < n) {
        int64_t r = 0, c = i;
        if constexpr (kTwoDims) {
          r = narrow ? static_cast<int64_t>(static_cast<uint32_t>(i) / static_cast<uint32_t>(ix.cols)) : i / ix.cols;
          c = i - r * ix.cols;
        }
        int64_t off[kMaxIndexerOperands];
#pragma unroll
        for (int k = 0; k < kMaxIndexerOperands; ++k) off[k] = r * ix.outer[k] + c * ix.inner[k];
        f(off);
      }
    }
  }
}

// Runs `f` over `shape` on `device`'s stream; operands[0] is the output.
template <typename F>
void launch_elementwise(std::string_view op, int device, const Shape& shape, const std::vector<const Tensor*>& operands,
                        F f) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  StridedIndexer ix = make_indexer(shape, operands);
  bool contiguous = ix.ndim == 1;
  for (int k = 0; k < ix.noperands && contiguous; ++k) contiguous = ix.strides[k][0] == 1;
  DeviceGuard guard(device);
  const unsigned ilp_grid = grid_for((n + kIlp - 1) / kIlp);
  if (contiguous) {
    contiguous_kernel<<<ilp_grid, kThreads, 0, current_stream(device)>>>(n, f);
  } else if (ix.ndim <= 2) {
    SmallRankIndexer small;
    const int inner_dim = ix.ndim - 1;
    small.cols = ix.sizes[inner_dim];
    for (int k = 0; k < ix.noperands; ++k) {
      small.inner[k] = ix.strides[k][inner_dim];
      small.outer[k] = ix.ndim == 2 ? ix.strides[k][0] : 0;
    }
    if (ix.ndim == 2) {
      small_rank_kernel<true><<<ilp_grid, kThreads, 0, current_stream(device)>>>(n, small, f);
    } else {
      small_rank_kernel<false><<<ilp_grid, kThreads, 0, current_stream(device)>>>(n, small, f);
    }
  } else {
    elementwise_kernel<<<grid_for(n), kThreads, 0, current_stream(device)>>>(n, ix, false, f);
  }
  check_launch(op);
}

// ---- 16-byte packs ---------------------------------------------------------------

// 16 bytes of T: what one vector load or store moves.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int kN = static_cast<int>(16 / sizeof(T));
  T v[kN];
};

// p must be 16-byte aligned. Through uint4 so that the access is one
// 128-bit instruction whatever T's own alignment.
template <typename T>
__device__ inline Pack16<T> load16(const T* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  Pack16<T> out;
  memcpy(&out, &raw, sizeof(raw));
  return out;
}

template <typename T>
__device__ inline void store16(T* p, const Pack16<T>& v) {
  uint4 raw;
  memcpy(&raw, &v, sizeof(raw));
  *reinterpret_cast<uint4*>(p) = raw;
}

// The CUDA type whose pairs (mma_sync.cuh's pack2 and unpack2) convert T's
// values to and from C in hardware: bf16 and f16 computed in f32. void for
// every other (T, C), which round_pack and widen_pack convert one at a time.
template <typename T, typename C>
using PairNative =
    std::conditional_t<std::is_same_v<C, float> && std::is_same_v<T, BFloat16>, __nv_bfloat16,
                       std::conditional_t<std::is_same_v<C, float> && std::is_same_v<T, Half>, __half, void>>;

// v rounded to T as one pack. 16-bit types round a pair at a time with the
// hardware's round to nearest even (mma_sync.cuh's pack2: one instruction a
// pair, where convert<T> rounds in software, about seven a value): the same
// bits for every finite value, a NaN as the canonical NaN rather than
// convert's quieted payload. Other types round through convert<T>.
template <typename T, typename C>
__device__ inline Pack16<T> round_pack(const C (&v)[Pack16<T>::kN]) {
  Pack16<T> out;
  using Native = PairNative<T, C>;
  if constexpr (!std::is_void_v<Native>) {
    uint32_t w[Pack16<T>::kN / 2];
#pragma unroll
    for (int i = 0; i < Pack16<T>::kN / 2; ++i) w[i] = pack2<Native>(v[2 * i], v[2 * i + 1]);
    memcpy(&out, w, sizeof(out));
  } else {
#pragma unroll
    for (int e = 0; e < Pack16<T>::kN; ++e) out.v[e] = convert<T>(v[e]);
  }
  return out;
}

// round_pack's inverse: a pack's values, exactly, in C. 16-bit types widen a
// pair at a time (mma_sync.cuh's unpack2: two bit operations for bf16, one
// conversion for f16, where convert takes f16 apart in software); the same
// values as convert (a NaN stays a NaN).
template <typename T, typename C>
__device__ inline void widen_pack(const Pack16<T>& p, C (&v)[Pack16<T>::kN]) {
  using Native = PairNative<T, C>;
  if constexpr (!std::is_void_v<Native>) {
    uint32_t w[Pack16<T>::kN / 2];
    memcpy(w, &p, sizeof(w));
#pragma unroll
    for (int i = 0; i < Pack16<T>::kN / 2; ++i) unpack2<Native>(w[i], v[2 * i], v[2 * i + 1]);
  } else {
#pragma unroll
    for (int e = 0; e < Pack16<T>::kN; ++e) v[e] = convert<C>(p.v[e]);
  }
}

// True when p (null counts) starts on a 16-byte boundary.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// out[i] = T(f(C(a[i]))), or T(f(C(a[i]), C(b[i]))) when kBinary, over n
// contiguous elements: whole packs first, then the last n % kN elements one
// per thread. The expression per element is UnaryFn's and BinaryFn's.
template <bool kBinary, typename T, typename F>
__global__ void packed_kernel(int64_t n, T* out, const T* a, const T* b, F f) {
  using C = compute_t<T>;
  constexpr int kN = Pack16<T>::kN;
  const int64_t packs = n / kN;
  COPPICE_KERNEL_LOOP(i, packs) {
    const Pack16<T> pa = load16(a + i * kN);
    Pack16<T> po;
    if constexpr (kBinary) {
      const Pack16<T> pb = load16(b + i * kN);
#pragma unroll
      for (int e = 0; e < kN; ++e) po.v[e] = T(f(static_cast<C>(pa.v[e]), static_cast<C>(pb.v[e])));
    } else {
#pragma unroll
      for (int e = 0; e < kN; ++e) po.v[e] = T(f(static_cast<C>(pa.v[e])));
    }
    store16(out + i * kN, po);
  }
  // Fewer than kN elements are left; every grid has that many threads.
  const int64_t t = packs * kN + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  if constexpr (kBinary) {
    out[t] = T(f(static_cast<C>(a[t]), static_cast<C>(b[t])));
  } else {
    out[t] = T(f(static_cast<C>(a[t])));
  }
}

// Whether t moves in 16-byte packs as an operand of shape `shape`.
inline bool packable_as(const Tensor& t, const Shape& shape) {
  return t.shape() == shape && t.is_contiguous() && aligned16(t.data_ptr());
}

// out[i] = T(f(C(a[i]), C(row[i % c]))), or f(row, a) when kRowFirst: a
// binary op of a contiguous operand and a block of c elements broadcast over
// its leading dimensions (a linear layer's bias row; a GPT's [T, D] position
// table over [N, T, D]), in 16-byte packs; c is a multiple of a pack, so a
// pack never straddles two copies of the block.
template <bool kRowFirst, typename T, typename F>
__global__ void packed_row_kernel(int64_t n, int64_t c, T* out, const T* a, const T* row, F f) {
  using C = compute_t<T>;
  constexpr int kN = Pack16<T>::kN;
  COPPICE_KERNEL_LOOP(i, n / kN) {
    const Pack16<T> pa = load16(a + i * kN), pr = load16(row + (i * kN) % c);
    Pack16<T> po;
#pragma unroll
    for (int e = 0; e < kN; ++e) {
      const C x = static_cast<C>(pa.v[e]), r = static_cast<C>(pr.v[e]);
      po.v[e] = T(kRowFirst ? f(r, x) : f(x, r));
    }
    store16(out + i * kN, po);
  }
}

// The elements of the block t is, when t (its leading dimensions of 1 aside)
// has the shape of out's last dimensions and is contiguous: what repeats
// along out when t is broadcast over it. 0 when t is not such a block, or is
// out's shape itself (packed_kernel's case).
inline int64_t trailing_block_numel(const Tensor& t, const Shape& out) {
  if (t.shape() == out) return 0;
  int64_t lead = 0;
  while (lead < t.dim() && t.size(lead) == 1) ++lead;
  const auto k = static_cast<int64_t>(t.dim()) - lead, skip = static_cast<int64_t>(out.size()) - k;
  if (skip < 0 || !t.is_contiguous()) return 0;
  int64_t n = 1;
  for (int64_t d = 0; d < k; ++d) {
    if (t.size(lead + d) != out[skip + d]) return 0;
    n *= out[skip + d];
  }
  return n;
}

// The trailing-block case of launch_packed: one operand of out's shape, the
// other a contiguous block of out's last dimensions (a row, a [T, D] table;
// leading dimensions of 1) broadcast over the rest.
template <typename T, typename F>
bool launch_packed_row(std::string_view op, const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  constexpr int kN = Pack16<T>::kN;
  auto full = [&](const Tensor& t) { return packable_as(t, out.shape()); };
  auto block = [&](const Tensor& t) {
    const int64_t n = trailing_block_numel(t, out.shape());
    return n > 0 && n % kN == 0 && aligned16(t.data_ptr()) ? n : 0;
  };
  const int64_t block_b = full(a) ? block(b) : 0, block_a = block_b == 0 && full(b) ? block(a) : 0;
  const bool row_second = block_b > 0, row_first = block_a > 0;
  const int64_t c = row_second ? block_b : block_a;
  if (!full(out) || (!row_second && !row_first)) return false;
  const int64_t n = out.numel();
  const int device = out.device().index;
  DeviceGuard guard(device);
  const unsigned grid = grid_for(n / kN);
  T* po = static_cast<T*>(out.data_ptr());
  if (row_second) {
    packed_row_kernel<false><<<grid, kThreads, 0, current_stream(device)>>>(
        n, c, po, static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), f);
  } else {
    packed_row_kernel<true><<<grid, kThreads, 0, current_stream(device)>>>(
        n, c, po, static_cast<const T*>(b.data_ptr()), static_cast<const T*>(a.data_ptr()), f);
  }
  check_launch(op);
  return true;
}

// Runs packed_kernel when T is bf16/f16 and out, a and (when kBinary) b are
// contiguous, of out's shape and 16-byte aligned (or, binary, one of a and b
// is a trailing block broadcast over the other: packed_row_kernel), and returns true; else
// returns false and the caller takes launch_elementwise. f is the op
// functor: f(C), or f(C, C) when kBinary (b is ignored otherwise).
template <bool kBinary, typename T, typename F>
bool launch_packed(std::string_view op, const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if constexpr (!kIsHalf<T>) {
    return false;
  } else {
    auto fits = [&](const Tensor& t) { return packable_as(t, out.shape()); };
    if constexpr (kBinary) {
      if (fits(out) && launch_packed_row<T>(op, out, a, b, f)) return true;
    }
    if (!fits(out) || !fits(a) || (kBinary && !fits(b))) return false;
    const int64_t n = out.numel();
    if (n == 0) return true;
    const int device = out.device().index;
    DeviceGuard guard(device);
    packed_kernel<kBinary><<<grid_for((n + Pack16<T>::kN - 1) / Pack16<T>::kN), kThreads, 0, current_stream(device)>>>(
        n, static_cast<T*>(out.data_ptr()), static_cast<const T*>(a.data_ptr()),
        kBinary ? static_cast<const T*>(b.data_ptr()) : nullptr, f);
    check_launch(op);
    return true;
  }
}

}  // namespace coppice::cuda
