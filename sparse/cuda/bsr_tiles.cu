// Tiled BSR SpMM and SDDMM (bsr_tiles.h).
//
// Why tiles: a stored [bh, bw] block is a small dense matrix, so a product
// with it reuses every loaded element bh or bw times, as a dense GEMM does;
// the per-element gathers of a CSR kernel (one dense-row segment per nonzero,
// L2-bound) do not arise. On an H100 at 90 % block sparsity, 32x32 blocks,
// the element-per-thread kernel of block_spmm.cu ran at about a tenth of the
// GPU's f32 rate; a tile kernel runs near the shared-memory bound of its
// micro-tiles (docs/benchmarks.md has the measurements).
//
// SpMM: a thread block (four warps) owns one output block row [block_m rows]
// times kTileN columns and walks that row's entries; for each block it stages
// the block (as stored or transposed: S^T is S's blocks read transposed, in
// block-column order) and the matching [kStageK, kTileN] slice of x in
// shared memory, then multiplies: f32 FMAs on a 4-column micro-tile per
// thread (kF32), or WMMA 16x16 fragments on tensor cores (kTf32, kHalf).
// Consecutive thread blocks take consecutive block rows of the same column
// tile, so the x slab they read stays in L2. Dense operands are strided
// (x and y may be transposed views), loaded with 16-byte vectors along
// whichever dimension is contiguous; an empty block row writes zeros. No
// atomics: results are the same on every run.
//
// SDDMM: a thread block per stored block computes a[rows of the block, :] @
// b[:, cols of the block] over the whole inner dimension in kSddmmStageK
// slices; where a block has fewer 16x16 fragments than warps, the warps split
// the inner dimension and add their parts at the end.
//
// TF32 inputs are rounded once, when staged; products accumulate in f32 and
// are rounded to T once.
#include "sparse/cuda/bsr_tiles.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

namespace coppice::sparse_cuda {
namespace {

using namespace nvcuda;

constexpr int kThreads = 128;  // four warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileN = 64;        // SpMM output columns per thread block
constexpr int kStageK = 16;       // SpMM: inner slice staged per step
constexpr int kSddmmStageK = 32;  // SDDMM: inner slice staged per step

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return __float2half_rn(v);
  }
}

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
  __syncthreads();
  const int64_t m0 = obr * BM;
  const bool n_fastest = p.y.col_stride == 1;
  for (int i = tid; i < BM * kTileN; i += kThreads) {
    const int r = n_fastest ? i / kTileN : i % BM, c = n_fastest ? i % kTileN : i / BM;
    if (n0 + c < p.n) p.y.data[(m0 + r) * p.y.row_stride + (n0 + c) * p.y.col_stride] = from_float<T>(cs[r * pc + c]);
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
    dst[r * ld + c] = gr < row_limit && gc < col_limit ? staged<M>(m.data[gr * m.row_stride + gc * m.col_stride]) : zero;
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
  if (tid == 0) {  // the block row holding block e: the last row starting at or before it
    int64_t lo = 0, hi = p.block_rows;  // crow[lo] <= e < crow[hi]
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (p.crow[mid] <= e) lo = mid; else hi = mid;
    }
    block_row = lo;
  }
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
    __syncthreads();
    for (int i = tid; i < BM * BN; i += kThreads) {
      const int r = i / BN, c = i % BN;
      const int frag = (r / 16) * (BN / 16) + c / 16;
      float sum = 0.0f;
      for (int q = 0; q < kSplit; ++q) sum += cs[(q * kFrags + frag) * 256 + (r % 16) * 16 + c % 16];
      out[i] = from_float<T>(sum);
    }
  }
}

template <typename T, TileMath M>
void launch_product(const BsrProductArgs<T>& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.out_block_rows), static_cast<unsigned>((p.n + kTileN - 1) / kTileN));
  const int mode = x_mode(p.x);
  const int bm = p.transposed ? p.bw : p.bh;
  if (bm == 16) {
    product_kernel<T, 16, M><<<grid, kThreads, 0, stream>>>(p, mode);
  } else {
    product_kernel<T, 32, M><<<grid, kThreads, 0, stream>>>(p, mode);
  }
}

template <typename T, TileMath M>
void launch_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
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
