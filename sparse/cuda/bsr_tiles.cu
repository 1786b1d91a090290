// Tiled BSR SpMM and SDDMM (bsr_tiles.h).
//
// Why tiles: a stored [bh, bw] block is a small dense matrix, so a product
// with it reuses every loaded element bh or bw times, as a dense GEMM does;
// the per-element gathers of a CSR kernel (one dense-row segment per nonzero,
// L2-bound) do not arise. H100, 4096^2 at 90 % block sparsity (32x32) times
// 4096^2: the element-per-thread kernel of block_spmm.cu took 3.2 ms, these
// take 0.68 ms (f32) and 0.39 ms (TF32); PyTorch's Triton BSR 1.14 ms
// (docs/benchmarks.md).
//
// SpMM, f32 FMAs and non-square blocks in every math (square blocks of a
// 16-bit type or TF32 run on the mma.sync kernels of bsr_mma.cu, which
// bsr_products.cc picks; the WMMA square-block SpMM they replaced is gone):
// a thread block (four warps) owns one output block row [block_m rows] times
// kTileN columns and walks that row's entries; for each block it stages the
// block (as stored or transposed: S^T is S's blocks read transposed, in
// block-column order) and the matching [kStageK, kTileN] slice of x in shared
// memory, then multiplies on a 4-column micro-tile per thread (or WMMA
// fragments).
// Consecutive thread blocks take consecutive block rows of the same column
// tile, so the x slab they read stays in L2. A bias (linear's) is added, and
// a relu applied (linear_relu's), in the write-out, saving a separate pass
// over the output for each. Dense operands are strided
// (x and y may be transposed views: no copies); an empty block row writes
// zeros. No atomics: results are the same on every run.
//
// SDDMM: a thread block per stored block computes a[rows of the block, :] @
// b[:, cols of the block] over the whole inner dimension in slices; where a
// block has fewer 16x16 fragments than warps, the warps split the inner
// dimension and add their parts at the end. The tensor-core version for
// square blocks double-buffers its slices as the SpMM does.
//
// TF32 inputs are rounded once (when staged, or when a fragment is loaded);
// products accumulate in f32 and are rounded to T once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "sparse/cuda/bsr_tiles.h"
#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/tile_values.cuh"

namespace coppice::sparse_cuda {
namespace {

using namespace nvcuda;

constexpr int kThreads = 128;  // four warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileN = 64;        // SpMM output columns per thread block
constexpr int kStageK = 16;       // SpMM: inner slice staged per step
constexpr int kSddmmStageK = 32;  // SDDMM: inner slice staged per step

// A value as it is staged: TF32 rounds f32 once here.
template <TileMath M, typename T>
__device__ __forceinline__ T staged(T v) {
  if constexpr (M == TileMath::kTf32) {
    return wmma::__float_to_tf32(v);
  } else {
    return v;
  }
}

// Elements per 16-byte vector; also the row padding of every staged tile,
// which keeps WMMA's 32-byte fragment alignment and spreads banks.
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// WMMA operand type and inner step per math.
template <TileMath M, typename T>
using MmaIn = std::conditional_t<M == TileMath::kHalf, T, wmma::precision::tf32>;
template <TileMath M>
constexpr int kMmaK = M == TileMath::kHalf ? 16 : 8;

// How a strided dense operand is staged: 16-byte vectors along its rows
// (col_stride 1), along its columns (row_stride 1), or element by element.
enum XMode : int { kScalar = 0, kRowVectors = 1, kColVectors = 2 };

template <typename T>
int x_mode(const StridedMatrix<const T>& x) {
  constexpr int v = kVec<T>;
  const bool aligned = reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  if (aligned && x.col_stride == 1 && x.row_stride % v == 0) return kRowVectors;
  if (aligned && x.row_stride == 1 && x.col_stride % v == 0) return kColVectors;
  return kScalar;
}

// xs[kk][nn] = x(k0 + kk, n0 + nn) for kk < kStageK, nn < kTileN; 0 past n.
template <TileMath M, typename T>
__device__ __forceinline__ void stage_x(T* xs, int px, const StridedMatrix<const T>& x, int64_t k0, int64_t n0,
                                        int64_t n, int mode) {
  constexpr int v = kVec<T>;
  const int tid = threadIdx.x;
  const T zero = from_float<T>(0.0f);
  if (mode == kRowVectors) {
    constexpr int per_row = kTileN / v;
    for (int i = tid; i < kStageK * per_row; i += kThreads) {
      const int kk = i / per_row, nn = (i % per_row) * v;
      const T* src = x.data + (k0 + kk) * x.row_stride + (n0 + nn);
      T* dst = xs + kk * px + nn;
      if (n0 + nn + v <= n) {
        uint4 raw = *reinterpret_cast<const uint4*>(src);
        if constexpr (M == TileMath::kTf32) {
          float* f = reinterpret_cast<float*>(&raw);
          for (int j = 0; j < 4; ++j) f[j] = wmma::__float_to_tf32(f[j]);
        }
        *reinterpret_cast<uint4*>(dst) = raw;
      } else {
        for (int j = 0; j < v; ++j) dst[j] = n0 + nn + j < n ? staged<M>(src[j]) : zero;
      }
    }
  } else if (mode == kColVectors) {
    constexpr int per_col = kStageK / v;
    for (int i = tid; i < kTileN * per_col; i += kThreads) {
      const int nn = i / per_col, kq = (i % per_col) * v;
      T* dst = xs + kq * px + nn;
      if (n0 + nn < n) {
        uint4 raw = *reinterpret_cast<const uint4*>(x.data + (k0 + kq) + (n0 + nn) * x.col_stride);
        const T* vals = reinterpret_cast<const T*>(&raw);
        for (int j = 0; j < v; ++j) dst[j * px] = staged<M>(vals[j]);
      } else {
        for (int j = 0; j < v; ++j) dst[j * px] = zero;
      }
    }
  } else {
    const bool k_fastest = x.row_stride == 1 && x.col_stride != 1;
    for (int i = tid; i < kStageK * kTileN; i += kThreads) {
      const int kk = k_fastest ? i % kStageK : i / kTileN, nn = k_fastest ? i / kStageK : i % kTileN;
      xs[kk * px + nn] = n0 + nn < n ? staged<M>(x.data[(k0 + kk) * x.row_stride + (n0 + nn) * x.col_stride]) : zero;
    }
  }
}

// y's [ROWS, COLS] tile at (m0, n0) from the f32 tile cs (row length pc),
// plus the bias of each row, then the relu when asked, rounded to T once
// (epilogue.cuh's steps, element by element: no gelu here); threads walk y's
// contiguous dimension so the stores coalesce.
template <typename T, int ROWS, int COLS>
__device__ void write_output_tile(const float* cs, int pc, const BsrProductArgs<T>& p, int64_t m0, int64_t n0) {
  __syncthreads();
  const bool n_fastest = p.y.col_stride == 1;
  for (int i = threadIdx.x; i < ROWS * COLS; i += kThreads) {
    const int r = n_fastest ? i / COLS : i % ROWS, c = n_fastest ? i % COLS : i / ROWS;
    if (n0 + c < p.n) {
      float v = cs[r * pc + c] + bias_or_zero(p.bias, m0 + r);
      if (p.relu) v = relu(v);
      p.y.data[(m0 + r) * p.y.row_stride + (n0 + c) * p.y.col_stride] = from_float<T>(v);
    }
  }
}

// Shared memory of the SpMM kernel: the staged tiles during the walk, the
// f32 output tile after it (the two never live at once).
template <typename T, int BM>
struct ProductSmem {
  static constexpr int kPa = kStageK + kVec<T>;
  static constexpr int kPx = kTileN + kVec<T>;
  static constexpr int kPc = kTileN + 4;
  static constexpr int kTilesBytes = (BM * kPa + kStageK * kPx) * static_cast<int>(sizeof(T));
  static constexpr int kOutBytes = BM * kPc * static_cast<int>(sizeof(float));
  static constexpr int kBytes = kTilesBytes > kOutBytes ? kTilesBytes : kOutBytes;
};

template <typename T, int BM, TileMath M>
__global__ void __launch_bounds__(kThreads) product_kernel(BsrProductArgs<T> p, int mode) {
  using Smem = ProductSmem<T, BM>;
  constexpr int pa = Smem::kPa, px = Smem::kPx, pc = Smem::kPc;
  __shared__ __align__(32) unsigned char smem[Smem::kBytes];
  T* as = reinterpret_cast<T*>(smem);
  T* xs = as + BM * pa;
  float* cs = reinterpret_cast<float*>(smem);

  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t obr = blockIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int block_k = p.transposed ? p.bh : p.bw;
  const int64_t block_elems = static_cast<int64_t>(p.bh) * p.bw;

  // kF32: rows rg * kRows.. and columns cg * 4.. of the output tile.
  constexpr int kRows = BM / 8;
  const int cg = tid % 16, rg = tid / 16;
  float acc[kRows][4] = {};
  // kTf32, kHalf: kFrags 16x16 fragments per warp, in one fragment row fm.
  constexpr int kFrags = BM / 16;
  const int fm = warp * kFrags / 4;
  wmma::fragment<wmma::accumulator, 16, 16, kMmaK<M>, float> cf[kFrags];
  if constexpr (M != TileMath::kF32) {
    for (int j = 0; j < kFrags; ++j) wmma::fill_fragment(cf[j], 0.0f);
  }

  for (int32_t e = p.ptr[obr]; e < p.ptr[obr + 1]; ++e) {
    const int64_t blk = p.bid != nullptr ? p.bid[e] : e;
    const T* vals = p.values + blk * block_elems;
    const int64_t k_base = static_cast<int64_t>(p.kblk[e]) * block_k;
    for (int k0 = 0; k0 < block_k; k0 += kStageK) {
      for (int i = tid; i < BM * kStageK; i += kThreads) {
        int r, c;
        T v;
        if (!p.transposed) {
          r = i / kStageK, c = i % kStageK;
          v = vals[r * p.bw + k0 + c];
        } else {
          c = i / BM, r = i % BM;
          v = vals[(k0 + c) * p.bw + r];
        }
        as[r * pa + c] = staged<M>(v);
      }
      stage_x<M>(xs, px, p.x, k_base + k0, n0, p.n, mode);
      __syncthreads();
      if constexpr (M == TileMath::kF32) {
        for (int kk = 0; kk < kStageK; ++kk) {
          const float4 xv = *reinterpret_cast<const float4*>(xs + kk * px + cg * 4);
          for (int r = 0; r < kRows; ++r) {
            const float a = as[(rg * kRows + r) * pa + kk];
            acc[r][0] += a * xv.x;
            acc[r][1] += a * xv.y;
            acc[r][2] += a * xv.z;
            acc[r][3] += a * xv.w;
          }
        }
      } else {
        for (int ks = 0; ks < kStageK; ks += kMmaK<M>) {
          wmma::fragment<wmma::matrix_a, 16, 16, kMmaK<M>, MmaIn<M, T>, wmma::row_major> af;
          wmma::load_matrix_sync(af, as + fm * 16 * pa + ks, pa);
          for (int j = 0; j < kFrags; ++j) {
            const int fn = (warp * kFrags + j) % 4;
            wmma::fragment<wmma::matrix_b, 16, 16, kMmaK<M>, MmaIn<M, T>, wmma::row_major> bf;
            wmma::load_matrix_sync(bf, xs + ks * px + fn * 16, px);
            wmma::mma_sync(cf[j], af, bf, cf[j]);
          }
        }
      }
      __syncthreads();
    }
  }

  if constexpr (M == TileMath::kF32) {
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < 4; ++c) cs[(rg * kRows + r) * pc + cg * 4 + c] = acc[r][c];
    }
  } else {
    for (int j = 0; j < kFrags; ++j) {
      const int fn = (warp * kFrags + j) % 4;
      wmma::store_matrix_sync(cs + fm * 16 * pc + fn * 16, cf[j], pc, wmma::mem_row_major);
    }
  }
  write_output_tile<T, BM, kTileN>(cs, pc, p, obr * BM, n0);
}

template <TileMath M, typename Frag>
__device__ __forceinline__ void round_tf32(Frag& f) {
  if constexpr (M == TileMath::kTf32) {
    for (int t = 0; t < f.num_elements; ++t) f.x[t] = wmma::__float_to_tf32(f.x[t]);
  }
}

template <typename T, int BM, int BN>
struct SddmmSmem {
  static constexpr int kPa = kSddmmStageK + kVec<T>;
  static constexpr int kPb = BN + kVec<T>;
  static constexpr int kTilesBytes = (BM * kPa + kSddmmStageK * kPb) * static_cast<int>(sizeof(T));
  static constexpr int kOutBytes = kWarps * 256 * static_cast<int>(sizeof(float));
  static constexpr int kBytes = kTilesBytes > kOutBytes ? kTilesBytes : kOutBytes;
};

// as[r][kk] = m(r0 + r, k0 + kk) (rows_first) or as[kk][c] = m(k0 + kk, c0 + c),
// 0 past the inner dimension k.
template <TileMath M, typename T>
__device__ __forceinline__ void stage_tile(T* dst, int ld, int rows, int cols, const StridedMatrix<const T>& m,
                                           int64_t r0, int64_t c0, int64_t row_limit, int64_t col_limit) {
  const T zero = from_float<T>(0.0f);
  const bool row_fastest = m.row_stride == 1 && m.col_stride != 1;
  for (int i = threadIdx.x; i < rows * cols; i += kThreads) {
    const int r = row_fastest ? i % rows : i / cols, c = row_fastest ? i / rows : i % cols;
    const int64_t gr = r0 + r, gc = c0 + c;
    dst[r * ld + c] =
        gr < row_limit && gc < col_limit ? staged<M>(m.data[gr * m.row_stride + gc * m.col_stride]) : zero;
  }
}

// The block row holding stored block e: the last row starting at or before
// it (crow[lo] <= e < crow[hi]; empty rows share their start).
__device__ inline int64_t block_row_of(const int32_t* crow, int64_t block_rows, int64_t e) {
  int64_t lo = 0, hi = block_rows;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (crow[mid] <= e)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// out [BM, BN] from the 16x16 accumulators every warp stored at cs + warp *
// 256: fragment f = warp % frags, the warps that split the inner dimension of
// one fragment (warp / frags) added in order.
template <typename T, int BM, int BN>
__device__ void write_split_fragments(float* cs, T* out) {
  constexpr int kFrags = (BM / 16) * (BN / 16), kSplit = kWarps / kFrags;
  __syncthreads();
  for (int i = threadIdx.x; i < BM * BN; i += kThreads) {
    const int r = i / BN, c = i % BN;
    const int frag = (r / 16) * (BN / 16) + c / 16;
    float sum = 0.0f;
    for (int q = 0; q < kSplit; ++q) sum += cs[(q * kFrags + frag) * 256 + (r % 16) * 16 + c % 16];
    out[i] = from_float<T>(sum);
  }
}

template <typename T, int BM, int BN, TileMath M>
__global__ void __launch_bounds__(kThreads) sddmm_kernel(BsrSddmmArgs<T> p) {
  using Smem = SddmmSmem<T, BM, BN>;
  constexpr int ks_len = kSddmmStageK, pa = Smem::kPa, pb = Smem::kPb;
  __shared__ __align__(32) unsigned char smem[Smem::kBytes];
  __shared__ int64_t block_row;
  T* as = reinterpret_cast<T*>(smem);
  T* bs = as + BM * pa;
  float* cs = reinterpret_cast<float*>(smem);

  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t e = blockIdx.x;
  if (tid == 0) block_row = block_row_of(p.crow, p.block_rows, e);
  __syncthreads();
  const int64_t r0 = block_row * BM, c0 = static_cast<int64_t>(p.bcol[e]) * BN;

  // kF32: rows rg + 16 j, columns cg * kCols.. of the block.
  constexpr int kRows = BM / 16, kCols = BN / 8;
  const int cg = tid % 8, rg = tid / 8;
  float acc[kRows][kCols] = {};
  // kTf32, kHalf: kFrags fragments, kSplit warps per fragment.
  constexpr int kFrags = (BM / 16) * (BN / 16), kSplit = kWarps / kFrags;
  const int f = warp % kFrags, part = warp / kFrags;
  const int fm = f / (BN / 16), fn = f % (BN / 16);
  wmma::fragment<wmma::accumulator, 16, 16, kMmaK<M>, float> cf;
  if constexpr (M != TileMath::kF32) wmma::fill_fragment(cf, 0.0f);

  for (int64_t k0 = 0; k0 < p.k; k0 += ks_len) {
    stage_tile<M>(as, pa, BM, ks_len, p.a, r0, k0, r0 + BM, p.k);
    stage_tile<M>(bs, pb, ks_len, BN, p.b, k0, c0, p.k, c0 + BN);
    __syncthreads();
    if constexpr (M == TileMath::kF32) {
      for (int kk = 0; kk < ks_len; ++kk) {
        float a[kRows], b[kCols];
        for (int j = 0; j < kRows; ++j) a[j] = as[(rg + 16 * j) * pa + kk];
        for (int c = 0; c < kCols; ++c) b[c] = bs[kk * pb + cg * kCols + c];
        for (int j = 0; j < kRows; ++j) {
          for (int c = 0; c < kCols; ++c) acc[j][c] += a[j] * b[c];
        }
      }
    } else {
      for (int ks = part * kMmaK<M>; ks < ks_len; ks += kSplit * kMmaK<M>) {
        wmma::fragment<wmma::matrix_a, 16, 16, kMmaK<M>, MmaIn<M, T>, wmma::row_major> af;
        wmma::fragment<wmma::matrix_b, 16, 16, kMmaK<M>, MmaIn<M, T>, wmma::row_major> bf;
        wmma::load_matrix_sync(af, as + fm * 16 * pa + ks, pa);
        wmma::load_matrix_sync(bf, bs + ks * pb + fn * 16, pb);
        wmma::mma_sync(cf, af, bf, cf);
      }
    }
    __syncthreads();
  }

  T* out = p.values + e * BM * BN;
  if constexpr (M == TileMath::kF32) {
    for (int j = 0; j < kRows; ++j) {
      for (int c = 0; c < kCols; ++c) out[(rg + 16 * j) * BN + cg * kCols + c] = from_float<T>(acc[j][c]);
    }
  } else {
    wmma::store_matrix_sync(cs + warp * 256, cf, 16, wmma::mem_row_major);
    write_split_fragments<T, BM, BN>(cs, out);
  }
}

// The SDDMM for square [B, B] blocks, on tensor cores or (kF32) on a
// [B/8, B/16] FMA micro-tile per thread: kStagedSddmmK of the inner
// dimension staged per step, double-buffered with cp.async; each operand
// tile keeps its operand's contiguous dimension contiguous (kACol: a(r, k)
// contiguous along r, as dy^T in the gradient of linear; kBCol: b(k, c)
// contiguous along k).
constexpr int kStagedSddmmK = 64;

template <typename T, int B, bool kACol, bool kBCol>
struct StagedSddmmSmem {
  static constexpr int kLda = kACol ? B + kVec<T> : kStagedSddmmK + kVec<T>;
  static constexpr int kLdb = kBCol ? kStagedSddmmK + kVec<T> : B + kVec<T>;
  static constexpr int kAElems = kACol ? kStagedSddmmK * kLda : B * kLda;
  static constexpr int kBElems = kBCol ? B * kLdb : kStagedSddmmK * kLdb;
  static constexpr int kBufElems = kAElems + kBElems;
  static constexpr int kTilesBytes = 2 * kBufElems * static_cast<int>(sizeof(T));
  static constexpr int kOutBytes = kWarps * 256 * static_cast<int>(sizeof(float));
  static constexpr int kBytes = kTilesBytes > kOutBytes ? kTilesBytes : kOutBytes;
};

// dst = the [rows, cols] tile of m at (r0, c0) (0 past the inner dimension
// k, which is m's columns when !kInnerRows, its rows otherwise), stored with
// m's contiguous dimension contiguous: dst[c * ld + r] when kCol.
template <typename T, bool kCol>
__device__ __forceinline__ void sddmm_operand_stage(T* dst, int ld, int rows, int cols, const StridedMatrix<const T>& m,
                                                    int64_t r0, int64_t c0, int64_t row_limit, int64_t col_limit,
                                                    bool async) {
  constexpr int v = kVec<T>;
  const int tid = threadIdx.x;
  if (async) {
    if constexpr (kCol) {  // runs of `rows` along r
      for (int i = tid; i < cols * (rows / v); i += kThreads) {
        const int c = i / (rows / v), rq = (i % (rows / v)) * v;
        __pipeline_memcpy_async(dst + c * ld + rq, m.data + (r0 + rq) + (c0 + c) * m.col_stride, 16);
      }
    } else {  // runs of `cols` along c
      for (int i = tid; i < rows * (cols / v); i += kThreads) {
        const int r = i / (cols / v), cq = (i % (cols / v)) * v;
        __pipeline_memcpy_async(dst + r * ld + cq, m.data + (r0 + r) * m.row_stride + (c0 + cq), 16);
      }
    }
    return;
  }
  const T zero = from_float<T>(0.0f);
  for (int i = tid; i < rows * cols; i += kThreads) {
    const int r = kCol ? i % rows : i / cols, c = kCol ? i / rows : i % cols;
    const int64_t gr = r0 + r, gc = c0 + c;
    const T val = gr < row_limit && gc < col_limit ? m.data[gr * m.row_stride + gc * m.col_stride] : zero;
    dst[kCol ? c * ld + r : r * ld + c] = val;
  }
}

template <typename T, int B, bool kACol, bool kBCol, TileMath M>
__global__ void __launch_bounds__(kThreads) staged_sddmm_kernel(BsrSddmmArgs<T> p, bool a_vectors, bool b_vectors) {
  using Smem = StagedSddmmSmem<T, B, kACol, kBCol>;
  constexpr int lda = Smem::kLda, ldb = Smem::kLdb, ks_len = kStagedSddmmK;
  __shared__ __align__(128) unsigned char smem[Smem::kBytes];
  __shared__ int64_t block_row;
  T* bufs = reinterpret_cast<T*>(smem);
  float* cs = reinterpret_cast<float*>(smem);
  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t e = blockIdx.x;
  if (tid == 0) block_row = block_row_of(p.crow, p.block_rows, e);
  __syncthreads();
  const int64_t r0 = block_row * B, c0 = static_cast<int64_t>(p.bcol[e]) * B;

  constexpr int kFrags = (B / 16) * (B / 16), kSplit = kWarps / kFrags;
  const int f = warp % kFrags, part = warp / kFrags;
  const int fm = f / (B / 16), fn = f % (B / 16);
  using In = MmaIn<M, T>;
  constexpr int mk = kMmaK<M>;
  using ALayout = std::conditional_t<kACol, wmma::col_major, wmma::row_major>;
  using BLayout = std::conditional_t<kBCol, wmma::col_major, wmma::row_major>;
  wmma::fragment<wmma::accumulator, 16, 16, mk, float> cf;
  if constexpr (M != TileMath::kF32) wmma::fill_fragment(cf, 0.0f);
  // kF32: rows ty * kRm.. and columns tx * kRn.. of the block per thread.
  constexpr int kRm = B / 8, kRn = B / 16;
  const int ty = tid / 16, tx = tid % 16;
  float acc[kRm][kRn] = {};

  auto stage = [&](T* buf, int64_t k0) {
    const bool full = k0 + ks_len <= p.k;
    // a tile: rows r0.., inner k0..; b tile: inner k0.., columns c0..
    if constexpr (kACol) {
      sddmm_operand_stage<T, true>(buf, lda, B, ks_len, p.a, r0, k0, r0 + B, p.k, full && a_vectors);
    } else {
      sddmm_operand_stage<T, false>(buf, lda, B, ks_len, p.a, r0, k0, r0 + B, p.k, full && a_vectors);
    }
    T* bb = buf + Smem::kAElems;
    if constexpr (kBCol) {
      sddmm_operand_stage<T, true>(bb, ldb, ks_len, B, p.b, k0, c0, p.k, c0 + B, full && b_vectors);
    } else {
      sddmm_operand_stage<T, false>(bb, ldb, ks_len, B, p.b, k0, c0, p.k, c0 + B, full && b_vectors);
    }
    __pipeline_commit();
  };

  const int64_t steps = (p.k + ks_len - 1) / ks_len;
  if (steps > 0) stage(bufs, 0);
  for (int64_t s = 0; s < steps; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < steps) {
      stage(bufs + (cur ^ 1) * Smem::kBufElems, (s + 1) * ks_len);
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();
    const T* as = bufs + cur * Smem::kBufElems;
    const T* bs = as + Smem::kAElems;
    if constexpr (M == TileMath::kF32) {
      for (int kk = 0; kk < ks_len; ++kk) {
        float a[kRm], b[kRn];
        for (int i = 0; i < kRm; ++i) a[i] = kACol ? as[kk * lda + ty * kRm + i] : as[(ty * kRm + i) * lda + kk];
        for (int j = 0; j < kRn; ++j) b[j] = kBCol ? bs[(tx * kRn + j) * ldb + kk] : bs[kk * ldb + tx * kRn + j];
        for (int i = 0; i < kRm; ++i) {
          for (int j = 0; j < kRn; ++j) acc[i][j] += a[i] * b[j];
        }
      }
    } else {
      for (int ks = part * mk; ks < ks_len; ks += kSplit * mk) {
        wmma::fragment<wmma::matrix_a, 16, 16, mk, In, ALayout> af;
        wmma::fragment<wmma::matrix_b, 16, 16, mk, In, BLayout> bf;
        wmma::load_matrix_sync(af, kACol ? as + ks * lda + fm * 16 : as + fm * 16 * lda + ks, lda);
        wmma::load_matrix_sync(bf, kBCol ? bs + fn * 16 * ldb + ks : bs + ks * ldb + fn * 16, ldb);
        round_tf32<M>(af);
        round_tf32<M>(bf);
        wmma::mma_sync(cf, af, bf, cf);
      }
    }
    __syncthreads();
  }

  T* out = p.values + e * B * B;
  if constexpr (M == TileMath::kF32) {
    for (int i = 0; i < kRm; ++i) {
      for (int j = 0; j < kRn; ++j) out[(ty * kRm + i) * B + tx * kRn + j] = from_float<T>(acc[i][j]);
    }
    return;
  }
  wmma::store_matrix_sync(cs + warp * 256, cf, 16, wmma::mem_row_major);
  write_split_fragments<T, B, B>(cs, out);
}

template <typename T, int B, TileMath M>
void launch_staged_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  constexpr int v = kVec<T>;
  const dim3 grid(static_cast<unsigned>(p.nblocks));
  const bool a_col = p.a.row_stride == 1 && p.a.col_stride != 1;
  const bool b_col = p.b.row_stride == 1 && p.b.col_stride != 1;
  // 16-byte copies need runs of v elements: a unit stride along the staged
  // tile's contiguous dimension (an operand strided along both, as every
  // other column of a wider matrix, is staged element-wise), an aligned base,
  // and a stride along the other dimension that keeps every run aligned.
  auto vectors = [](const auto& m, bool col) {
    const int64_t unit = col ? m.row_stride : m.col_stride, other = col ? m.col_stride : m.row_stride;
    return reinterpret_cast<uintptr_t>(m.data) % 16 == 0 && unit == 1 && other % v == 0;
  };
  const bool a_vec = vectors(p.a, a_col);
  const bool b_vec = vectors(p.b, b_col);
  if (a_col && b_col)
    staged_sddmm_kernel<T, B, true, true, M><<<grid, kThreads, 0, stream>>>(p, a_vec, b_vec);
  else if (a_col)
    staged_sddmm_kernel<T, B, true, false, M><<<grid, kThreads, 0, stream>>>(p, a_vec, b_vec);
  else if (b_col)
    staged_sddmm_kernel<T, B, false, true, M><<<grid, kThreads, 0, stream>>>(p, a_vec, b_vec);
  else
    staged_sddmm_kernel<T, B, false, false, M><<<grid, kThreads, 0, stream>>>(p, a_vec, b_vec);
}

template <typename T, TileMath M>
void launch_product(const BsrProductArgs<T>& p, cudaStream_t stream) {
  const int mode = x_mode(p.x);
  const dim3 grid(static_cast<unsigned>(p.out_block_rows), static_cast<unsigned>((p.n + kTileN - 1) / kTileN));
  const int bm = p.transposed ? p.bw : p.bh;
  if (bm == 16) {
    product_kernel<T, 16, M><<<grid, kThreads, 0, stream>>>(p, mode);
  } else {
    product_kernel<T, 32, M><<<grid, kThreads, 0, stream>>>(p, mode);
  }
}

template <typename T, TileMath M>
void launch_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  if (p.bh == p.bw) {
    if (p.bh == 16) {
      launch_staged_sddmm<T, 16, M>(p, stream);
    } else {
      launch_staged_sddmm<T, 32, M>(p, stream);
    }
    return;
  }
  const dim3 grid(static_cast<unsigned>(p.nblocks));
  if (p.bh == 16 && p.bw == 16) {
    sddmm_kernel<T, 16, 16, M><<<grid, kThreads, 0, stream>>>(p);
  } else if (p.bh == 16) {
    sddmm_kernel<T, 16, 32, M><<<grid, kThreads, 0, stream>>>(p);
  } else if (p.bw == 16) {
    sddmm_kernel<T, 32, 16, M><<<grid, kThreads, 0, stream>>>(p);
  } else {
    sddmm_kernel<T, 32, 32, M><<<grid, kThreads, 0, stream>>>(p);
  }
}

}  // namespace

template <typename T>
void bsr_tiled_product(const BsrProductArgs<T>& args, TileMath math, cudaStream_t stream) {
  if (args.out_block_rows <= 0 || args.n <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (math == TileMath::kTf32) {
      launch_product<T, TileMath::kTf32>(args, stream);
    } else {
      launch_product<T, TileMath::kF32>(args, stream);
    }
  } else {
    launch_product<T, TileMath::kHalf>(args, stream);
  }
}

template <typename T>
void bsr_tiled_sddmm(const BsrSddmmArgs<T>& args, TileMath math, cudaStream_t stream) {
  if (args.nblocks <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (math == TileMath::kTf32) {
      launch_sddmm<T, TileMath::kTf32>(args, stream);
    } else {
      launch_sddmm<T, TileMath::kF32>(args, stream);
    }
  } else {
    launch_sddmm<T, TileMath::kHalf>(args, stream);
  }
}

template void bsr_tiled_product<float>(const BsrProductArgs<float>&, TileMath, cudaStream_t);
template void bsr_tiled_product<__nv_bfloat16>(const BsrProductArgs<__nv_bfloat16>&, TileMath, cudaStream_t);
template void bsr_tiled_product<__half>(const BsrProductArgs<__half>&, TileMath, cudaStream_t);
template void bsr_tiled_sddmm<float>(const BsrSddmmArgs<float>&, TileMath, cudaStream_t);
template void bsr_tiled_sddmm<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&, TileMath, cudaStream_t);
template void bsr_tiled_sddmm<__half>(const BsrSddmmArgs<__half>&, TileMath, cudaStream_t);

}  // namespace coppice::sparse_cuda
