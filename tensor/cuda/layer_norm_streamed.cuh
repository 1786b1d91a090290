// LayerNorm's rows streamed through shared memory: the forward and dx
// kernels tensor/cuda/layer_norm.cu launches for rows whose length is a
// multiple of a 16-byte pack, up to kMaxD<T> values, every array 16-byte
// aligned. Device code, included by layer_norm.cu alone.
//
// The packed kernels there hide HBM's latency with rows in flight, a row's
// work being one dependent chain (load, sum, variance, write), and reach
// 2.5-2.9 TB/s on the GPT's rows (H200) with a third of an SM's warps active.
// These keep bytes in flight instead: each warp walks its rows (warp w of the
// grid: rows w, w + warps, ...) with the next kStages - 1 rows' operands on
// their way into its own stages of shared memory (cp.async), and works on
// the row that has landed, its values held in registers. A lane copies and
// later reads only its own packs (p = lane, lane + 32, ...), so the lanes
// need no barrier.
//
// What bounds them is instructions, not bytes (Nsight Compute: more warps in
// flight measured no better), so a lane does as little per value as it can:
// it rounds and widens a pair at a time in hardware (round_pack,
// widen_pack), keeps what is the same in every row it takes in registers
// (its columns of w and b, already widened; its shared and global addresses
// but for one offset a row), and divides by d once.
#pragma once

#include <cstdint>

#include "tensor/cuda/async_copy.cuh"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/warp.cuh"

namespace coppice::cuda::streamed_rows {

constexpr int kWarps = 4, kStages = 3;
constexpr int kThreads = kWarps * 32;
// Packs a lane holds: rows of up to 32 x 4 packs stream (1024 values of a
// 16-bit type, 512 of f32); longer ones take the packed kernels.
constexpr int kPacks = 4;
template <typename T>
constexpr int kMaxD = 32 * kPacks* Pack16<T>::kN;
// Three operands of the longest row in every stage of every warp: 72 KB.
static_assert(kWarps * kStages * 3 * 32 * kPacks * 16 <= 113 * 1024, "two blocks an SM");

// Shared memory a block needs for ops operands of rows of d values.
template <typename T>
constexpr size_t smem_bytes(int ops, int64_t d) {
  return static_cast<size_t>(kWarps) * kStages * ops * d * sizeof(T);
}

// Calls f(k) for each of this lane's packs (lane + 32 k, k < held).
template <typename F>
__device__ __forceinline__ void each_held(int held, F&& f) {
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    if (k < held) f(k);
  }
}

// One lane's side of its warp's rows: `ops` operands of d values a row, from
// src[op], landing in the warp's kStages stages. Construct it in every lane
// (it sets the first kStages - 1 rows going), then call next() once for each
// of the warp's rows, first() to rows by stride().
template <typename T>
class LaneRows {
 public:
  static constexpr int kN = Pack16<T>::kN;
  static constexpr int kPackStride = 32 * kN;  // from one of a lane's packs to its next

  __device__ LaneRows(unsigned char* smem, int ops, const T* a, const T* b, const T* c, int64_t rows, int d)
      : ops_(ops), d_(d), rows_(rows) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int packs = d / kN;
    held_ = packs <= lane ? 0 : min(kPacks, (packs - lane + 31) / 32);
    stage_size_ = ops * d;
    first_stage_ = reinterpret_cast<T*>(smem) + warp * kStages * stage_size_ + lane * kN;
    fetch_stage_ = read_stage_ = first_stage_;
    const T* srcs[3] = {a, b, c};
#pragma unroll
    for (int op = 0; op < 3; ++op) src_[op] = op < ops ? srcs[op] + lane * kN : nullptr;
    first_ = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    stride_ = static_cast<int64_t>(gridDim.x) * kWarps;
    fetch_row_ = first_;
    for (int i = 0; i + 1 < kStages; ++i) fetch();
  }

  __device__ int64_t first() const { return first_; }
  __device__ int64_t stride() const { return stride_; }
  // How many packs of a row this lane holds (pack lane + 32 k for k < held()).
  __device__ int held() const { return held_; }

  // This lane's first pack of the current row's operand 0 in shared memory
  // (operand op at + op * d, pack k at + k * kPackStride), once landed. Sets
  // the row kStages - 1 ahead going first, into the stage the row before
  // this one used, which this lane has read.
  __device__ const T* next() {
    fetch();
    wait_copies<kStages - 1>();
    const T* at = read_stage_;
    read_stage_ = following(read_stage_);
    return at;
  }

 private:
  __device__ T* following(T* stage) const {
    stage += stage_size_;
    return stage == first_stage_ + kStages * stage_size_ ? first_stage_ : stage;
  }
  // Starts the copies of the next row to fetch, if the warp has one, and
  // closes a group either way, so that the groups in flight count rows.
  __device__ void fetch() {
    if (fetch_row_ < rows_) {
      const int64_t offset = fetch_row_ * d_;
#pragma unroll
      for (int op = 0; op < 3; ++op) {  // unrolled, so that src_ stays in registers
        if (op >= ops_) continue;
        each_held(held_, [&](int k) {
          copy16_async(fetch_stage_ + op * d_ + k * kPackStride, src_[op] + offset + k * kPackStride);
        });
      }
    }
    commit_copies();
    fetch_row_ += stride_;
    fetch_stage_ = following(fetch_stage_);
  }

  const T* src_[3];  // each operand at this lane's first pack of row 0
  T* first_stage_;   // stage 0 at this lane's first pack
  T* fetch_stage_;
  T* read_stage_;
  int ops_, d_, held_, stage_size_;
  int64_t rows_, first_, stride_, fetch_row_;
};

// The lane's packs of a vector of d values (w or b) widened to C, `absent`
// for each value where the vector is null.
template <typename T, typename C>
__device__ __forceinline__ void held_columns(const T* v, int held, C absent, C (&out)[kPacks][Pack16<T>::kN]) {
  constexpr int kN = Pack16<T>::kN;
  each_held(held, [&](int k) {
    if (v != nullptr) {
      widen_pack(load16(v + threadIdx.x % 32 * kN + k * 32 * kN), out[k]);
    } else {
#pragma unroll
      for (int e = 0; e < kN; ++e) out[k][e] = absent;
    }
  });
}

// The row's mean, from the lanes' sums s of the values they hold, and its
// rstd, from those values' squared deviations (the packed kernels' two passes).
template <int kN, typename C>
__device__ __forceinline__ void held_stats(const C (&v)[kPacks][kN], C s, int held, C inv_d, C eps, C& mean, C& rstd) {
  mean = warp_sum(s) * inv_d;
  C q = 0;
  each_held(held, [&](int k) {
#pragma unroll
    for (int e = 0; e < kN; ++e) {
      const C c = v[k][e] - mean;
      q += c * c;
    }
  });
  rstd = C(1) / math::sqrt(warp_sum(q) * inv_d + eps);
}

// y = layer_norm(x) with w and b (either null), or, with kResidual, h = x + r
// (rounded to T, as add writes it) and y = layer_norm(h).
template <typename T, bool kResidual, typename C = compute_t<T>>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* x, const T* r, const T* w, const T* b, T* h, T* y, int64_t rows, int d, double eps) {
  // On sm_90 launched to overlap the kernel before it (layer_norm.cu's
  // launch_overlapping_on_sm90): nothing global is read or written before this wait.
  wait_for_prerequisite_grids();
  allow_dependent_launch();  // the next kernel may set up under this one's tail
  extern __shared__ __align__(16) unsigned char streamed_rows_smem[];
  constexpr int kN = Pack16<T>::kN, kPackStride = LaneRows<T>::kPackStride;
  LaneRows<T> in(streamed_rows_smem, kResidual ? 2 : 1, x, r, nullptr, rows, d);
  const int held = in.held();
  C wv[kPacks][kN], bv[kPacks][kN];
  held_columns(w, held, C(1), wv);
  held_columns(b, held, C(0), bv);
  const C inv_d = C(1) / C(d), eps_c = C(eps);
  const int lane_col = threadIdx.x % 32 * kN;
  C v[kPacks][kN];
  for (int64_t row = in.first(); row < rows; row += in.stride()) {
    const T* at = in.next();
    const int64_t base = row * d + lane_col;
    C s = 0;
    each_held(held, [&](int k) {
      const Pack16<T> xp = load16(at + k * kPackStride);
      if constexpr (kResidual) {
        C xs[kN], rs[kN];
        widen_pack(xp, xs);
        widen_pack(load16(at + d + k * kPackStride), rs);
#pragma unroll
        for (int e = 0; e < kN; ++e) xs[e] += rs[e];
        const Pack16<T> hp = round_pack<T>(xs);
        store16(h + base + k * kPackStride, hp);
        widen_pack(hp, v[k]);
      } else {
        widen_pack(xp, v[k]);
      }
#pragma unroll
      for (int e = 0; e < kN; ++e) s += v[k][e];
    });
    C mean, rstd;
    held_stats(v, s, held, inv_d, eps_c, mean, rstd);
    each_held(held, [&](int k) {
      C t[kN];
#pragma unroll
      for (int e = 0; e < kN; ++e) t[e] = (v[k][e] - mean) * rstd * wv[k][e] + bv[k][e];
      store16(y + base + k * kPackStride, round_pack<T>(t));
    });
  }
}

// dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat)) (+ dh),
// gxhat = g * w (w null: 1). x, g and dh (when not null) land in the stages,
// and a lane holds its values of x, then of xhat. With kSums each lane also
// adds g * xhat and g of its columns over its warp's rows in registers, the
// block adds its warps' sums in order and writes them as row blockIdx.x of
// dw_partial and db_partial (either null; column_totals adds the blocks'
// rows in order): no second pass over x and g, and no row statistics kept
// for one.
template <typename T, bool kSums, typename C = compute_t<T>>
__global__ void __launch_bounds__(kThreads) dx_kernel(const T* x, const T* w, const T* g, const T* dh, T* dx,
                                                      C* dw_partial, C* db_partial, int64_t rows, int d, double eps) {
  wait_for_prerequisite_grids();  // as forward_kernel's
  allow_dependent_launch();
  extern __shared__ __align__(16) unsigned char streamed_rows_smem[];
  constexpr int kN = Pack16<T>::kN, kPackStride = LaneRows<T>::kPackStride;
  LaneRows<T> in(streamed_rows_smem, dh != nullptr ? 3 : 2, x, g, dh, rows, d);
  const int held = in.held();
  C wv[kPacks][kN];
  held_columns(w, held, C(1), wv);
  constexpr int kHeldSums = kSums ? kPacks : 1;
  C sw[kHeldSums][kN], sb[kHeldSums][kN];
#pragma unroll
  for (int k = 0; k < kHeldSums; ++k) {
#pragma unroll
    for (int e = 0; e < kN; ++e) sw[k][e] = sb[k][e] = 0;
  }
  const C inv_d = C(1) / C(d), eps_c = C(eps);
  const int lane_col = threadIdx.x % 32 * kN;
  C xv[kPacks][kN];  // x, then xhat
  for (int64_t row = in.first(); row < rows; row += in.stride()) {
    const T* at = in.next();
    const T* gs = at + d;
    C s = 0;
    each_held(held, [&](int k) {
      widen_pack(load16(at + k * kPackStride), xv[k]);
#pragma unroll
      for (int e = 0; e < kN; ++e) s += xv[k][e];
    });
    C mean, rstd;
    held_stats(xv, s, held, inv_d, eps_c, mean, rstd);
    C a = 0, bsum = 0;
    each_held(held, [&](int k) {
      C gv[kN];
      widen_pack(load16(gs + k * kPackStride), gv);
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        xv[k][e] = (xv[k][e] - mean) * rstd;
        const C gx = gv[e] * wv[k][e];
        a += gx;
        bsum += gx * xv[k][e];
        if constexpr (kSums) {
          sw[k][e] += gv[e] * xv[k][e];
          sb[k][e] += gv[e];
        }
      }
    });
    a = warp_sum(a) * inv_d;
    bsum = warp_sum(bsum) * inv_d;
    const int64_t base = row * d + lane_col;
    each_held(held, [&](int k) {
      C gv[kN], out[kN];
      widen_pack(load16(gs + k * kPackStride), gv);
#pragma unroll
      for (int e = 0; e < kN; ++e) out[e] = rstd * (gv[e] * wv[k][e] - a - xv[k][e] * bsum);
      if (dh != nullptr) {
        C hv[kN];
        widen_pack(load16(gs + d + k * kPackStride), hv);
#pragma unroll
        for (int e = 0; e < kN; ++e) out[e] += hv[e];
      }
      store16(dx + base + k * kPackStride, round_pack<T>(out));
    });
  }
  if constexpr (kSums) {
    // The stages are done with: the warps' sums go there, [warp][w or b][d]
    // (8 d floats a warp, less than its stages' 6 d 16-bit values x 3).
    wait_copies<0>();
    __syncthreads();
    C* part = reinterpret_cast<C*>(streamed_rows_smem);
    const int warp = threadIdx.x / 32;
    each_held(held, [&](int k) {
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        part[(2 * warp) * d + lane_col + k * kPackStride + e] = sw[k][e];
        part[(2 * warp + 1) * d + lane_col + k * kPackStride + e] = sb[k][e];
      }
    });
    __syncthreads();
    for (int c = threadIdx.x; c < d; c += kThreads) {
      C tw = 0, tb = 0;
      for (int wi = 0; wi < kWarps; ++wi) {
        tw += part[(2 * wi) * d + c];
        tb += part[(2 * wi + 1) * d + c];
      }
      if (dw_partial != nullptr) dw_partial[static_cast<int64_t>(blockIdx.x) * d + c] = tw;
      if (db_partial != nullptr) db_partial[static_cast<int64_t>(blockIdx.x) * d + c] = tb;
    }
  }
}

}  // namespace coppice::cuda::streamed_rows
