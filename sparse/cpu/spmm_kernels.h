// The loops under every CPU SpMM (internal to sparse/cpu).
//
// A sparse matrix M reaches these loops as an "accessor": its rows as lists
// of entries, either single (CSR-like: column index, value) or in blocks
// (BSR, Blocked-ELL: a block column and bw consecutive values). Two row
// operations cover every product:
//   gather_row(r, B, ldb, C, w):      C[0:w]  = sum_e v_e * B[col_e, 0:w]
//   scatter_row(r, Brow, C, ldc, w):  C[col_e, 0:w] += v_e * Brow[0:w]
// so that
//   M @ X    = gather over the rows of M
//   M^T @ X  = scatter over the rows of M
//   X @ M^T  = (M @ X^T)^T: gather over panels of X^T
//   X @ M    = (M^T @ X^T)^T: scatter over panels of X^T
// A panel does P columns' work however few rows X has, so for a few rows
// (an accessor's kDotRows) X @ M^T takes dot_row(r, x), a dot product along
// M's row r, and X @ M takes axpy_row(r, a, y), M's row r scaled into y.
// The dense operand is first packed, one panel of P columns at a time, into
// a contiguous [rows, P] buffer (a copy of B's columns, or a transposed block
// of X's rows): the rows an entry reads then lie within a few pages instead
// of one page per row of B, and a panel stays in cache while every row of M
// reads it. Inner loops hold a tile of the output row in registers (GCC
// vector extensions) over the entries of the row; the accessors are
// templates, so there are no virtual calls or dispatch per element. The
// loops are compiled twice, for AVX2+FMA and for SSE2, and the CPU picks one
// (use_avx2). 16-bit values are converted to f32 before they get here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cpu/parallel.h"

#define COPPICE_INLINE inline __attribute__((always_inline))

namespace coppice::sparse_cpu {

// True when the CPU has AVX2 and FMA (asked once), unless RuntimeOptions::cpu_simd
// is CpuSimd::kSse (COPPICE_CPU_SIMD=sse; for tests of the other path).
bool use_avx2();

// VB-byte vectors of T: 32 for AVX2, 16 for SSE2.
template <typename T, int VB>
struct Vec {
  typedef T type __attribute__((vector_size(VB)));
  static constexpr int kLanes = VB / static_cast<int>(sizeof(T));
};

// Columns one register tile accumulates: 8 vectors, half the registers, which
// leaves room for the broadcast value and the loads. Also the panel width.
template <typename T, int VB>
inline constexpr int kTile = 8 * Vec<T, VB>::kLanes;

// Bytes of a packed panel: about half of a core's L2 cache, within the
// reach of the L2 TLB.
inline constexpr int64_t kPanelBytes = 512 * 1024;

// Columns per packed panel of `rows` rows: a full register tile, halved
// (down to one vector) while the panel exceeds kPanelBytes.
template <typename T>
int64_t panel_columns(bool avx2, int64_t rows) {
  const int64_t lanes = avx2 ? Vec<T, 32>::kLanes : Vec<T, 16>::kLanes;
  int64_t p = avx2 ? kTile<T, 32> : kTile<T, 16>;
  while (p > lanes && rows * p * static_cast<int64_t>(sizeof(T)) > kPanelBytes) p /= 2;
  return p;
}

// C[0:W] = sum over entries of v * B[.., 0:W]; `entries(f)` calls f(pointer
// to the entry's row of B, value) for each entry.
template <int W, int VB, typename T, typename Entries>
COPPICE_INLINE void gather_tile(const Entries& entries, T* c) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::kLanes;
  if constexpr (W >= L) {
    constexpr int NV = W / L;
    V acc[NV];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) acc[i] = V{};
    entries([&](const T* b, T v) __attribute__((always_inline)) {
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) {
        V x;
        std::memcpy(&x, b + i * L, sizeof(V));
        acc[i] += v * x;
      }
    });
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) std::memcpy(c + i * L, &acc[i], sizeof(V));
  } else {
    T acc[W] = {};
    entries([&](const T* b, T v) __attribute__((always_inline)) {
#pragma GCC unroll 8
      for (int i = 0; i < W; ++i) acc[i] += v * b[i];
    });
    for (int i = 0; i < W; ++i) c[i] = acc[i];
  }
}

// C_e[0:W] += v_e * b[0:W] for each entry (pointer C_e into C, value v_e),
// with b[0:W] held in registers; `entries(f)` calls f(C_e, v_e).
template <int W, int VB, typename T, typename Entries>
COPPICE_INLINE void scatter_tile(const Entries& entries, const T* b) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::kLanes;
  if constexpr (W >= L) {
    constexpr int NV = W / L;
    V x[NV];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) std::memcpy(&x[i], b + i * L, sizeof(V));
    entries([&](T * c, T v) __attribute__((always_inline)) {
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) {
        V y;
        std::memcpy(&y, c + i * L, sizeof(V));
        y += v * x[i];
        std::memcpy(c + i * L, &y, sizeof(V));
      }
    });
  } else {
    entries([&](T * c, T v) __attribute__((always_inline)) {
      for (int i = 0; i < W; ++i) c[i] += v * b[i];
    });
  }
}

// C_e[0:w] += v_e * b[0:w] for each entry, one register tile of b at a time.
template <int VB, typename T, typename Entries>
COPPICE_INLINE void scatter_panel(const Entries& entries, const T* b, int64_t w) {
  constexpr int L = Vec<T, VB>::kLanes;
  constexpr int kW = kTile<T, VB>;
  int64_t j = 0;
  for (; j + kW <= w; j += kW) {
    scatter_tile<kW, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](T * c, T v) __attribute__((always_inline)) { f(c + j, v); });
        },
        b + j);
  }
  for (; j + kW / 2 <= w; j += kW / 2) {
    scatter_tile<kW / 2, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](T * c, T v) __attribute__((always_inline)) { f(c + j, v); });
        },
        b + j);
  }
  for (; j + L <= w; j += L) {
    scatter_tile<L, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](T * c, T v) __attribute__((always_inline)) { f(c + j, v); });
        },
        b + j);
  }
  const int64_t tail = w - j;
  for (int64_t t = 0; t < tail; ++t) {
    const int64_t jt = j + t;
    scatter_tile<1, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](T * c, T v) __attribute__((always_inline)) { f(c + jt, v); });
        },
        b + jt);
  }
}

// C[0:w] = sum over entries of v * B[.., 0:w], one register tile at a time.
template <int VB, typename T, typename Entries>
COPPICE_INLINE void gather_panel(const Entries& entries, T* c, int64_t w) {
  constexpr int L = Vec<T, VB>::kLanes;
  constexpr int kW = kTile<T, VB>;
  int64_t j = 0;
  for (; j + kW <= w; j += kW) {
    gather_tile<kW, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + j, v); });
        },
        c + j);
  }
  for (; j + kW / 2 <= w; j += kW / 2) {
    gather_tile<kW / 2, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + j, v); });
        },
        c + j);
  }
  for (; j + L <= w; j += L) {
    gather_tile<L, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + j, v); });
        },
        c + j);
  }
  const int64_t tail = w - j;
  for (int64_t t = 0; t < tail; ++t) {
    const int64_t jt = j + t;
    gather_tile<1, VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + jt, v); });
        },
        c + jt);
  }
}

// Rows of single entries: row r holds entries [row_begin[r], row_end[r]) of
// idx/val. CSR (and CSC as the rows of the transpose), coalesced COO, n:m.
template <typename T, typename I, typename P>
struct CompressedRows {
  const P* row_begin;
  const P* row_end;
  const I* idx;
  const T* val;
  int64_t rows;  // of M
  int64_t cols;  // of M

  int64_t nnz_of(int64_t r) const { return static_cast<int64_t>(row_end[r] - row_begin[r]); }

  template <int VB>
  COPPICE_INLINE void gather_row(int64_t r, const T* B, int64_t ldb, T* c, int64_t w) const {
    const int64_t b0 = static_cast<int64_t>(row_begin[r]), e0 = static_cast<int64_t>(row_end[r]);
    const I* ix = idx;
    const T* vx = val;
    gather_panel<VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          for (int64_t e = b0; e < e0; ++e) f(B + static_cast<int64_t>(ix[e]) * ldb, vx[e]);
        },
        c, w);
  }

  template <int VB>
  COPPICE_INLINE void scatter_row(int64_t r, const T* brow, T* C, int64_t ldc, int64_t w) const {
    const int64_t b0 = static_cast<int64_t>(row_begin[r]), e0 = static_cast<int64_t>(row_end[r]);
    const I* ix = idx;
    const T* vx = val;
    scatter_panel<VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          for (int64_t e = b0; e < e0; ++e) f(C + static_cast<int64_t>(ix[e]) * ldc, vx[e]);
        },
        brow, w);
  }

  // X @ M^T (X @ M) for at most this many rows of X takes dot_row (axpy_row),
  // not panels: one core, [n, 1024] x a 1024 x 1024 CSR at 90 %, f32, X @ M^T:
  // n = 1 30 us against 231, n = 4 113 against 235, n = 8 224 against 208.
  static constexpr int64_t kDotRows = 4;

  // sum over row r's entries of v * x[col]: four partial sums, so that the
  // additions do not wait on each other.
  template <int VB>
  COPPICE_INLINE T dot_row(int64_t r, const T* x) const {
    const int64_t b0 = static_cast<int64_t>(row_begin[r]), e0 = static_cast<int64_t>(row_end[r]);
    T s[4] = {};
    int64_t e = b0;
    for (; e + 4 <= e0; e += 4) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) s[q] += val[e + q] * x[static_cast<int64_t>(idx[e + q])];
    }
    for (; e < e0; ++e) s[0] += val[e] * x[static_cast<int64_t>(idx[e])];
    return (s[0] + s[1]) + (s[2] + s[3]);
  }

  // y[col] += a * v over row r's entries.
  template <int VB>
  COPPICE_INLINE void axpy_row(int64_t r, T a, T* y) const {
    const int64_t b0 = static_cast<int64_t>(row_begin[r]), e0 = static_cast<int64_t>(row_end[r]);
    for (int64_t e = b0; e < e0; ++e) y[static_cast<int64_t>(idx[e])] += a * val[e];
  }
};

// Rows of blocks: row r = br * bh + i holds the blocks k in
// [block_begin(br), block_end(br)), block k covering columns
// [bcol(k) * bw, bcol(k) * bw + bw) with row i's values at
// val + Layout::offset(k, i) (unit stride). BSR and Blocked-ELL.
template <typename T, typename Layout>
struct BlockRows {
  Layout layout;
  const T* val;
  int64_t rows, cols, bh, bw;

  int64_t nnz_of(int64_t r) const {
    const int64_t br = r / bh;
    return (layout.block_end(br) - layout.block_begin(br)) * bw;
  }

  template <int VB>
  COPPICE_INLINE void gather_row(int64_t r, const T* B, int64_t ldb, T* c, int64_t w) const {
    const int64_t br = r / bh, i = r % bh;
    const int64_t k0 = layout.block_begin(br), k1 = layout.block_end(br);
    const int64_t bwl = bw;
    gather_panel<VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          for (int64_t k = k0; k < k1; ++k) {
            const T* v = val + layout.offset(k, i);
            const T* b = B + layout.bcol(k) * bwl * ldb;
            for (int64_t j = 0; j < bwl; ++j) f(b + j * ldb, v[j]);
          }
        },
        c, w);
  }

  // X @ M^T (X @ M) for at most this many rows of X takes dot_row (axpy_row),
  // not panels: one core, [n, 1024] x a 1024 x 1024 BSR of 64x64 blocks at
  // 90 %, f32, X @ M^T: n = 1 6 us against 129, n = 4 19 against 99 (panels
  // take about 100-150 us up to n = 32 and 2 us a row past 64).
  static constexpr int64_t kDotRows = 16;

  // sum over row r's blocks of dot(the row's bw values, x[bcol * bw, +bw]):
  // both runs are contiguous, so the products fill whole vectors.
  template <int VB>
  COPPICE_INLINE T dot_row(int64_t r, const T* x) const {
    using V = typename Vec<T, VB>::type;
    constexpr int L = Vec<T, VB>::kLanes;
    const int64_t br = r / bh, i = r % bh;
    const int64_t k0 = layout.block_begin(br), k1 = layout.block_end(br);
    V acc[2] = {V{}, V{}};
    T tail = 0;
    for (int64_t k = k0; k < k1; ++k) {
      const T* v = val + layout.offset(k, i);
      const T* b = x + layout.bcol(k) * bw;
      int64_t j = 0;
      for (; j + 2 * L <= bw; j += 2 * L) {
#pragma GCC unroll 2
        for (int q = 0; q < 2; ++q) {
          V a, c;
          std::memcpy(&a, v + j + q * L, sizeof(V));
          std::memcpy(&c, b + j + q * L, sizeof(V));
          acc[q] += a * c;
        }
      }
      for (; j < bw; ++j) tail += v[j] * b[j];
    }
    const V sum = acc[0] + acc[1];
    T out = tail;
    for (int q = 0; q < L; ++q) out += sum[q];
    return out;
  }

  // y[bcol * bw, +bw] += a * (the row's bw values) over row r's blocks, in
  // whole vectors.
  template <int VB>
  COPPICE_INLINE void axpy_row(int64_t r, T a, T* y) const {
    using V = typename Vec<T, VB>::type;
    constexpr int L = Vec<T, VB>::kLanes;
    const int64_t br = r / bh, i = r % bh;
    const int64_t k0 = layout.block_begin(br), k1 = layout.block_end(br);
    for (int64_t k = k0; k < k1; ++k) {
      const T* v = val + layout.offset(k, i);
      T* c = y + layout.bcol(k) * bw;
      int64_t j = 0;
      for (; j + L <= bw; j += L) {
        V x, z;
        std::memcpy(&x, v + j, sizeof(V));
        std::memcpy(&z, c + j, sizeof(V));
        z += a * x;
        std::memcpy(c + j, &z, sizeof(V));
      }
      for (; j < bw; ++j) c[j] += a * v[j];
    }
  }

  template <int VB>
  COPPICE_INLINE void scatter_row(int64_t r, const T* brow, T* C, int64_t ldc, int64_t w) const {
    const int64_t br = r / bh, i = r % bh;
    const int64_t k0 = layout.block_begin(br), k1 = layout.block_end(br);
    const int64_t bwl = bw;
    scatter_panel<VB, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          for (int64_t k = k0; k < k1; ++k) {
            const T* v = val + layout.offset(k, i);
            T* c = C + layout.bcol(k) * bwl * ldc;
            for (int64_t j = 0; j < bwl; ++j) f(c + j * ldc, v[j]);
          }
        },
        brow, w);
  }
};

// ---- one ISA each: rows [r0, r1) of M against a packed panel ---------------

// C[r, 0:w] = (M @ B)[r] for r in [r0, r1); C's rows ldc apart.
template <int VB, typename T, typename M>
COPPICE_INLINE void gather_rows_isa(const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb, T* C, int64_t ldc,
                                    int64_t w) {
  for (int64_t r = r0; r < r1; ++r) m.template gather_row<VB>(r, B, ldb, C + r * ldc, w);
}

// C[.., 0:w] += M[r]^T B[r] for r in [r0, r1).
template <int VB, typename T, typename M>
COPPICE_INLINE void scatter_rows_isa(const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb, T* C, int64_t ldc,
                                     int64_t w) {
  for (int64_t r = r0; r < r1; ++r) m.template scatter_row<VB>(r, B + r * ldb, C, ldc, w);
}

template <typename T, typename M>
__attribute__((target("avx2,fma"))) void gather_rows_avx2(const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb,
                                                          T* C, int64_t ldc, int64_t w) {
  gather_rows_isa<32, T>(m, r0, r1, B, ldb, C, ldc, w);
}
template <typename T, typename M>
void gather_rows_sse(const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t w) {
  gather_rows_isa<16, T>(m, r0, r1, B, ldb, C, ldc, w);
}
template <typename T, typename M>
__attribute__((target("avx2,fma"))) void scatter_rows_avx2(const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb,
                                                           T* C, int64_t ldc, int64_t w) {
  scatter_rows_isa<32, T>(m, r0, r1, B, ldb, C, ldc, w);
}
template <typename T, typename M>
void scatter_rows_sse(const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t w) {
  scatter_rows_isa<16, T>(m, r0, r1, B, ldb, C, ldc, w);
}

// Y[t, r] = dot(M row r, X row t) for r in [r0, r1), t < mx: the product
// of a few rows of X by M^T, one pass over M per row of X.
template <int VB, typename T, typename M>
COPPICE_INLINE void dot_rows_isa(const M& m, int64_t r0, int64_t r1, const T* X, int64_t ldx, int64_t mx, T* Y,
                                 int64_t ldy) {
  for (int64_t t = 0; t < mx; ++t) {
    for (int64_t r = r0; r < r1; ++r) Y[t * ldy + r] = m.template dot_row<VB>(r, X + t * ldx);
  }
}
template <typename T, typename M>
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const M& m, int64_t r0, int64_t r1, const T* X, int64_t ldx,
                                                       int64_t mx, T* Y, int64_t ldy) {
  dot_rows_isa<32, T>(m, r0, r1, X, ldx, mx, Y, ldy);
}
template <typename T, typename M>
void dot_rows_sse(const M& m, int64_t r0, int64_t r1, const T* X, int64_t ldx, int64_t mx, T* Y, int64_t ldy) {
  dot_rows_isa<16, T>(m, r0, r1, X, ldx, mx, Y, ldy);
}

// Y[t, :] = X[t, :] @ M for t in [t0, t1): M's rows scaled by X's entries and
// added into Y's row (zeroed here). X's zeros are not skipped: 0 * inf is a
// NaN here as in the panels.
template <int VB, typename T, typename M>
COPPICE_INLINE void axpy_rows_isa(const M& m, int64_t t0, int64_t t1, const T* X, int64_t ldx, T* Y, int64_t ldy) {
  for (int64_t t = t0; t < t1; ++t) {
    T* y = Y + t * ldy;
    std::fill(y, y + m.cols, T(0));
    for (int64_t r = 0; r < m.rows; ++r) { m.template axpy_row<VB>(r, X[t * ldx + r], y); }
  }
}
template <typename T, typename M>
__attribute__((target("avx2,fma"))) void axpy_rows_avx2(const M& m, int64_t t0, int64_t t1, const T* X, int64_t ldx,
                                                        T* Y, int64_t ldy) {
  axpy_rows_isa<32, T>(m, t0, t1, X, ldx, Y, ldy);
}
template <typename T, typename M>
void axpy_rows_sse(const M& m, int64_t t0, int64_t t1, const T* X, int64_t ldx, T* Y, int64_t ldy) {
  axpy_rows_isa<16, T>(m, t0, t1, X, ldx, Y, ldy);
}

template <typename T, typename M>
void gather_rows(bool avx2, const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t w) {
  if (avx2) {
    gather_rows_avx2<T>(m, r0, r1, B, ldb, C, ldc, w);
  } else {
    gather_rows_sse<T>(m, r0, r1, B, ldb, C, ldc, w);
  }
}
template <typename T, typename M>
void scatter_rows(bool avx2, const M& m, int64_t r0, int64_t r1, const T* B, int64_t ldb, T* C, int64_t ldc,
                  int64_t w) {
  if (avx2) {
    scatter_rows_avx2<T>(m, r0, r1, B, ldb, C, ldc, w);
  } else {
    scatter_rows_sse<T>(m, r0, r1, B, ldb, C, ldc, w);
  }
}

// ---- packing -------------------------------------------------------------

// dst [rows, w] (row stride w) = src[:, 0:w] (row stride lds).
template <typename T>
void pack_columns(const T* src, int64_t lds, int64_t rows, int64_t w, T* dst) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * w, src + r * lds, static_cast<size_t>(w) * sizeof(T));
}

// dst [cols, P] = src[0:h, 0:cols]^T (src rows lds apart), zero past h.
template <typename T>
void pack_transposed(const T* src, int64_t lds, int64_t h, int64_t cols, int64_t P, T* dst) {
  if (h < P) std::fill(dst, dst + cols * P, T(0));
  constexpr int64_t kStrip = 64;  // columns per strip: the destination rows of one strip stay in cache
  for (int64_t j0 = 0; j0 < cols; j0 += kStrip) {
    const int64_t j1 = std::min(cols, j0 + kStrip);
    for (int64_t i = 0; i < h; ++i) {
      const T* s = src + i * lds;
      for (int64_t j = j0; j < j1; ++j) dst[j * P + i] = s[j];
    }
  }
}

// dst[0:h, 0:rows] (rows ldd apart) = src [rows, P]^T.
template <typename T>
void unpack_transposed(const T* src, int64_t rows, int64_t P, int64_t h, T* dst, int64_t ldd) {
  constexpr int64_t kStrip = 64;
  for (int64_t o0 = 0; o0 < rows; o0 += kStrip) {
    const int64_t o1 = std::min(rows, o0 + kStrip);
    for (int64_t i = 0; i < h; ++i) {
      T* d = dst + i * ldd;
      for (int64_t o = o0; o < o1; ++o) d[o] = src[o * P + i];
    }
  }
}

// ---- drivers -------------------------------------------------------------

// Rows per parallel chunk so that a chunk does about 2^16 multiply-adds.
template <typename M>
int64_t row_grain(const M& m, int64_t width) {
  const int64_t probe = std::min<int64_t>(std::max<int64_t>(m.rows, 1), 64);
  int64_t total = 0;
  for (int64_t r = 0; r < std::min(probe, m.rows); ++r) total += m.nnz_of(r);
  const int64_t per_row = std::max<int64_t>(1, (total / probe + 1) * std::max<int64_t>(width, 1));
  return std::max<int64_t>(1, 65536 / per_row);
}

// C [m.rows, n] = M @ B, B [m.cols, n] with row stride ldb; C row stride ldc.
template <typename T, typename M>
void spmm_gather(const M& m, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t n) {
  if (n == 0 || m.rows == 0) return;
  const bool avx2 = use_avx2();
  const int64_t k = m.cols;
  const int64_t P = panel_columns<T>(avx2, k);
  std::vector<T> panel(static_cast<size_t>(k * std::min(P, n)));
  const int64_t grain = row_grain(m, P);
  for (int64_t p0 = 0; p0 < n; p0 += P) {
    const int64_t w = std::min(P, n - p0);
    // One packed panel for all threads: it is read from the shared cache.
    cpu::parallel_for(0, k, 1024, [&](int64_t j0, int64_t j1) {
      pack_columns(B + j0 * ldb + p0, ldb, j1 - j0, w, panel.data() + j0 * w);
    });
    cpu::parallel_for(0, m.rows, grain, [&](int64_t r0, int64_t r1) {
      gather_rows<T>(avx2, m, r0, r1, panel.data(), w, C + p0, ldc, w);
    });
  }
}

// C [m.cols, n] = M^T @ B, B [m.rows, n]: each thread owns whole panels of C's
// columns, packs its panel of B and accumulates into a packed panel of C.
template <typename T, typename M>
void spmm_scatter(const M& m, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t n) {
  if (n == 0 || m.cols == 0) return;
  const bool avx2 = use_avx2();
  int64_t P = panel_columns<T>(avx2, m.rows + m.cols);
  // Narrower panels when there are too few for the threads.
  while (P > 8 && (n + P - 1) / P < cpu::num_threads()) P /= 2;
  const int64_t panels = (n + P - 1) / P;
  cpu::parallel_for(0, panels, 1, [&](int64_t q0, int64_t q1) {
    std::vector<T> bp(static_cast<size_t>(m.rows * P)), cp(static_cast<size_t>(m.cols * P));
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t p0 = q * P, w = std::min(P, n - p0);
      pack_columns(B + p0, ldb, m.rows, w, bp.data());
      std::fill(cp.begin(), cp.end(), T(0));
      scatter_rows<T>(avx2, m, 0, m.rows, bp.data(), w, cp.data(), w, w);
      for (int64_t r = 0; r < m.cols; ++r) {
        std::memcpy(C + r * ldc + p0, cp.data() + r * w, static_cast<size_t>(w) * sizeof(T));
      }
    }
  });
}

// Y [mx, out] = X @ M^T (transposed) or X @ M, X [mx, k] with row stride ldx:
// per block of P rows of X, its transpose XT [k, P] is multiplied by M
// (gather: YT = M @ XT) or by M^T (scatter: YT = M^T @ XT), and YT [out, P]
// is transposed into Y. Parallel over blocks; over M's rows when X is short.
template <typename T, typename M>
void dense_spmm(const T* X, int64_t ldx, int64_t mx, const M& m, bool transposed, T* Y, int64_t ldy) {
  const bool avx2 = use_avx2();
  const int64_t k = transposed ? m.cols : m.rows;
  const int64_t out = transposed ? m.rows : m.cols;
  const int64_t P = panel_columns<T>(avx2, transposed ? k : k + out);
  if (mx == 0 || out == 0) return;
  if (transposed && mx <= M::kDotRows) {
    // A few rows of X (batch-1 inference): a panel pads them to P columns and
    // does P columns' work whatever mx is; dot products along M's rows do mx
    // rows' worth.
    cpu::parallel_for(0, out, row_grain(m, mx), [&](int64_t r0, int64_t r1) {
      if (avx2) {
        dot_rows_avx2<T>(m, r0, r1, X, ldx, mx, Y, ldy);
      } else {
        dot_rows_sse<T>(m, r0, r1, X, ldx, mx, Y, ldy);
      }
    });
    return;
  }
  if (!transposed && mx <= M::kDotRows) {  // the same for X @ M: M's rows added into Y's, a row of X at a time
    cpu::parallel_for(0, mx, 1, [&](int64_t t0, int64_t t1) {
      if (avx2) {
        axpy_rows_avx2<T>(m, t0, t1, X, ldx, Y, ldy);
      } else {
        axpy_rows_sse<T>(m, t0, t1, X, ldx, Y, ldy);
      }
    });
    return;
  }
  const int64_t blocks = (mx + P - 1) / P;
  if (transposed && blocks < 2 * cpu::num_threads()) {
    std::vector<T> xt(static_cast<size_t>(k * P)), yt(static_cast<size_t>(out * P));
    for (int64_t q = 0; q < blocks; ++q) {
      const int64_t i0 = q * P, h = std::min(P, mx - i0);
      pack_transposed(X + i0 * ldx, ldx, h, k, P, xt.data());
      cpu::parallel_for(0, out, row_grain(m, P), [&](int64_t o0, int64_t o1) {
        gather_rows<T>(avx2, m, o0, o1, xt.data(), P, yt.data(), P, P);
      });
      unpack_transposed(yt.data(), out, P, h, Y + i0 * ldy, ldy);
    }
    return;
  }
  cpu::parallel_for(0, blocks, 1, [&](int64_t q0, int64_t q1) {
    std::vector<T> xt(static_cast<size_t>(k * P)), yt(static_cast<size_t>(out * P));
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t i0 = q * P, h = std::min(P, mx - i0);
      pack_transposed(X + i0 * ldx, ldx, h, k, P, xt.data());
      if (transposed) {
        gather_rows<T>(avx2, m, 0, m.rows, xt.data(), P, yt.data(), P, P);
      } else {
        std::fill(yt.begin(), yt.end(), T(0));
        scatter_rows<T>(avx2, m, 0, m.rows, xt.data(), P, yt.data(), P, P);
      }
      unpack_transposed(yt.data(), out, P, h, Y + i0 * ldy, ldy);
    }
  });
}

}  // namespace coppice::sparse_cpu
