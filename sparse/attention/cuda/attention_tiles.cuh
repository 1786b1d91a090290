// The pieces the tiled attention kernels share (attention.cu on
// mma.sync, attention_sm90.cu on Hopper's wgmma): which tiles a
// walk visits, the operands' strides, the accumulators' 16 x 8 fragments
// (the layout of mma.sync's and, per warp, of wgmma's f32 results) and how
// they are stored. Device code, and the launch arguments.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/cuda/mma_sync.cuh"

namespace coppice::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- which keys a query sees, as ranges -----------------------------------------------------

// The ranges [lo, hi) of one block row (or column) of the layout, clipped to
// [lo_clip, hi_clip); without a layout, the one range [lo_clip, hi_clip).
struct RangeWalk {
  const int32_t* idx = nullptr;  // null: no layout
  int32_t e = 0, e_end = 0;
  int64_t block = 0, lo_clip = 0, hi_clip = 0;
  bool done = false;

  __device__ RangeWalk(const int32_t* ptr, const int32_t* index, int64_t line, int64_t blk, int64_t lo, int64_t hi)
      : idx(index), block(blk), lo_clip(lo), hi_clip(hi) {
    if (idx != nullptr) {
      e = ptr[line];
      e_end = ptr[line + 1];
    }
  }
  // The next non-empty range; false when there is none.
  __device__ bool next(int64_t& lo, int64_t& hi) {
    if (idx == nullptr) {
      if (done) return false;
      done = true;
      lo = lo_clip;
      hi = hi_clip;
      return lo < hi;
    }
    while (e < e_end) {
      const int64_t b = idx[e++];
      lo = b * block > lo_clip ? b * block : lo_clip;
      hi = (b + 1) * block < hi_clip ? (b + 1) * block : hi_clip;
      if (lo < hi) return true;
    }
    return false;
  }
  // With a layout, the entry (index into idx) of the range next() gave last.
  __device__ int32_t entry() const { return e - 1; }
};

// Steps of `step` tokens over a RangeWalk's ranges (whose starts are multiples of step).
struct StepWalk {
  RangeWalk ranges;
  int64_t step, cur = 0, hi = 0;
  __device__ StepWalk(const RangeWalk& r, int64_t s) : ranges(r), step(s) {}
  // The next step's first token, or -1.
  __device__ int64_t next() {
    while (cur >= hi) {
      if (!ranges.next(cur, hi)) return -1;
    }
    const int64_t at = cur;
    cur += step;
    return at;
  }
  // With a layout, the entry of the block holding the step next() gave last.
  __device__ int32_t entry() const { return ranges.entry(); }
};

// The first query of this thread block's tile of `rows` queries: the last
// tile first, so that the longest causal walks start first.
__device__ __forceinline__ int64_t query_tile_start(int64_t t, int64_t rows) {
  return ((t + rows - 1) / rows - 1 - blockIdx.x) * rows;
}

// ---- tensor-core fragments --------------------------------------------------------------------

// The accumulators of a 16 x 8NT product as the A fragments of its NT/2 k16
// steps (mma.sync's m16n8k16 A, and each warp's slice of wgmma's A from registers).
template <typename T, int NT>
__device__ __forceinline__ void to_a(uint32_t (&a)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

template <int NT>
__device__ __forceinline__ void zero(float (&c)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
}

// Stores a warp's 16 x 8NT accumulators (times `scale`) as rows row0.. of a
// head's [t, 8NT] rows, `ld` elements apart; rows past t left out.
template <typename T, int NT>
__device__ __forceinline__ void store_rows(T* g, const float (&c)[NT][4], int64_t row0, int64_t t, int64_t ld,
                                           float scale, int lane) {
  const int gr = lane / 4, tc = (lane % 4) * 2;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + gr + half * 8;
    if (row >= t) continue;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      *reinterpret_cast<uint32_t*>(g + row * ld + j * 8 + tc) =
          pack2<T>(c[j][2 * half] * scale, c[j][2 * half + 1] * scale);
    }
  }
}

// Where token i of head n (= batch * heads + head) of an operand starts:
// base + batch * stride.batch + head * stride.head + i * stride.token elements
// (a [N, T, d] tensor has heads 1; [B, T, H, d] views, such as the three
// parts of a packed qkv projection, have any such strides).
struct HeadStrides {
  int64_t batch = 0, head = 0, token = 0;
};

__host__ __device__ __forceinline__ int64_t head_offset(const HeadStrides& s, int64_t n, int64_t heads) {
  return (n / heads) * s.batch + (n % heads) * s.head;
}

struct FlashArgs {
  const void *q, *k, *v, *out, *dout;
  void *o, *dq, *dk, *dv;
  HeadStrides sq, sk, sv, so, sdq, sdk, sdv;  // so: out and dout (both contiguous alike)
  float* lse;                                 // [n, t]
  const float* delta;                         // [n, t]: rowsum(dout * out)
  // The layout's walks (block_walks.h), null without one.
  const int32_t *row_ptr, *col_idx, *col_ptr, *row_idx, *col_entry;
  int64_t t = 0, block = 0, heads = 1, n_offset = 0;  // n_offset: the first head of this launch
  float scale = 1.f;
  bool causal = false;
  // The wgmma backward's ds tiles (attention_sm90.cu's ds_slot): heads
  // ds_first.. of this pass, ds_head_tiles a head, which dk/dv writes and
  // dq reads.
  void* ds = nullptr;
  int64_t ds_first = 0, ds_head_tiles = 0;
};

// The key steps the `rows` queries from q0 see (forward, dq): up to the
// tile's last query when causal, the kept blocks of its block row with a layout.
__device__ __forceinline__ StepWalk key_walk(const FlashArgs& a, int64_t q0, int64_t rows, int64_t step) {
  const int64_t key_end = a.causal ? (q0 + rows < a.t ? q0 + rows : a.t) : a.t;
  return StepWalk(RangeWalk(a.row_ptr, a.col_idx, a.block > 0 ? q0 / a.block : 0, a.block, 0, key_end), step);
}

// The query steps that see the keys from k0 (dk/dv): from k0 on when causal,
// the kept blocks of its block column with a layout.
__device__ __forceinline__ StepWalk query_walk(const FlashArgs& a, int64_t k0, int64_t step) {
  return StepWalk(RangeWalk(a.col_ptr, a.row_idx, a.block > 0 ? k0 / a.block : 0, a.block, a.causal ? k0 : 0, a.t),
                  step);
}

// The per-row values a backward step needs beside its tiles: lse (in base 2;
// +inf where the query sees nothing or lies past t, so that its p is 0) and
// delta, of rows row0.., one a thread (rows <= blockDim.x). Loaded into
// registers (load_row_stats) and stored to shared memory (store_row_stats)
// apart, a kernel can issue the loads a step ahead: stored straight away,
// the warps that load wait out their latency before the step's products,
// and a warpgroup's products wait for all its warps. A kernel that forms
// its own deltas (attention_sm90.cu's dk/dv) passes null for delta and
// delta_s: lse alone is loaded and stored.
struct RowStats {
  float lse = -INFINITY, delta = 0.f;
};

__device__ __forceinline__ RowStats load_row_stats(const float* lse, const float* delta, int64_t row0, int rows,
                                                   int64_t t) {
  RowStats s;
  const int64_t row = row0 + threadIdx.x;
  if (static_cast<int>(threadIdx.x) < rows && row < t) {
    s.lse = lse[row];
    if (delta != nullptr) s.delta = delta[row];
  }
  return s;
}

__device__ __forceinline__ void store_row_stats(const RowStats& s, float* lse2_s, float* delta_s, int rows) {
  if (static_cast<int>(threadIdx.x) < rows) {
    lse2_s[threadIdx.x] = s.lse == -INFINITY ? INFINITY : s.lse * kLog2e;
    if (delta_s != nullptr) delta_s[threadIdx.x] = s.delta;
  }
}

__device__ __forceinline__ void stage_row_stats(float* lse2_s, float* delta_s, const float* lse, const float* delta,
                                                int64_t row0, int rows, int64_t t) {
  store_row_stats(load_row_stats(lse, delta, row0, rows, t), lse2_s, delta_s, rows);
}

// The row deltas' arithmetic, delta = rowsum(dout * out) in f32: each lane
// of a group of kGroup lanes holds 16 bytes of a row of each (eight 16-bit
// T), sums their products by a chain of FMAs from 0, and the group adds
// its sums by shuffles (kGroup / 2, ..., 1); every lane of the warp takes
// part and gets its group's delta. attention.cu's row-delta kernel and
// attention_sm90.cu's dk/dv (which forms its own) both take it, so that a
// delta is the same bits whichever formed it.
template <typename T, int kGroup>
__device__ __forceinline__ float row_delta(uint4 dout, uint4 out) {  // by value: one 16-byte load each
  static_assert(sizeof(T) == 2 && kGroup > 0 && kGroup <= 32 && 32 % kGroup == 0, "16-bit rows, groups within a warp");
  const T* a = reinterpret_cast<const T*>(&dout);
  const T* b = reinterpret_cast<const T*>(&out);
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) sum += static_cast<float>(a[e]) * static_cast<float>(b[e]);
#pragma unroll
  for (int off = kGroup / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  return sum;
}

// ---- the arithmetic between the products ------------------------------------------------------

// 2^x in one MUFU instruction, results under 2^-126 flushed to zero
// (exp2f keeps subnormals, at a few more instructions each; a probability
// that small is nothing to any sum it joins). The softmax's exponentials are
// the tiled kernels' busiest arithmetic.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A tile offset as a 32-bit int, saturated: masks compare offsets within
// a tile, which a tile crossing the diagonal or t keeps within a tile's
// width, so only its sign matters where it saturates.
__device__ __forceinline__ int tile_offset(int64_t v) {
  return static_cast<int>(v < -(1 << 30) ? -(1 << 30) : v > (1 << 30) ? 1 << 30 : v);
}

// Where a warp's fragments (rows row_base and row_base + 8, columns k0..)
// fall past t or, with `causal`, above the diagonal: those scores become
// -inf, tested in 32 bits (tile_offset).
template <int NTK>
__device__ __forceinline__ void mask_edge(float (&s)[NTK][4], bool causal, int64_t k0, int64_t row_base, int64_t t,
                                          int lane) {
  const int cols = tile_offset(t - k0), diag = tile_offset(row_base - k0);  // columns past t; the row's own key
#pragma unroll
  for (int j = 0; j < NTK; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + (lane % 4) * 2 + (e & 1);
      if (col >= cols || (causal && col > diag + (e >> 1) * 8)) s[j][e] = -INFINITY;
    }
  }
}

// One key tile of the forward's online softmax for a warp's 16 queries (rows
// row_base and row_base + 8 of its fragments): s, their scores against keys
// k0.., is masked where `edge` (the tile crosses the diagonal or t); the
// rows' running max m (in base 2, of the scaled scores c2 s) is updated and
// their sum l and o rescaled to it; p = exp2(c2 s - max), one FFMA and one
// exponential a score, is added to l and packed into pf, the A fragments of
// p v (to_a's layout). With c2 > 0 the max is taken over the unscaled
// scores (scaling keeps their order); otherwise they are scaled first.
template <typename T, int NTK, int NTD>
__device__ __forceinline__ void softmax_step(uint32_t (&pf)[NTK / 2][4], float (&s)[NTK][4], float (&o)[NTD][4],
                                             float (&m)[2], float (&l)[2], float c2, bool edge, bool causal, int64_t k0,
                                             int64_t row_base, int64_t t, int lane) {
  float cs = c2;  // what s is still to be multiplied by
  if (c2 <= 0.f) {
#pragma unroll
    for (int j = 0; j < NTK; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= c2;
    }
    cs = 1.f;
  }
  if (edge) mask_edge(s, causal, k0, row_base, t, lane);
  float m_use[2];  // what each row's p subtracts
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NTK; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h], mx * cs);
    m_use[h] = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = exp2_ftz(m[h] - m_use[h]);
    m[h] = m_new;
    l[h] *= alpha;
#pragma unroll
    for (int j = 0; j < NTD; ++j) {
      o[j][2 * h] *= alpha;
      o[j][2 * h + 1] *= alpha;
    }
  }
#pragma unroll
  for (int j = 0; j < NTK; ++j) {
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = exp2_ftz(fmaf(s[j][e], cs, -m_use[e >> 1]));
    l[0] += p[0] + p[1];
    l[1] += p[2] + p[3];
    pf[j / 2][(j % 2) * 2] = pack2<T>(p[0], p[1]);
    pf[j / 2][(j % 2) * 2 + 1] = pack2<T>(p[2], p[3]);
  }
}

// The forward's end for a warp's 16 queries: the sums gathered over each
// row's four lanes, the rows' log-sum-exp written to lse (base e; -inf for a
// row that saw nothing) and o divided by the sums.
template <int NTD>
__device__ __forceinline__ void finish_softmax(float (&o)[NTD][4], const float (&m)[2], float (&l)[2], float* lse,
                                               int64_t row_base, int64_t t, int lane) {
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    inv[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;
    const int64_t row = row_base + h * 8;
    if (lane % 4 == 0 && row < t) lse[row] = l[h] > 0.f ? m[h] * kLn2 + logf(l[h]) : -INFINITY;
  }
#pragma unroll
  for (int j = 0; j < NTD; ++j) {
    o[j][0] *= inv[0];
    o[j][1] *= inv[0];
    o[j][2] *= inv[1];
    o[j][3] *= inv[1];
  }
}

// dk/dv's step for a warp's 16 keys (rows key_base and key_base + 8 of its
// fragments) by 8NTQ queries q0.. (columns): from s^T = k q^T and dp^T =
// v dout^T, p^T = exp2(c2 s^T - lse2) (0 above the diagonal where `edge`)
// and ds^T = p^T (dp^T - delta), in place; lse2 and delta per query, staged.
// The diagonal's test is one 32-bit compare an element (a step off the
// diagonal compares with a diagonal no query reaches): in 64 bits, as
// predicates ptxas kept for every step, it had been about a quarter of
// dk/dv's instructions.
template <int NTQ>
__device__ __forceinline__ void transposed_p_ds(float (&p)[NTQ][4], float (&ds)[NTQ][4], const float* lse2,
                                                const float* delta, float c2, bool edge, int64_t key_base, int64_t q0,
                                                int lane) {
  const int diag = edge ? tile_offset(key_base - q0) : -(1 << 30);  // the row's own query, tile-relative
#pragma unroll
  for (int j = 0; j < NTQ; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int cq = j * 8 + (lane % 4) * 2 + (e & 1);
      float x = exp2_ftz(fmaf(p[j][e], c2, -lse2[cq]));
      if (diag + (e >> 1) * 8 > cq) x = 0.f;
      p[j][e] = x;
      ds[j][e] = x * (ds[j][e] - delta[cq]);
    }
  }
}

// dq's step for a warp's 16 queries (rows row_base, row_base + 8) by 8NTK
// keys k0..: from s = q k^T and dp = dout v^T, ds = p (dp - delta) in place
// of dp, p = exp2(c2 s - lse2) (0 past t and, where `edge`, past the
// diagonal: a pass of its own behind that branch, in 32 bits).
template <int NTK>
__device__ __forceinline__ void p_ds(const float (&s)[NTK][4], float (&ds)[NTK][4], const float (&lse2)[2],
                                     const float (&delta)[2], float c2, bool edge, bool causal, int64_t k0,
                                     int64_t row_base, int64_t t, int lane) {
#pragma unroll
  for (int j = 0; j < NTK; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e >> 1;
      ds[j][e] = exp2_ftz(fmaf(s[j][e], c2, -lse2[h])) * (ds[j][e] - delta[h]);
    }
  }
  if (edge) {
    const int cols = tile_offset(t - k0), diag = tile_offset(row_base - k0);  // past t; the row's own key
#pragma unroll
    for (int j = 0; j < NTK; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + (lane % 4) * 2 + (e & 1);
        if (col >= cols || (causal && col > diag + (e >> 1) * 8)) ds[j][e] = 0.f;
      }
    }
  }
}

// A warp's rows' lse (base 2; +inf where the row sees nothing or lies past t,
// so that its p is 0) and delta, for dq.
__device__ __forceinline__ void row_stats(float (&lse2)[2], float (&dl)[2], const float* lse, const float* delta,
                                          int64_t row_base, int64_t t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row_base + h * 8;
    const float l = row < t ? lse[row] : -INFINITY;
    lse2[h] = l == -INFINITY ? INFINITY : l * kLog2e;
    dl[h] = row < t ? delta[row] : 0.f;
  }
}

}  // namespace coppice::cuda
