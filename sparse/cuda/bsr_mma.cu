// BSR products on tensor cores through mma.sync (bf16/f16: m16n8k16 with
// ldmatrix; f32 on TF32: m16n8k8 with fragments read element by element) and
// a cp.async pipeline, for square 16x16, 32x32, 64x64 and 128x128 blocks
// (bsr_mma.h).
//
// Why not WMMA (the square-block SpMM bsr_tiles.cu had, since deleted):
// on the H100 (4096^2 at 90 %, 32x32 bf16 blocks, batch 4096) the WMMA
// product took 0.157 ms, issue-bound on address arithmetic (Nsight Compute:
// integer pipe busiest, IPC 2.3, L2 at 55 %). Here each warp owns a 32 x 64
// output tile (16 x 64 with 16x16 blocks; 64 f32 accumulators per thread),
// fragments come from shared memory by ldmatrix (.trans where the operand is
// stored the other way), two k16 steps' fragments load before their mmas,
// and every thread copies fixed 16-byte runs of each staged block and x slice
// (cp.async), so the loop is almost all loads and mmas: 0.110 ms, with L2 the
// busiest unit (77 %). What bounds it: each x slice is read once per block
// that uses its column (docs/benchmarks.md, issue 17).
//
// SpMM, y = op(S) @ x: a thread block owns one output block row (B rows)
// times kTileN columns of x (ProductTile: 512 for 32x32 bf16 blocks, 256 for
// 64x64; half as many in TF32) and walks that row's stored blocks; per block
// it stages the block as stored (op(S) = S^T reads it transposed) and the
// [B, kTileN] slice of x that the block multiplies, each with its operand's
// contiguous dimension contiguous, the next block's copies in flight while
// this one multiplies. Rows are taken longest first
// (BsrProductArgs::row_order), and consecutive thread blocks take
// consecutive rows of the same column tile, so that tile of x stays in L2.
// Bias and relu are applied in the write-out (epilogue.cuh), from an f32
// tile in shared memory, with 16-byte stores along y's contiguous dimension;
// so are gelu with its pre-activation kept (linear_gelu) and gelu's gradient
// (matmul_gelu_backward, reading the pre-activation), in the erf form or the
// tanh one (gelu_write_out.h), which save the separate passes of a
// transformer MLP's activation.
//
// SDDMM, values[e] = a[rows of e, :] @ b[:, cols of e]: a thread block takes
// up to bsr_mma_sddmm_group stored blocks of one block row (a run of
// BsrSddmmArgs::group_begin), so the [B, kStepK] slice of a is staged once for
// all of them; one warp per 32 rows of each block (16 of a 128x128 block).
// Where the runs are too few to fill the GPU, k is split in ranges
// (BsrSddmmArgs::splits) whose partial sums a second kernel adds in range
// order. Asked for a's row sums (a linear's bias gradient, a = dy^T), the
// first run of each block row also sums the slices of a it stages anyway,
// and each row without a stored block gets a thread block that only does
// that, which saves the bias gradient's own pass over dy. On Hopper, the
// products and SDDMMs of 32x32, 64x64 and 128x128 blocks at a linear's
// shapes run on bsr_wgmma.cu and bsr_wgmma32.cu instead (bsr_products.cc
// chooses).
//
// Operands that are not 16-byte aligned, or strided other than along one
// dimension, and tiles at the edge of x are staged element by element; the
// rest is copied in 16-byte cp.async chunks. No atomics: every output
// element is summed by one thread in a fixed order, so results repeat bit for
// bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "sparse/cuda/bsr_mma.h"
#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/sddmm_run.cuh"
#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/shared_memory_limit.h"

namespace coppice::sparse_cuda {
namespace {

// Elements per 16-byte run of T: 8 of bf16/f16, 4 of f32 (TF32).
template <typename T>
constexpr int kRun = 16 / static_cast<int>(sizeof(T));

// Padding of a staged row, in elements. 16-bit types: 16 bytes (rows of 48,
// 80, 144 or 528 bytes put the eight rows an ldmatrix reads on distinct
// banks). f32, whose TF32 fragments are read element by element (lane g, t
// reads row g and column t of an 8x4 patch): a pitch of 4 mod 32 words where
// the patch's rows are the staged rows ([m][k]), 8 mod 32 where they are its
// columns ([k][m]).
template <typename T>
constexpr int pad_of(bool by_k) {
  return sizeof(T) == 2 ? 8 : by_k ? 8 : 4;
}

using cuda::commit_copies;
using cuda::copy16_async;
using cuda::ldmatrix_x4;
using cuda::mma_16816;
using cuda::wait_copies;

// c (16x8, f32) += a (16x8, TF32) * b (8x8, TF32).
__device__ __forceinline__ void mma_1688_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// f32 rounded to TF32 (nearest, ties away), as the WMMA path and
// wmma::__float_to_tf32 round.
__device__ __forceinline__ uint32_t to_tf32(float v) {
  uint32_t out;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(out) : "f"(v));
  return out;
}

// The TF32 warp_mma: fragments read element by element (ldmatrix moves 16-bit
// halves, so its .trans cannot transpose f32), rounded once as they load.
template <bool kAByK, bool kBByK, int kLen, int kCols, int kMTiles>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[kMTiles][kCols / 8][4], const float* as, int lda, int m0,
                                              const float* bs, int ldb, int n0, int lane) {
  const int g = lane / 4, t = lane % 4;
  auto a_at = [&](int m, int k) { return to_tf32(kAByK ? as[k * lda + m] : as[m * lda + k]); };
  auto b_at = [&](int k, int n) { return to_tf32(kBByK ? bs[k * ldb + n] : bs[n * ldb + k]); };
#pragma unroll
  for (int k = 0; k < kLen; k += 8) {
    uint32_t af[kMTiles][4], bf[kCols / 8][2];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
      const int r = m0 + mi * 16 + g;
      af[mi][0] = a_at(r, k + t);
      af[mi][1] = a_at(r + 8, k + t);
      af[mi][2] = a_at(r, k + t + 4);
      af[mi][3] = a_at(r + 8, k + t + 4);
    }
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
      const int c = n0 + nt * 8 + g;
      bf[nt][0] = b_at(k + t, c);
      bf[nt][1] = b_at(k + t + 4, c);
    }
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int nt = 0; nt < kCols / 8; ++nt) mma_1688_tf32(acc[mi][nt], af[mi], bf[nt][0], bf[nt][1]);
    }
  }
}

// Where lane `lane` points ldmatrix_x4<kByK> for the A fragment of rows
// m0..m0+15 and inner k0..k0+15 of a tile stored [m][k] (!kByK) or [k][m]
// (kByK, read transposed), row pitch ld: a0..a3 of mma.m16n8k16.
template <bool kByK, typename T>
__device__ __forceinline__ const T* a_fragment(const T* base, int ld, int m0, int k0, int lane) {
  const int q = lane / 8, i = lane % 8;
  if constexpr (kByK) return base + (k0 + (q / 2) * 8 + i) * ld + m0 + (q % 2) * 8;
  return base + (m0 + (q % 2) * 8 + i) * ld + k0 + (q / 2) * 8;
}

// The same for the B fragments of columns n0..n0+15 (two n8 tiles: {r0, r1}
// and {r2, r3}) and inner k0..k0+15 of a tile stored [n][k] (!kByK) or
// [k][n] (kByK).
template <bool kByK, typename T>
__device__ __forceinline__ const T* b_fragment(const T* base, int ld, int n0, int k0, int lane) {
  const int q = lane / 8, i = lane % 8;
  if constexpr (kByK) return base + (k0 + (q % 2) * 8 + i) * ld + n0 + (q / 2) * 8;
  return base + (n0 + (q / 2) * 8 + i) * ld + k0 + (q % 2) * 8;
}

// A warp's 32 x kCols tile, acc (2 m16 tiles by kCols / 8 n8 tiles), plus
// A[m0.., 0..kLen) @ B[0..kLen, n0..] from staged tiles (A stored as
// a_fragment<kAByK> reads it, B as b_fragment<kBByK>). The fragments of two
// k16 steps load before their mmas issue, so that their latencies overlap.
template <typename T, bool kAByK, bool kBByK, int kLen, int kCols, int kMTiles>
__device__ __forceinline__ void warp_mma(float (&acc)[kMTiles][kCols / 8][4], const T* as, int lda, int m0, const T* bs,
                                         int ldb, int n0, int lane) {
  if constexpr (std::is_same_v<T, float>) {
    warp_mma_tf32<kAByK, kBByK, kLen, kCols, kMTiles>(acc, as, lda, m0, bs, ldb, n0, lane);
    return;
  } else {
    constexpr int kBatch = kLen >= 32 ? 2 : 1;
    static_assert(kLen % (16 * kBatch) == 0, "the inner length is a multiple of the k16 steps loaded together");
#pragma unroll
    for (int k2 = 0; k2 < kLen; k2 += 16 * kBatch) {
      uint32_t af[kBatch][kMTiles][4], bf[kBatch][kCols / 16][4];
#pragma unroll
      for (int s = 0; s < kBatch; ++s) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
          ldmatrix_x4<kAByK>(af[s][mi], a_fragment<kAByK>(as, lda, m0 + mi * 16, k2 + 16 * s, lane));
#pragma unroll
        for (int nj = 0; nj < kCols / 16; ++nj)
          ldmatrix_x4<kBByK>(bf[s][nj], b_fragment<kBByK>(bs, ldb, n0 + nj * 16, k2 + 16 * s, lane));
      }
#pragma unroll
      for (int s = 0; s < kBatch; ++s) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
          for (int nt = 0; nt < kCols / 8; ++nt)
            mma_16816<T>(acc[mi][nt], af[s][mi], bf[s][nt / 2][(nt % 2) * 2], bf[s][nt / 2][(nt % 2) * 2 + 1]);
        }
      }
    }
  }
}

// kRun<T> consecutive elements of a strided matrix into shared memory: one
// cp.async when `vec` (the run is contiguous and 16-byte aligned), else
// element by element, 0 for the first `valid` <= j < kRun.
template <typename T>
__device__ __forceinline__ void stage_run(T* dst, const T* src, int64_t step, bool vec, int valid) {
  if (vec && valid >= kRun<T>) {
    copy16_async(dst, src);
    return;
  }
  const T zero = from_float<T>(0.0f);
  for (int j = 0; j < kRun<T>; ++j) dst[j] = j < valid ? src[j * step] : zero;
}

// Two adjacent outputs, rounded to T, stored at dst.
template <typename T>
__device__ __forceinline__ void store2(T* dst, float lo, float hi) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
  } else {
    T v[2] = {from_float<T>(lo), from_float<T>(hi)};
    uint32_t out;
    memcpy(&out, v, sizeof(out));
    *reinterpret_cast<uint32_t*>(dst) = out;
  }
}

// ---- SpMM ----

// A thread block's shape: kWarpsM = B / 32 warps along the block row (32
// rows each) times kWarpsN along x's columns (64 each), kStages blocks in
// flight. Measured over 2-8 warps and 2-4 stages (H100, 4096^2 at 90 and
// 95 %, bf16): 32x32 blocks 8 warps (512 columns) 0.110 ms at 90 % (4
// warps: 0.116, 2: 0.124, 1: 0.146), 64x64 blocks 8 warps (256 columns)
// 0.074 ms (4 warps: 0.075); two stages as fast as three or four, and half
// the shared memory. bsr_mma_product takes the next narrower shape for
// 16-bit 32x32 and 64x64 blocks: faster at the transformer's shapes, where
// rows hold few blocks (it says by how much).
template <typename T, int kBlock, int kWarpsAlongN, int kStagesInFlight>
struct ProductTile {
  static constexpr int B = kBlock;
  static constexpr int kWarpRows = B < 32 ? B : 32;  // rows of the block row per warp
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kWarpsM = B / kWarpRows;
  static constexpr int kWarpsN = kWarpsAlongN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kTileN = kWarpsN * 64;
  static constexpr int kStages = kStagesInFlight;
  static constexpr int kLdAmk = B + pad_of<T>(false);  // the block as stored: [m][k] (op(S) = S)
  static constexpr int kLdAkm = B + pad_of<T>(true);   // or [k][m] (S^T)
  static constexpr int kAElems = B * kLdAkm;
  static constexpr int kLdXnk = B + pad_of<T>(false);      // x slice stored [n][k] (x contiguous along k)
  static constexpr int kLdXkn = kTileN + pad_of<T>(true);  // or [k][n]
  static constexpr int kXElems = std::max(kTileN * kLdXnk, B* kLdXkn);
  static constexpr int kStageElems = kAElems + kXElems;
  static constexpr int kLdCnr = B + 4;       // f32 output tile stored [n][r] (y contiguous along rows)
  static constexpr int kLdCrn = kTileN + 4;  // or [r][n]
  static constexpr int kCBytes = std::max(kTileN * kLdCnr, B* kLdCrn) * 4;
  static constexpr int kSmemBytes = std::max(kStages * kStageElems * static_cast<int>(sizeof(T)), kCBytes);
};

struct ProductFlags {
  bool a_vec;   // the stored blocks are 16-byte aligned
  bool x_vec;   // x's runs along its contiguous dimension are 16-byte aligned
  bool y_rows;  // y is contiguous along op(S)'s rows (the transposed view a dense-left product writes)
  bool y_vec;   // and its runs are 16-byte aligned
};

// kATrans: op(S) = S^T, each stored block read transposed. kXByK: x(k, n)
// is contiguous along n, its slice stored [k][n]; else stored [n][k].
template <typename T, typename Tile, bool kATrans, bool kXByK>
__global__ void __launch_bounds__(Tile::kThreads) mma_sync_product_kernel(BsrProductArgs<T> p, ProductFlags flags) {
  constexpr int B = Tile::B;
  constexpr int kThreads = Tile::kThreads, kStages = Tile::kStages, kTileN = Tile::kTileN;
  extern __shared__ __align__(128) unsigned char smem[];
  T* stages = reinterpret_cast<T*>(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / Tile::kWarpsN, wn = warp % Tile::kWarpsN;
  const int64_t obr = p.row_order != nullptr ? p.row_order[blockIdx.x] : blockIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int32_t begin = p.ptr[obr];
  const int count = p.ptr[obr + 1] - begin;
  const StridedMatrix<const T>& x = p.x;

  // Full tiles of aligned operands (nearly all of them) take the fast path:
  // every thread copies the same runs of each block and x slice, at offsets
  // fixed here; the rest are staged run by run, element-wise where needed.
  constexpr int R = kRun<T>;
  static_assert(kTileN * B / R % kThreads == 0, "every thread copies the same number of x's runs");
  const bool fast = flags.a_vec && flags.x_vec && n0 + kTileN <= p.n;
  constexpr int kLdX = kXByK ? Tile::kLdXkn : Tile::kLdXnk;
  constexpr int kLdA = kATrans ? Tile::kLdAkm : Tile::kLdAmk;
  constexpr int kXRuns = kXByK ? kTileN / R : B / R;  // 16-byte runs per staged row of x
  constexpr int kXRowsPerPass = kThreads / kXRuns;
  constexpr int kARuns = B / R, kARowsPerPass = kThreads / kARuns;
  const int x_row = tid / kXRuns, x_col = (tid % kXRuns) * R;
  const int a_row = tid / kARuns, a_col = (tid % kARuns) * R;
  // x's element for staged row x_row and column x_col (k0 = 0), and the
  // steps to the next pass's row and per unit of k0.
  const T* x_base = kXByK ? x.data + x_row * x.row_stride + n0 + x_col : x.data + x_col + (n0 + x_row) * x.col_stride;
  const int64_t x_pass_step = kXRowsPerPass * (kXByK ? x.row_stride : x.col_stride);
  const int64_t x_k_step = kXByK ? x.row_stride : 1;

  auto load = [&](int stage, int32_t e) {
    T* a = stages + stage * Tile::kStageElems;
    T* xs = a + Tile::kAElems;
    const int64_t blk = p.bid != nullptr ? p.bid[e] : e;
    const T* vals = p.values + blk * B * B;
    const int64_t k0 = static_cast<int64_t>(p.kblk[e]) * B;
    if (fast) {
#pragma unroll
      for (int j = 0; j < (B * B / R + kThreads - 1) / kThreads; ++j) {  // fewer runs than threads: some idle
        const int r = a_row + j * kARowsPerPass;
        if (r < B) copy16_async(a + r * kLdA + a_col, vals + r * B + a_col);
      }
      const T* src = x_base + k0 * x_k_step;
#pragma unroll
      for (int j = 0; j < kTileN * B / R / kThreads; ++j) {
        copy16_async(xs + (x_row + j * kXRowsPerPass) * kLdX + x_col, src + j * x_pass_step);
      }
      return;
    }
    for (int i = tid; i < B * B / R; i += kThreads) {  // the block as stored, row by row
      const int r = i / (B / R), c = (i % (B / R)) * R;
      stage_run(a + r * kLdA + c, vals + r * B + c, 1, flags.a_vec, R);
    }
    if constexpr (kXByK) {
      for (int i = tid; i < B * (kTileN / R); i += kThreads) {
        const int kk = i / (kTileN / R), nq = (i % (kTileN / R)) * R;
        const int64_t gn = n0 + nq;
        const int valid = static_cast<int>(std::min<int64_t>(R, std::max<int64_t>(0, p.n - gn)));
        stage_run(xs + kk * Tile::kLdXkn + nq, x.data + (k0 + kk) * x.row_stride + gn * x.col_stride, x.col_stride,
                  flags.x_vec, valid);
      }
    } else {
      for (int i = tid; i < kTileN * (B / R); i += kThreads) {
        const int nn = i / (B / R), kq = (i % (B / R)) * R;
        const int64_t gn = n0 + nn;
        stage_run(xs + nn * Tile::kLdXnk + kq, x.data + (k0 + kq) * x.row_stride + gn * x.col_stride, x.row_stride,
                  flags.x_vec, gn < p.n ? R : 0);
      }
    }
  };

  float acc[Tile::kMTiles][8][4] = {};
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) load(s, begin + s);
    commit_copies();
  }
  for (int i = 0; i < count; ++i) {
    wait_copies<kStages - 2>();
    __syncthreads();  // stage i is in; every warp is done with stage i - 1, which the next load reuses
    if (i + kStages - 1 < count) load((i + kStages - 1) % kStages, begin + i + kStages - 1);
    commit_copies();
    const T* a = stages + (i % kStages) * Tile::kStageElems;
    const T* xs = a + Tile::kAElems;
    warp_mma<T, kATrans, kXByK, B, 64, Tile::kMTiles>(acc, a, kLdA, wm * Tile::kWarpRows, xs, kLdX, wn * 64, lane);
  }
  wait_copies<0>();
  __syncthreads();

  // The f32 tile in shared memory (over the stages), laid out for the write-out.
  float* cs = reinterpret_cast<float*>(smem);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < Tile::kMTiles; ++mi) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const int r = wm * Tile::kWarpRows + mi * 16 + g + (h / 2) * 8, c = wn * 64 + nt * 8 + 2 * t + h % 2;
        cs[flags.y_rows ? c * Tile::kLdCnr + r : r * Tile::kLdCrn + c] = acc[mi][nt][h];
      }
    }
  }
  __syncthreads();

  // y = tile + bias, relu'd when asked, a gelu form, rounded once (epilogue.cuh).
  const int64_t m0 = obr * B;
  auto finish = [&](float v, int r) {
    v = add_bias(v, p.bias, m0 + r);
    return p.relu ? relu(v) : v;
  };
  if (flags.y_rows) {  // R rows of one column per thread: a 16-byte run of y
    // Under gelu's gradient each run reads z from global memory: loaded one
    // run ahead, its latency overlaps this run's arithmetic. The GPT's fc2
    // dY W with the gradient in its write-out (H200, Nsight Compute, inside
    // the step, 90 %): 64x64 blocks 1.98 -> 1.74 ms a step, 32x32 2.20 ->
    // 1.92; the forward forms, whose loop only gained the uniform branch,
    // came out 1-6 % slower, a net 0.13 ms a step less. 16-byte shared
    // reads and bias loads here, and the loop unrolled over a thread's runs,
    // measured slower still (exp/mma-sync-gelu-writeout).
    constexpr int kRuns = kTileN * (B / R);
    const bool z_ahead = flags.y_vec && is_gelu_gradient(p.gelu);
    auto z_run = [&](int i) {  // run i's z, or zeros past the tile or y's columns
      uint4 z{};
      const int c = i / (B / R), rq = (i % (B / R)) * R;
      if (z_ahead && i < kRuns && n0 + c < p.n) {
        z = *reinterpret_cast<const uint4*>(p.aux.data + (m0 + rq) * p.y.row_stride + (n0 + c) * p.y.col_stride);
      }
      return z;
    };
    uint4 z_next = z_run(tid);
    for (int i = tid; i < kRuns; i += kThreads) {
      const uint4 z = z_next;
      z_next = z_run(i + kThreads);
      const int c = i / (B / R), rq = (i % (B / R)) * R;
      const int64_t gn = n0 + c;
      if (gn >= p.n) continue;
      const float* src = cs + c * Tile::kLdCnr + rq;
      float v[R];
      for (int j = 0; j < R; ++j) v[j] = finish(src[j], rq + j);
      const int64_t at = (m0 + rq) * p.y.row_stride + gn * p.y.col_stride;
      if (z_ahead) {
        T zs[R];
        memcpy(zs, &z, sizeof(zs));
        gelu_gradient_of<T, R>(p.gelu, zs, v);
        store_run<T, R>(p.y.data + at, p.y.row_stride, true, v, R);
      } else {
        gelu_and_store_run<T, R>(p.gelu, p.y.data, p.aux.data, at, p.y.row_stride, flags.y_vec, v, R);
      }
    }
  } else {  // R columns of one row per thread
    for (int i = tid; i < B * (kTileN / R); i += kThreads) {
      const int r = i / (kTileN / R), cq = (i % (kTileN / R)) * R;
      const int64_t gn = n0 + cq;
      if (gn >= p.n) continue;
      const float* src = cs + r * Tile::kLdCrn + cq;
      float v[R];
      for (int j = 0; j < R; ++j) v[j] = finish(src[j], r);
      const bool whole = flags.y_vec && gn + R <= p.n;
      gelu_and_store_run<T, R>(p.gelu, p.y.data, p.aux.data, (m0 + r) * p.y.row_stride + gn * p.y.col_stride,
                               p.y.col_stride, whole, v, static_cast<int>(std::min<int64_t>(R, p.n - gn)));
    }
  }
}

// ---- SDDMM ----

// A thread block: up to kGroup stored blocks of one block row (the runs of
// BsrSddmmArgs::group_begin), B / 32 warps per block (32 rows each), kStepK
// of the inner dimension staged per step, kStages steps in flight. The
// shapes with_sddmm_tile takes were the fastest measured (H100, 4096^3 bf16, 90
// and 95 %): 32x32 blocks 8 per thread block, 32 of k per step, 3 stages
// (0.120 ms at 90 %; 4 per block 0.147, 16: 0.286), or 4 per thread block
// and 4 stages where rows are short (95 %: 0.079 against 0.093);
// 64x64 blocks 2 per thread block, 64 of k, 4 stages (0.061 ms; 4 per
// block 0.076).
template <typename T, int kBlock, int kGroupBlocks, int kStepAlongK, int kStagesInFlight>
struct SddmmTile {
  static constexpr int B = kBlock;
  static constexpr int kGroup = kGroupBlocks;
  // Rows of a block per warp: 16 of a 128x128 block (eight warps, 64 f32
  // accumulators a thread across its 128 columns; 32 rows would need 128).
  static constexpr int kWarpRows = B < 32 ? B : B == 128 ? 16 : 32;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kWarpsPerBlock = B / kWarpRows;
  static constexpr int kThreads = 32 * kGroup * kWarpsPerBlock;
  static constexpr int kStepK = kStepAlongK;
  static constexpr int kStages = kStagesInFlight;
  static constexpr int kLdRk = kStepK + pad_of<T>(false);  // a stored [r][k] or b stored [c][k]
  static constexpr int kLdKb = B + pad_of<T>(true);        // or [k][r], [k][c]
  static constexpr int kSliceElems = std::max(B * kLdRk, kStepK* kLdKb);
  static constexpr int kStageElems = (1 + kGroup) * kSliceElems;  // a's slice, then each block's slice of b
  static constexpr int kSmemBytes = kStages * kStageElems * static_cast<int>(sizeof(T));
};

struct SddmmFlags {
  bool a_vec, b_vec;  // runs along each operand's contiguous dimension are 16-byte aligned
};

// kAByK: a(r, k) contiguous along r (as dy^T in linear's weight gradient),
// its slice stored [k][r]; else [r][k]. kBByK: b(k, c) contiguous along c,
// stored [k][c]; else [c][k].
template <typename T, typename Tile, bool kAByK, bool kBByK>
__global__ void __launch_bounds__(Tile::kThreads) mma_sync_sddmm_kernel(BsrSddmmArgs<T> p, SddmmFlags flags) {
  constexpr int B = Tile::B;
  constexpr int kThreads = Tile::kThreads, kStages = Tile::kStages, kStepK = Tile::kStepK;
  constexpr int kLdA = kAByK ? Tile::kLdKb : Tile::kLdRk, kLdB = kBByK ? Tile::kLdKb : Tile::kLdRk;
  constexpr int R = kRun<T>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* stages = reinterpret_cast<T*>(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int slot = warp / Tile::kWarpsPerBlock, wr = warp % Tile::kWarpsPerBlock;
  const SddmmRun task = sddmm_run(p);
  const int32_t begin = task.begin;
  const int count = task.count;
  const int64_t r0 = static_cast<int64_t>(task.block_row) * B;
  const bool sums_rows = task.sums_rows;  // block-uniform
  // Row sums: thread tid adds row tid % B of every step's slice, at k
  // tid / B, tid / B + kSumLanes, ...; the lanes are added in order at the end.
  constexpr int kSumLanes = kThreads / B;
  static_assert(kThreads % B == 0 && kStepK % (kThreads / B) == 0, "the row sums take whole rows and steps");
  float row_sum = 0.f;
  // This thread block's range of the inner dimension (all of it unless split).
  const int64_t k_begin = p.splits > 1 ? blockIdx.y * p.split_k : 0;
  const int64_t k_end = p.splits > 1 ? std::min<int64_t>(p.k, k_begin + p.split_k) : p.k;
  const StridedMatrix<const T>& a = p.a;
  const StridedMatrix<const T>& b = p.b;

  // The [B, kStepK] slice at k0 of the rows u0.. of m (element (u, k):
  // m.data[u * u_stride + k * k_stride]) into dst: [k][u] when kByK, else
  // [u][k]; 0 past the inner dimension.
  auto stage_slice = [&](auto by_k, T* dst, const T* data, int64_t u_stride, int64_t k_stride, int64_t u0, int64_t k0,
                         bool vec, int first) {
    constexpr bool kByK = decltype(by_k)::value;
    const int kvalid = static_cast<int>(std::min<int64_t>(kStepK, k_end - k0));
    for (int j = first; j < B * (kStepK / R); j += kThreads) {
      if constexpr (kByK) {  // runs of 8 along u, one per k
        const int kk = j / (B / R), uq = (j % (B / R)) * R;
        stage_run(dst + kk * Tile::kLdKb + uq, data + (k0 + kk) * k_stride + (u0 + uq) * u_stride, u_stride, vec,
                  kk < kvalid ? R : 0);
      } else {  // runs of 8 along k, one per u
        const int u = j / (kStepK / R), kq = (j % (kStepK / R)) * R;
        stage_run(dst + u * Tile::kLdRk + kq, data + (k0 + kq) * k_stride + (u0 + u) * u_stride, k_stride, vec,
                  std::max(0, std::min(R, kvalid - kq)));
      }
    }
  };
  // Stage `stage`: a's rows of the block row, then b's columns of each
  // block. Full steps of aligned operands take the fast path: thread tid
  // copies run tid of a's slice (when there is one), and each warp the runs
  // lane + 32 j of its part of its block's slice of b, at offsets fixed here.
  constexpr int kRunsPerSlice = B * (kStepK / R);
  constexpr int kBRunsPerWarp = kRunsPerSlice / Tile::kWarpsPerBlock / 32;
  // Run `run` of a slice: its staged offset, and its element's offset in the
  // operand (u along the block's rows or columns, k along the inner dimension).
  auto run_offsets = [&](auto by_k, int run, int64_t u_stride, int64_t k_stride, int& dst, int64_t& src) {
    if constexpr (decltype(by_k)::value) {
      const int kk = run / (B / R), uq = (run % (B / R)) * R;
      dst = kk * Tile::kLdKb + uq;
      src = kk * k_stride + uq * u_stride;
    } else {
      const int u = run / (kStepK / R), kq = (run % (kStepK / R)) * R;
      dst = u * Tile::kLdRk + kq;
      src = kq * k_stride + u * u_stride;
    }
  };
  constexpr int kARunsPerThread = (kRunsPerSlice + kThreads - 1) / kThreads;
  int a_dst[kARunsPerThread], b_dst[kBRunsPerWarp];
  int64_t a_src[kARunsPerThread], b_src[kBRunsPerWarp];
#pragma unroll
  for (int j = 0; j < kARunsPerThread; ++j) {
    const int run = tid + j * kThreads;
    run_offsets(std::integral_constant<bool, kAByK>{}, run < kRunsPerSlice ? run : 0, a.row_stride, a.col_stride,
                a_dst[j], a_src[j]);
  }
#pragma unroll
  for (int j = 0; j < kBRunsPerWarp; ++j) {
    run_offsets(std::integral_constant<bool, kBByK>{}, wr * (kRunsPerSlice / Tile::kWarpsPerBlock) + lane + 32 * j,
                b.col_stride, b.row_stride, b_dst[j], b_src[j]);
  }
  const T* a_base = a.data + r0 * a.row_stride;
  const T* b_base = slot < count ? b.data + static_cast<int64_t>(p.bcol[begin + slot]) * B * b.col_stride : b.data;
  auto load = [&](int stage, int64_t k0) {
    T* as = stages + stage * Tile::kStageElems;
    if (flags.a_vec && flags.b_vec && k0 + kStepK <= k_end) {
#pragma unroll
      for (int j = 0; j < kARunsPerThread; ++j) {
        if (tid + j * kThreads < kRunsPerSlice) copy16_async(as + a_dst[j], a_base + a_src[j] + k0 * a.col_stride);
      }
      if (slot < count) {
        T* bs = as + (slot + 1) * Tile::kSliceElems;
        const T* src = b_base + k0 * b.row_stride;
#pragma unroll
        for (int j = 0; j < kBRunsPerWarp; ++j) copy16_async(bs + b_dst[j], src + b_src[j]);
      }
      return;
    }
    stage_slice(std::integral_constant<bool, kAByK>{}, as, a.data, a.row_stride, a.col_stride, r0, k0, flags.a_vec,
                tid);
    for (int q = 0; q < count; ++q) {
      const int first = ((tid - kRunsPerSlice * (q + 1)) % kThreads + kThreads) % kThreads;
      stage_slice(std::integral_constant<bool, kBByK>{}, as + (q + 1) * Tile::kSliceElems, b.data, b.col_stride,
                  b.row_stride, static_cast<int64_t>(p.bcol[begin + q]) * B, k0, flags.b_vec, first);
    }
  };

  constexpr int kNt = B / 8;  // n8 tiles per warp (all of the block's columns)
  float acc[Tile::kMTiles][kNt][4] = {};
  const int steps = static_cast<int>((k_end - k_begin + kStepK - 1) / kStepK);
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load(s, k_begin + static_cast<int64_t>(s) * kStepK);
    commit_copies();
  }
  for (int i = 0; i < steps; ++i) {
    wait_copies<kStages - 2>();
    __syncthreads();
    if (i + kStages - 1 < steps) {
      load((i + kStages - 1) % kStages, k_begin + static_cast<int64_t>(i + kStages - 1) * kStepK);
    }
    commit_copies();
    const T* as = stages + (i % kStages) * Tile::kStageElems;
    if (sums_rows) {
      const int r = tid % B;
#pragma unroll
      for (int j = 0; j < kStepK / kSumLanes; ++j) {  // 0 past k's end: staged so
        const int kk = tid / B + j * kSumLanes;
        row_sum += to_float(as[kAByK ? kk * kLdA + r : r * kLdA + kk]);
      }
    }
    if (slot >= count) continue;
    const T* bs = as + (slot + 1) * Tile::kSliceElems;
    warp_mma<T, kAByK, kBByK, kStepK, B, Tile::kMTiles>(acc, as, kLdA, wr * Tile::kWarpRows, bs, kLdB, 0, lane);
  }
  wait_copies<0>();
  if (sums_rows) {
    __syncthreads();                                // every warp is past its last read of the stages
    float* lanes = reinterpret_cast<float*>(smem);  // [kSumLanes][B]
    lanes[tid] = row_sum;
    __syncthreads();
    write_row_sums<T, B, kSumLanes>(p, lanes, r0);
  }
  if (slot >= count) return;
  const int64_t e = begin + slot;
  T* out = p.values + e * B * B;
  float* part = p.splits > 1 ? p.partial + (blockIdx.y * p.nblocks + e) * B * B : nullptr;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < Tile::kMTiles; ++mi) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wr * Tile::kWarpRows + mi * 16 + g + h * 8, c = nt * 8 + 2 * t;
        if (part != nullptr) {
          *reinterpret_cast<float2*>(part + r * B + c) = make_float2(acc[mi][nt][2 * h], acc[mi][nt][2 * h + 1]);
        } else {
          store2<T>(out + r * B + c, acc[mi][nt][2 * h], acc[mi][nt][2 * h + 1]);
        }
      }
    }
  }
}

// values = the sum of the split SDDMM's partial sums, in range order,
// rounded once; indices from n on, the row sums the same way (rows of them,
// none where p.row_sums is null). One launch for both: the row sums' pass of
// its own was a launch as long as the values' (2.5-3.5 us of Nsight
// Compute's time each, 32 a GPT step).
template <typename T>
__global__ void sum_splits_kernel(const BsrSddmmArgs<T> p, int64_t n, int64_t rows) {
  cuda::wait_for_prerequisite_grids();  // launched to overlap the SDDMM before it (bsr_sum_splits)
  cuda::allow_dependent_launch();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n + rows;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool row = i >= n;
    const int64_t at = row ? i - n : i, stride = row ? rows : n;
    const float* partial = (row ? p.row_sum_partial : p.partial) + at;
    float sum = partial[0];
    for (int s = 1; s < p.splits; ++s) sum += partial[s * stride];
    (row ? p.row_sums : p.values)[at] = from_float<T>(sum);
  }
}

// ---- launch ----

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, typename Tile, bool kATrans, bool kXByK>
void launch_product(const BsrProductArgs<T>& p, const ProductFlags& flags, cudaStream_t stream) {
  auto kernel = mma_sync_product_kernel<T, Tile, kATrans, kXByK>;
  static std::atomic<uint64_t> configured{0};
  cuda::allow_shared_memory(kernel, Tile::kSmemBytes, configured, "bsr product");
  const dim3 grid(static_cast<unsigned>(p.out_block_rows),
                  static_cast<unsigned>((p.n + Tile::kTileN - 1) / Tile::kTileN));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p, flags);
}

template <typename T, typename Tile>
void product_with(const BsrProductArgs<T>& p, cudaStream_t stream) {
  ProductFlags f{};
  f.a_vec = aligned16(p.values);
  // x's slice is stored along x's contiguous dimension (n when col_stride is 1).
  const bool x_by_k = p.x.col_stride == 1;
  const int64_t x_other = x_by_k ? p.x.row_stride : p.x.col_stride;
  const int64_t x_unit = x_by_k ? p.x.col_stride : p.x.row_stride;
  f.x_vec = aligned16(p.x.data) && x_unit == 1 && x_other % kRun<T> == 0;
  f.y_rows = p.y.row_stride == 1 && p.y.col_stride != 1;
  const int64_t y_other = f.y_rows ? p.y.col_stride : p.y.row_stride;
  const int64_t y_unit = f.y_rows ? p.y.row_stride : p.y.col_stride;
  f.y_vec = aligned16(p.y.data) && y_unit == 1 && y_other % kRun<T> == 0 &&
            (p.gelu == GeluWriteOut::kNone || aligned16(p.aux.data));
  if (p.transposed) {
    if (x_by_k)
      launch_product<T, Tile, true, true>(p, f, stream);
    else
      launch_product<T, Tile, true, false>(p, f, stream);
  } else {
    if (x_by_k)
      launch_product<T, Tile, false, true>(p, f, stream);
    else
      launch_product<T, Tile, false, false>(p, f, stream);
  }
}

// What the host keeps per SDDMM kernel: allow_shared_memory's record, and the thread
// blocks an SM holds (bsr_mma_sddmm_resident), per device, 0 until asked. Devices
// past cuda::kRecordedDevices have no entry and ask every time.
struct SddmmKernelState {
  std::atomic<uint64_t> smem_allowed{0};
  std::atomic<int> resident[cuda::kRecordedDevices] = {};
};

template <typename T, typename Tile, bool kAByK, bool kBByK>
SddmmKernelState& sddmm_kernel_state() {
  static SddmmKernelState state;  // one per kernel, whichever caller asks
  return state;
}

// Calls f(kernel, state, flags) with the kernel of Tile that p's operand
// layouts take: a(r, k) stored along r when r is its contiguous dimension;
// b(k, c) along c likewise.
template <typename T, typename Tile, typename F>
void with_sddmm_kernel(const BsrSddmmArgs<T>& p, F&& f) {
  const bool a_by_k = p.a.row_stride == 1 && p.a.col_stride != 1;
  const bool b_by_k = p.b.col_stride == 1;
  auto vec = [](const StridedMatrix<const T>& m, bool along_rows) {
    const int64_t unit = along_rows ? m.row_stride : m.col_stride, other = along_rows ? m.col_stride : m.row_stride;
    return aligned16(m.data) && unit == 1 && other % kRun<T> == 0;
  };
  const SddmmFlags flags{vec(p.a, a_by_k), vec(p.b, !b_by_k)};
  auto take = [&](auto a_tag, auto b_tag) {
    constexpr bool kAByK = decltype(a_tag)::value, kBByK = decltype(b_tag)::value;
    f(mma_sync_sddmm_kernel<T, Tile, kAByK, kBByK>, sddmm_kernel_state<T, Tile, kAByK, kBByK>(), flags);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if (a_by_k && b_by_k)
    take(Yes{}, Yes{});
  else if (a_by_k)
    take(Yes{}, No{});
  else if (b_by_k)
    take(No{}, Yes{});
  else
    take(No{}, No{});
}

// Calls f(Tile{}) with the SDDMM tile bsr_mma_sddmm runs p with. f32 (TF32)
// stages twice the bytes per element: a shorter k step keeps two thread
// blocks an SM.
template <typename T, typename F>
void with_sddmm_tile(const BsrSddmmArgs<T>& p, F&& f) {
  constexpr bool kHalfWidth = sizeof(T) == 2;
  constexpr int kWideStep = kHalfWidth ? 64 : 32;  // k per step of 64x64 and 128x128 blocks
  constexpr int kRunStep = kHalfWidth ? 32 : 16;   // and of 32x32 blocks in runs of 8, with
  constexpr int kRunStages = kHalfWidth ? 3 : 4;   // this many steps in flight
  if (p.bh == 128)
    f(SddmmTile<T, 128, 1, kWideStep, 3>{});
  else if (p.bh == 64)
    f(SddmmTile<T, 64, 2, kWideStep, 4>{});
  else if (p.bh == 16)
    f(SddmmTile<T, 16, 8, 32, 4>{});
  else if (p.group <= 4)
    f(SddmmTile<T, 32, 4, 32, 4>{});
  else
    f(SddmmTile<T, 32, 8, kRunStep, kRunStages>{});
}

}  // namespace

// f32 (TF32) stages twice the bytes per element: half the columns per
// thread block (and a shorter k step in the SDDMM) keep two thread blocks
// per SM. 32x32 and 64x64 blocks take 256 and 128 columns in every type:
// in 16 bits half what 4096^2 liked best (ProductTile), because at the GPT's
// shapes (K 1024, 3.2 blocks a row at 90 %) a thread block walks few blocks
// and more, shorter ones hide the first loads better (H200, 16384 tokens,
// 1024^2 at 90 %: 0.0502 -> 0.0460 ms at 32x32, 0.0404 -> 0.0381 at 64x64;
// the GPT step 21.9 -> 21.2 ms at 32x32; MLP-4096's step unchanged, 1.41 ms).
template <typename T>
void bsr_mma_product(const BsrProductArgs<T>& p, cudaStream_t stream) {
  constexpr int kWide = sizeof(T) == 2 ? 2 : 1;
  if (p.bh == 128)  // one thread block an SM: 139 KB of stages in 16 bits, 209 KB in f32
    product_with<T, ProductTile<T, 128, kWide, 2>>(p, stream);
  else if (p.bh == 64)
    product_with<T, ProductTile<T, 64, 2, 2>>(p, stream);
  else if (p.bh == 32)
    product_with<T, ProductTile<T, 32, 4, 2>>(p, stream);
  else
    product_with<T, ProductTile<T, 16, 4 * kWide, 2>>(p, stream);
}

template <typename T>
void bsr_mma_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  if (p.ngroups <= 0 && (p.row_sums == nullptr || p.nempty <= 0)) return;
  with_sddmm_tile(p, [&](auto tile) {
    using Tile = decltype(tile);
    with_sddmm_kernel<T, Tile>(p, [&](auto kernel, SddmmKernelState& state, const SddmmFlags& flags) {
      cuda::allow_shared_memory(kernel, Tile::kSmemBytes, state.smem_allowed, "bsr sddmm");
      const int64_t blocks = p.ngroups + (p.row_sums != nullptr ? p.nempty : 0);
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.splits > 1 ? p.splits : 1));
      kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p, flags);
    });
    if (p.splits > 1) bsr_sum_splits<T>(p, stream);
  });
}

template <typename T>
int bsr_mma_sddmm_resident(const BsrSddmmArgs<T>& p) {
  const int device = cuda::current_device("bsr sddmm");
  int resident = 0;
  with_sddmm_tile(p, [&](auto tile) {
    using Tile = decltype(tile);
    with_sddmm_kernel<T, Tile>(p, [&](auto kernel, SddmmKernelState& state, const SddmmFlags&) {
      std::atomic<int>* known = device < cuda::kRecordedDevices ? &state.resident[device] : nullptr;
      resident = known != nullptr ? known->load(std::memory_order_relaxed) : 0;
      if (resident > 0) return;
      cuda::allow_shared_memory(kernel, Tile::kSmemBytes, state.smem_allowed, "bsr sddmm");
      COPPICE_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, Tile::kThreads, Tile::kSmemBytes),
          "bsr sddmm");
      resident = std::max(resident, 1);
      if (known != nullptr) known->store(resident, std::memory_order_relaxed);
    });
  });
  return resident;
}

template <typename T>
void bsr_sum_splits(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  const int64_t n = p.nblocks * p.bh * p.bw, rows = p.row_sums != nullptr ? p.block_rows * p.bh : 0;
  const int64_t blocks = (n + rows + 255) / 256;
  constexpr std::string_view op = "bsr sddmm";
  cuda::launch_overlapping_on_sm90(cuda::current_device(op), sum_splits_kernel<T>,
                                   dim3(static_cast<unsigned>(blocks < 4096 ? blocks : 4096)), dim3(256), 0, stream, op,
                                   p, n, rows);
}

template void bsr_mma_product<__nv_bfloat16>(const BsrProductArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_mma_product<__half>(const BsrProductArgs<__half>&, cudaStream_t);
template void bsr_mma_sddmm<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_mma_sddmm<__half>(const BsrSddmmArgs<__half>&, cudaStream_t);
template void bsr_mma_product<float>(const BsrProductArgs<float>&, cudaStream_t);
template void bsr_mma_sddmm<float>(const BsrSddmmArgs<float>&, cudaStream_t);
template int bsr_mma_sddmm_resident<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&);
template int bsr_mma_sddmm_resident<__half>(const BsrSddmmArgs<__half>&);
template int bsr_mma_sddmm_resident<float>(const BsrSddmmArgs<float>&);
template void bsr_sum_splits<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_sum_splits<__half>(const BsrSddmmArgs<__half>&, cudaStream_t);
template void bsr_sum_splits<float>(const BsrSddmmArgs<float>&, cudaStream_t);

}  // namespace coppice::sparse_cuda
