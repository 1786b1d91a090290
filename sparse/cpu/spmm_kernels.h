// The loops under every CPU SpMM (internal to sparse/cpu).
//
// A sparse matrix M reaches these loops as an "accessor": its rows as lists
// of entries, either single (CSR-like: column index, value) or in blocks
// (BSR, Blocked-ELL: a block column and bw consecutive values). Two row
// operations cover every product:
//   gather_row(r, B, ldb, C, w):      C[0:w]  = sum_e v_e * B[col_e, 0:w]
//   scatter_row(r, Brow, C, ldc, w):  C[col_e, 0:w] += v_e * Brow[0:w]
// so that
//   M @ X    = gather over rows of M        (parallel over rows, per panel of X's columns)
//   M^T @ X  = scatter over rows of M       (parallel over panels of X's columns)
//   X @ M^T  = (M @ X^T)^T: gather on transposed blocks of R rows of X
//   X @ M    = (M^T @ X^T)^T: scatter on transposed blocks of R rows of X
// Inner loops run over contiguous runs of dense rows with register-held
// accumulators (GCC vector extensions; the compiler picks the instructions
// for the target), and the accessors are templates: no virtual calls or
// dispatch per element. 16-bit values are converted to f32 before they get
// here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cpu/parallel.h"

namespace coppice::sparse_cpu {

// 32-byte vectors: 8 floats or 4 doubles.
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(32)));
  static constexpr int kLanes = 8;
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(32)));
  static constexpr int kLanes = 4;
};

// Columns one register-blocked tile accumulates: 4 vectors (8 SSE registers,
// or 4 AVX ones), which leaves room for the loads.
template <typename T>
inline constexpr int kTile = 4 * Vec<T>::kLanes;

// C[0:W] (=, or += when Accumulate) sum over entries of v * B[col, 0:W];
// `entries(f)` calls f(row pointer into B, value) for each entry.
template <int W, typename T, typename Entries>
inline __attribute__((always_inline)) void gather_tile(const Entries& entries, T* c) {
  using V = typename Vec<T>::type;
  constexpr int L = Vec<T>::kLanes;
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

// c[0:w] += v * b[0:w].
template <typename T>
inline __attribute__((always_inline)) void axpy(T v, const T* __restrict b, T* __restrict c, int64_t w) {
  using V = typename Vec<T>::type;
  constexpr int L = Vec<T>::kLanes;
  int64_t j = 0;
  for (; j + 2 * L <= w; j += 2 * L) {
    V x0, x1, c0, c1;
    std::memcpy(&x0, b + j, sizeof(V));
    std::memcpy(&x1, b + j + L, sizeof(V));
    std::memcpy(&c0, c + j, sizeof(V));
    std::memcpy(&c1, c + j + L, sizeof(V));
    c0 += v * x0;
    c1 += v * x1;
    std::memcpy(c + j, &c0, sizeof(V));
    std::memcpy(c + j + L, &c1, sizeof(V));
  }
  for (; j + L <= w; j += L) {
    V x, y;
    std::memcpy(&x, b + j, sizeof(V));
    std::memcpy(&y, c + j, sizeof(V));
    y += v * x;
    std::memcpy(c + j, &y, sizeof(V));
  }
  for (; j < w; ++j) c[j] += v * b[j];
}

// C[0:w] = sum over entries of v * B[col, 0:w], tile by tile.
template <typename T, typename Entries>
inline __attribute__((always_inline)) void gather_panel(const Entries& entries, T* c, int64_t w) {
  constexpr int L = Vec<T>::kLanes;
  int64_t j = 0;
  for (; j + kTile<T> <= w; j += kTile<T>) {
    gather_tile<kTile<T>, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + j, v); });
        },
        c + j);
  }
  for (; j + L <= w; j += L) {
    gather_tile<L, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + j, v); });
        },
        c + j);
  }
  const int64_t tail = w - j;
  for (int64_t t = 0; t < tail; ++t) {
    const int64_t jt = j + t;
    gather_tile<1, T>(
        [&](auto&& f) __attribute__((always_inline)) {
          entries([&](const T* b, T v) __attribute__((always_inline)) { f(b + jt, v); });
        },
        c + jt);
  }
}

// Rows of single entries: row r holds entries [begin(r), end(r)) of idx/val.
// CSR (and CSC as the rows of the transpose), coalesced COO, n:m.
template <typename T, typename I, typename P>
struct CompressedRows {
  const P* row_begin;  // [rows]; row r's entries are [row_begin[r], row_end[r])
  const P* row_end;
  const I* idx;
  const T* val;
  int64_t rows;  // of M
  int64_t cols;  // of M

  int64_t nnz_of(int64_t r) const { return static_cast<int64_t>(row_end[r] - row_begin[r]); }

  void gather_row(int64_t r, const T* B, int64_t ldb, T* c, int64_t w) const {
    const int64_t b0 = static_cast<int64_t>(row_begin[r]), e0 = static_cast<int64_t>(row_end[r]);
    const I* ix = idx;
    const T* vx = val;
    gather_panel<T>(
        [&](auto&& f) __attribute__((always_inline)) {
          for (int64_t e = b0; e < e0; ++e) f(B + static_cast<int64_t>(ix[e]) * ldb, vx[e]);
        },
        c, w);
  }

  void scatter_row(int64_t r, const T* brow, T* C, int64_t ldc, int64_t w) const {
    const int64_t b0 = static_cast<int64_t>(row_begin[r]), e0 = static_cast<int64_t>(row_end[r]);
    for (int64_t e = b0; e < e0; ++e) axpy<T>(val[e], brow, C + static_cast<int64_t>(idx[e]) * ldc, w);
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

  void gather_row(int64_t r, const T* B, int64_t ldb, T* c, int64_t w) const {
    const int64_t br = r / bh, i = r % bh;
    const int64_t k0 = layout.block_begin(br), k1 = layout.block_end(br);
    const int64_t bwl = bw;
    gather_panel<T>(
        [&](auto&& f) __attribute__((always_inline)) {
          for (int64_t k = k0; k < k1; ++k) {
            const T* v = val + layout.offset(k, i);
            const T* b = B + layout.bcol(k) * bwl * ldb;
            for (int64_t j = 0; j < bwl; ++j) f(b + j * ldb, v[j]);
          }
        },
        c, w);
  }

  void scatter_row(int64_t r, const T* brow, T* C, int64_t ldc, int64_t w) const {
    const int64_t br = r / bh, i = r % bh;
    for (int64_t k = layout.block_begin(br); k < layout.block_end(br); ++k) {
      const T* v = val + layout.offset(k, i);
      T* c = C + layout.bcol(k) * bw * ldc;
      for (int64_t j = 0; j < bw; ++j) axpy<T>(v[j], brow, c + j * ldc, w);
    }
  }
};

// Bytes of the dense operand one panel should keep in a core's L2 cache.
inline constexpr int64_t kPanelBytes = 256 * 1024;

// Columns per panel so that `rows` rows of a panel take about kPanelBytes.
template <typename T>
int64_t panel_width(int64_t rows, int64_t n) {
  int64_t w = kPanelBytes / (std::max<int64_t>(rows, 1) * static_cast<int64_t>(sizeof(T)));
  w = std::max<int64_t>(kTile<T>, w / kTile<T> * kTile<T>);
  return std::min(w, n);
}

// Rows per parallel chunk so that a chunk does about `target` entries of work.
template <typename M>
int64_t row_grain(const M& m, int64_t work_per_entry) {
  const int64_t rows = std::max<int64_t>(m.rows, 1);
  int64_t total = 0;
  // An estimate from the first rows is enough to size chunks.
  const int64_t probe = std::min<int64_t>(rows, 64);
  for (int64_t r = 0; r < probe; ++r) total += m.nnz_of(r);
  const int64_t per_row = std::max<int64_t>(1, total / probe * std::max<int64_t>(work_per_entry, 1));
  return std::max<int64_t>(1, 16384 / per_row);
}

// C [m.rows, n] = M @ B, B [m.cols, n] with row stride ldb; C row stride ldc.
template <typename T, typename M>
void spmm_gather(const M& m, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t n) {
  if (n == 0 || m.rows == 0) return;
  const int64_t pw = panel_width<T>(m.cols, n);
  const int64_t grain = row_grain(m, pw);
  for (int64_t p0 = 0; p0 < n; p0 += pw) {
    const int64_t w = std::min(pw, n - p0);
    cpu::parallel_for(0, m.rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) m.gather_row(r, B + p0, ldb, C + r * ldc + p0, w);
    });
  }
}

// C [m.cols, n] = M^T @ B, B [m.rows, n]: each thread owns whole panels of C's columns.
template <typename T, typename M>
void spmm_scatter(const M& m, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t n) {
  for (int64_t r = 0; r < m.cols; ++r) std::fill_n(C + r * ldc, n, T(0));
  if (n == 0 || m.rows == 0) return;
  constexpr int L = Vec<T>::kLanes;
  // Panels of C and B in L2 together; at least one per thread when n allows.
  int64_t pw = kPanelBytes / (std::max<int64_t>(m.rows + m.cols, 1) * static_cast<int64_t>(sizeof(T)));
  const int64_t per_thread = (n + cpu::num_threads() - 1) / cpu::num_threads();
  pw = std::min(pw, per_thread);
  pw = std::max<int64_t>(L, (pw + L - 1) / L * L);
  const int64_t panels = (n + pw - 1) / pw;
  cpu::parallel_for(0, panels, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t p0 = q * pw, w = std::min(pw, n - p0);
      for (int64_t r = 0; r < m.rows; ++r) m.scatter_row(r, B + r * ldb + p0, C + p0, ldc, w);
    }
  });
}

// Rows of X per transposed block: 64 bytes of each column.
template <typename T>
inline constexpr int64_t kBlockRows = 64 / sizeof(T);

// Y [mx, out] = X @ M^T (Transposed) or X @ M, X [mx, k] with row stride ldx:
// per block of R rows of X, its transpose XT [k, R] is multiplied by M
// (gather: YT = M @ XT) or M^T (scatter: YT = M^T @ XT), and YT [out, R] is
// transposed into Y. Parallel over blocks.
template <typename T, typename M>
void dense_spmm(const T* X, int64_t ldx, int64_t mx, const M& m, bool transposed, T* Y, int64_t ldy) {
  constexpr int64_t R = kBlockRows<T>;
  const int64_t k = transposed ? m.cols : m.rows;
  const int64_t out = transposed ? m.rows : m.cols;
  if (mx == 0 || out == 0) return;
  const int64_t blocks = (mx + R - 1) / R;
  auto run = [&](int64_t q0, int64_t q1) {
    std::vector<T> xt(static_cast<size_t>(k * R)), yt(static_cast<size_t>(out * R));
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t i0 = q * R, h = std::min(R, mx - i0);
      for (int64_t i = 0; i < h; ++i) {
        const T* x = X + (i0 + i) * ldx;
        for (int64_t j = 0; j < k; ++j) xt[static_cast<size_t>(j * R + i)] = x[j];
      }
      for (int64_t i = h; i < R; ++i) {
        for (int64_t j = 0; j < k; ++j) xt[static_cast<size_t>(j * R + i)] = T(0);
      }
      if (transposed) {
        for (int64_t o = 0; o < out; ++o) m.gather_row(o, xt.data(), R, yt.data() + o * R, R);
      } else {
        std::fill(yt.begin(), yt.end(), T(0));
        for (int64_t j = 0; j < k; ++j) m.scatter_row(j, xt.data() + j * R, yt.data(), R, R);
      }
      for (int64_t i = 0; i < h; ++i) {
        T* y = Y + (i0 + i) * ldy;
        for (int64_t o = 0; o < out; ++o) y[o] = yt[static_cast<size_t>(o * R + i)];
      }
    }
  };
  if (blocks >= 2 * cpu::num_threads() || !transposed) {
    cpu::parallel_for(0, blocks, 1, run);
    return;
  }
  // Few blocks (a short X): split the gather over M's rows instead.
  std::vector<T> xt(static_cast<size_t>(k * R)), yt(static_cast<size_t>(out * R));
  for (int64_t q = 0; q < blocks; ++q) {
    const int64_t i0 = q * R, h = std::min(R, mx - i0);
    std::fill(xt.begin(), xt.end(), T(0));
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t j = 0; j < k; ++j) xt[static_cast<size_t>(j * R + i)] = X[(i0 + i) * ldx + j];
    }
    cpu::parallel_for(0, out, row_grain(m, R), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) m.gather_row(o, xt.data(), R, yt.data() + o * R, R);
    });
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t o = 0; o < out; ++o) Y[(i0 + i) * ldy + o] = yt[static_cast<size_t>(o * R + i)];
    }
  }
}

}  // namespace coppice::sparse_cpu
