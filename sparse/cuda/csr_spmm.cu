// Own CSR SpMM kernels (csr_spmm.h).
//
// Roofline (H100 SXM, the shape the issue targets: S [4096, 4096] at 90 %
// sparsity, nnz = 1.68 M, ~410 per row, random columns; X [4096, 4096] f32):
//   FLOPs   2 * nnz * n = 13.7 G: 0.27 ms at the measured 51 TFLOP/s f32.
//   DRAM    X 64 MB + Y 64 MB + S 13 MB, once each: 0.05 ms.
//   L2->SM  a plain row split (a warp per output row and column tile, X
//           read through L1) asks for one X element per multiply-add: 4
//           bytes per FMA, 27.5 GB; at the ~5 TB/s the L2 delivers that is
//           5 ms, so cuSPARSE (3.3 ms) and kRows (2.7 ms) live on L1 hits.
//   SMEM    wherever X comes from, each FMA needs its own X element out of
//           L1/shared memory (random columns give no reuse in registers: two
//           rows of a thread share a column with probability 0.1), and
//           L1/shared memory delivers 128 bytes per clock per SM: 32 f32
//           FMAs per clock per SM, 0.83-0.93 ms at 1.98-1.75 GHz.
// So the bound this targets is the shared-memory (L1) datapath, ~0.9 ms in
// f32 (3.7x below torch.sparse's 3.45 ms), which needs (a) the L2 out of the
// way and (b) few shared-memory accesses that are not X itself:
//   (a) kTiled stages X [kChunkK rows, kTileN columns] in shared memory with
//       cp.async and has a block of kTileM = 64 rows read it: an X row
//       segment that reaches the SM serves the ~6.4 rows of the tile that
//       have an entry there, so L2->SM traffic is 1 / (kTileM * density) of
//       a plain row split's (4.3 GB at 90 %). Consecutive blocks share a
//       column tile (block index = row tile fastest), so the X[:, tile] slab
//       (4 MB f32) stays in L2 while the SMs sweep its row tiles.
//   (b) each lane owns kPerLane = 8 f32 columns (two 16-byte vectors 128
//       columns apart, so a warp's 512-byte reads are conflict-free): an
//       entry's column (a shuffle from a window of 32 held one per lane) and
//       value (a broadcast load) cost ~2 wavefronts against 8 for X, so the
//       design's own ceiling is ~80 % of the bound: ~1.1-1.2 ms.
// Measured (H100, f32, this shape, medians of 10): at 90 % kTiled 2.22 ms,
// kRows 2.74, cuSPARSE 3.32, torch.sparse 3.45 (1.55x torch, not the 3x
// hoped for); at 50 % kTiled 6.6, kRows 7.9, cuSPARSE 16.2; at 99 % the
// staging alone takes ~0.8-1 ms (every chunk is staged whatever the tile's
// rows hold) and kRows (0.33 ms) wins. Under ncu (50 and 75 %, the
// 128-row variant) L1/shared memory was 65-72 % busy, the L2 6 %, and a
// scheduler found an eligible warp 40 % of the time (4 warps each); the
// rest of the gap is the per row and chunk work (3 shuffles, a ballot, a
// loop exit for ~3 entries per row and chunk at 90 %), the barrier per
// chunk across 16 warps of Poisson-distributed work, and a few spilled
// registers. Reaching 3x in f32 would take nearly all of the L1 bound; a
// 3xTF32 tensor-core kernel on densified 64-row tiles is the likelier road.
// A grid of (rows / 64) x (n / 256) blocks also does not fill 132 SMs for
// tall-skinny n; there kRows (a group of 4-32 lanes per output row and
// column tile, X through L1/L2) or cuSPARSE wins, and spmm_choice.h
// measures which.
//
// Load balance: rows come in the order `row_order` gives (decreasing length,
// csr_row_order.h), so the first blocks take the longest rows and each tile
// holds rows of similar length. Within a kTiled block, warps own 4 rows each
// and meet at a barrier per chunk.
//
// Determinism: every output element is one thread's sum over its row's
// entries in column order; no atomics, no split rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "sparse/cuda/csr_spmm.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/error.h"

namespace coppice::sparse_cuda {
namespace {

constexpr int kThreads = 256;

// Element types: the accumulator type, scalar conversions, and 16-byte
// vectors unpacked to / packed from accumulators (bit operations, so no
// aliasing through memory).
template <typename T>
struct Elem;

template <>
struct Elem<float> {
  using Acc = float;
  static constexpr int kVec = 4;
  __device__ static float to_acc(float v) { return v; }
  __device__ static float from_acc(float a) { return a; }
  __device__ static float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
  __device__ static void unpack(uint4 u, float (&o)[kVec]) {
    o[0] = __uint_as_float(u.x), o[1] = __uint_as_float(u.y), o[2] = __uint_as_float(u.z), o[3] = __uint_as_float(u.w);
  }
  __device__ static uint4 pack(const float* a) {
    return make_uint4(__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3]));
  }
};

template <>
struct Elem<double> {
  using Acc = double;
  static constexpr int kVec = 2;
  __device__ static double to_acc(double v) { return v; }
  __device__ static double from_acc(double a) { return a; }
  __device__ static double fma(double a, double b, double c) { return __fma_rn(a, b, c); }
  __device__ static void unpack(uint4 u, double (&o)[kVec]) {
    o[0] = __hiloint2double(static_cast<int>(u.y), static_cast<int>(u.x));
    o[1] = __hiloint2double(static_cast<int>(u.w), static_cast<int>(u.z));
  }
  __device__ static uint4 pack(const double* a) {
    return make_uint4(static_cast<unsigned>(__double2loint(a[0])), static_cast<unsigned>(__double2hiint(a[0])),
                      static_cast<unsigned>(__double2loint(a[1])), static_cast<unsigned>(__double2hiint(a[1])));
  }
};

// The 16-bit types: element 2i of a vector is the low half of word i.
template <typename H>
struct HalfElem {
  using Acc = float;
  static constexpr int kVec = 8;
  __device__ static float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
  __device__ static float lo(unsigned w) { return H::bits_to_float(static_cast<unsigned short>(w & 0xffffu)); }
  __device__ static float hi(unsigned w) { return H::bits_to_float(static_cast<unsigned short>(w >> 16)); }
  __device__ static unsigned two(float a, float b) {
    return static_cast<unsigned>(H::float_to_bits(a)) | (static_cast<unsigned>(H::float_to_bits(b)) << 16);
  }
  __device__ static void unpack(uint4 u, float (&o)[kVec]) {
    o[0] = lo(u.x), o[1] = hi(u.x), o[2] = lo(u.y), o[3] = hi(u.y);
    o[4] = lo(u.z), o[5] = hi(u.z), o[6] = lo(u.w), o[7] = hi(u.w);
  }
  __device__ static uint4 pack(const float* a) {
    return make_uint4(two(a[0], a[1]), two(a[2], a[3]), two(a[4], a[5]), two(a[6], a[7]));
  }
};

struct Bf16Bits {
  __device__ static float bits_to_float(unsigned short b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }
  __device__ static unsigned short float_to_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

struct F16Bits {
  __device__ static float bits_to_float(unsigned short b) { return __half2float(__ushort_as_half(b)); }
  __device__ static unsigned short float_to_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

template <>
struct Elem<__nv_bfloat16> : HalfElem<Bf16Bits> {
  __device__ static float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from_acc(float a) { return __float2bfloat16_rn(a); }
};

template <>
struct Elem<__half> : HalfElem<F16Bits> {
  __device__ static float to_acc(__half v) { return __half2float(v); }
  __device__ static __half from_acc(float a) { return __float2half_rn(a); }
};

// `kVec` consecutive elements at p as accumulators: one 16-byte load when
// kVec is the type's vector, else one scalar.
template <typename T, int kVec>
__device__ inline void load_acc(const T* p, typename Elem<T>::Acc (&o)[kVec]) {
  if constexpr (kVec == 1) {
    o[0] = Elem<T>::to_acc(p[0]);
  } else {
    static_assert(kVec == Elem<T>::kVec, "a vector is 16 bytes");
    Elem<T>::unpack(*reinterpret_cast<const uint4*>(p), o);
  }
}

template <typename T, int kVec>
__device__ inline void store_acc(T* p, const typename Elem<T>::Acc* a) {
  if constexpr (kVec == 1) {
    p[0] = Elem<T>::from_acc(a[0]);
  } else {
    *reinterpret_cast<uint4*>(p) = Elem<T>::pack(a);
  }
}

// ---------------------------------------------------------------- kTiled

constexpr int kTiledStageKB = 32, kTiledStages = 3, kTiledRowsPerWarp = 4;  // launch_tiled says why

// 16 warps of kRows rows (kTileM = 16 * kRows), kStageKB of X per stage and
// kStageCount stages, all but one in flight while one is read; kRows <= 4
// (64 registers a thread) lets two blocks share an SM.
template <typename T, int kStageKB, int kStageCount, int kRows>
struct Tiled {
  static constexpr int kVec = Elem<T>::kVec;                   // elements per 16-byte vector
  static constexpr int kVecsPerLane = sizeof(T) == 2 ? 1 : 2;  // 16-bit: 8 columns in one vector already
  static constexpr int kPerLane = kVec * kVecsPerLane;         // f32 8, f64 4, bf16/f16 8
  static constexpr int kTileN = 32 * kPerLane;                 // f32 256, f64 128, bf16/f16 256
  static constexpr int kWarps = 16;
  static constexpr int kBlockThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kRows;
  static constexpr int kMinBlocks = kRows <= 4 ? 2 : 1;
  static constexpr int kTileM = kWarps * kRowsPerWarp;
  static constexpr int kStageBytes = kStageKB * 1024;
  static constexpr int kChunkK = kStageBytes / (kTileN * static_cast<int>(sizeof(T)));
  static constexpr int kStages = kStageCount;
  static constexpr int kSmemBytes = kStages * kStageBytes;  // at most 227 KB
  static constexpr int kVecsPerRow = kTileN / kVec;
  static constexpr int kStageVecs = kChunkK * kVecsPerRow;
  static_assert(kStageVecs % kBlockThreads == 0, "every thread stages the same number of vectors");
};

// 16 bytes global -> shared, bypassing L1 (X is read once per block from
// L2); zero-filled when !valid (beyond the last row or column of X).
__device__ inline void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Block (row tile rt, column tile ct), rt fastest. Warp w owns the tile's
// rows w * kRows .. (w + 1) * kRows - 1 (slots into row_order), each lane the columns
// n0 + j * 32 * kVec + lane * kVec + [0, kVec) for j < kVecsPerLane. Rows are
// walked once, chunk by chunk: entry q of a row belongs to the current chunk
// while col[q] < the chunk's end (columns are sorted).
template <typename T, int kStageKB, int kStageCount, int kRows>
__global__ void __launch_bounds__(Tiled<T, kStageKB, kStageCount, kRows>::kBlockThreads,
                                  Tiled<T, kStageKB, kStageCount, kRows>::kMinBlocks)
    tiled_kernel(const int32_t* __restrict__ crow, const int32_t* __restrict__ col, const T* __restrict__ val,
                 const int32_t* __restrict__ order, int64_t rows, int64_t cols, int64_t n, int64_t row_tiles,
                 const T* __restrict__ x, T* __restrict__ y) {
  using C = Tiled<T, kStageKB, kStageCount, kRows>;
  using E = Elem<T>;
  using A = typename E::Acc;
  constexpr int R = C::kRowsPerWarp;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const xs = reinterpret_cast<T*>(smem_raw);

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64_t rt = blockIdx.x % row_tiles, ct = blockIdx.x / row_tiles;
  const int64_t n0 = ct * C::kTileN;

  // The row of slot i of this warp, or -1 past the last row (looked up
  // again for the stores rather than held in registers through the loop).
  auto row_of = [&](int i) -> int32_t {
    const int64_t slot = rt * C::kTileM + warp * R + i;
    if (slot >= rows) return -1;
    return order != nullptr ? order[slot] : static_cast<int32_t>(slot);
  };
  // Per row: the next entry p, the end e, and a window of the columns of 32
  // entries from b held one per lane (bc, INT_MAX past the end), so that the
  // loop over a chunk's entries gets each column by a shuffle, with no
  // global load on the chain column -> X address -> FMA (a broadcast load of
  // the column per entry made it latency-bound: 2.3x slower than the
  // shared-memory bound at 50 % density). The value is a broadcast load off
  // that chain. p, e and b of row i live in lane i: registers are the limit
  // (64 accumulators per lane already; values in registers too spilled).
  int32_t bc[R];
  auto fill = [&](int i, int32_t from, int32_t end) {
    const int32_t idx = from + lane;
    bc[i] = idx < end ? col[idx] : INT_MAX;
  };
  int32_t rp = 0, re = 0, rb = 0;  // in lane i < R: row i's p, e and b
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int32_t r = row_of(i);
    const int32_t start = r >= 0 ? crow[r] : 0, end = r >= 0 ? crow[r + 1] : 0;
    if (lane == i) rp = start, re = end, rb = start;
    fill(i, start, end);
  }
  A acc[R][C::kPerLane];
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < C::kPerLane; ++t) acc[i][t] = A(0);
  }

  const int64_t chunks = (cols + C::kChunkK - 1) / C::kChunkK;
  // X [c * kChunkK, +kChunkK) x [n0, n0 + kTileN) into stage s, row-major
  // with kTileN elements per row; consecutive threads take consecutive
  // 16-byte vectors, so the copy coalesces and the stores are conflict-free.
  auto stage = [&](int64_t c, int s) {
    T* dst = xs + s * (C::kChunkK * C::kTileN);
#pragma unroll
    for (int i = 0; i < C::kStageVecs / C::kBlockThreads; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * C::kBlockThreads;
      const int kk = v / C::kVecsPerRow, vc = v % C::kVecsPerRow;
      const int64_t k = c * C::kChunkK + kk, cn = n0 + static_cast<int64_t>(vc) * C::kVec;
      const bool ok = k < cols && cn < n;  // n is a multiple of kVec: a vector is all in or all out
      cp_async16(dst + kk * C::kTileN + vc * C::kVec, ok ? x + k * n + cn : x, ok);
    }
  };

  // Chunk c is read while c + 1 .. c + kStages - 1 are in flight (bytes in
  // flight, not L2 bandwidth, limited the staging with fewer).
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < chunks) stage(s, s);
    cp_async_commit();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    // Stage c + kStages - 1 into the buffer read in iteration c - 1 (which
    // ended at a barrier), then wait for stage c: the kStages - 1 groups
    // committed after it (possibly empty) may stay in flight.
    if (c + C::kStages - 1 < chunks) { stage(c + C::kStages - 1, static_cast<int>((c + C::kStages - 1) % C::kStages)); }
    cp_async_commit();
    cp_async_wait<C::kStages - 1>();
    __syncthreads();

    const T* xc = xs + (c % C::kStages) * (C::kChunkK * C::kTileN) + lane * C::kVec;
    const int32_t k0 = static_cast<int32_t>(c * C::kChunkK);
    const int32_t kend = k0 + C::kChunkK;
    bool more = false;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      // Everything below is the same in every lane (q, end, from, the ballot).
      int32_t q = __shfl_sync(0xffffffffu, rp, i);
      const int32_t end = __shfl_sync(0xffffffffu, re, i);
      int32_t from = __shfl_sync(0xffffffffu, rb, i);
      while (true) {
        if (q == from + 32 && q < end) {  // window used up, entries left
          from = q;
          fill(i, from, end);
        }
        // Columns are sorted, so the window's entries below kend are a
        // prefix of it (consumed ones included); invalid lanes never count.
        const int32_t hi = from + __popc(__ballot_sync(0xffffffffu, bc[i] < kend));
#pragma unroll(kRows > 4 ? 4 : 1)  // unrolled, 4 rows a warp spill at 64 registers
        for (; q < hi; ++q) {
          const int32_t k = __shfl_sync(0xffffffffu, bc[i], q - from);
          const A v = E::to_acc(val[q]);
          const T* xk = xc + (k - k0) * C::kTileN;
#pragma unroll
          for (int j = 0; j < C::kVecsPerLane; ++j) {
            A xv[C::kVec];
            E::unpack(*reinterpret_cast<const uint4*>(xk + j * 32 * C::kVec), xv);
#pragma unroll
            for (int t = 0; t < C::kVec; ++t) acc[i][j * C::kVec + t] = E::fma(v, xv[t], acc[i][j * C::kVec + t]);
          }
        }
        // Stop where the next entry is past this chunk or the row ends;
        // go on with a new window where this one was all below kend.
        if (hi < from + 32 || hi >= end) break;
      }
      if (lane == i) rp = q, rb = from;
      more = more || q < end;
    }
    // Every thread is done with stage c % kStages before iteration c + 1 refills
    // it; and when no row of the tile has entries left, the rest of X is not
    // needed (rows that end early, such as triangular patterns).
    if (!__syncthreads_or(more ? 1 : 0)) break;
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the block is gone

#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int32_t r = row_of(i);
    if (r < 0) continue;
    T* yr = y + static_cast<int64_t>(r) * n + n0 + lane * C::kVec;
#pragma unroll
    for (int j = 0; j < C::kVecsPerLane; ++j) {
      if (n0 + j * 32 * C::kVec + lane * C::kVec < n)
        store_acc<T, C::kVec>(yr + j * 32 * C::kVec, &acc[i][j * C::kVec]);
    }
  }
}

// ---------------------------------------------------------------- kRows

// A group of G = 1 << g_log2 lanes (4..32, dividing the warp) per (row slot,
// column tile), slot fastest so that neighbouring groups share X's column
// tile. Lane l of a group owns the columns c0 + j * G * kVec + [0, kVec),
// c0 = tile * G * kVec * kVecs + l * kVec, for j < kVecs: with kVec = 1
// scalars (any n, any alignment), else 16-byte vectors. The group loads G
// entries of its row at a time, one per lane, and broadcasts each with a
// shuffle; the shuffles name only the group's lanes, since groups of one
// warp run rows of different lengths.
template <typename T, int kVec, int kVecs>
__global__ void __launch_bounds__(kThreads)
    rows_kernel(const int32_t* __restrict__ crow, const int32_t* __restrict__ col, const T* __restrict__ val,
                const int32_t* __restrict__ order, int64_t rows, int64_t n, int64_t tiles, int g_log2,
                const T* __restrict__ x, T* __restrict__ y) {
  using E = Elem<T>;
  using A = typename E::Acc;
  const int G = 1 << g_log2;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int gl = lane & (G - 1);
  const unsigned gmask = G == 32 ? 0xffffffffu : ((1u << G) - 1u) << (lane & ~(G - 1));
  const int64_t group = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> g_log2;
  if (group >= rows * tiles) return;  // a whole group at once (G divides the block)
  const int64_t tile = group / rows, slot = group - tile * rows;
  const int64_t r = order != nullptr ? order[slot] : slot;
  const int64_t span = static_cast<int64_t>(G) * kVec;  // columns between a lane's vectors
  const int64_t c0 = tile * span * kVecs + static_cast<int64_t>(gl) * kVec;

  A acc[kVecs][kVec];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int t = 0; t < kVec; ++t) acc[j][t] = A(0);
  }
  const int32_t start = crow[r], end = crow[r + 1];
  for (int32_t p = start; p < end; p += G) {
    const int32_t mine = p + gl;
    int32_t my_col = 0;
    A my_val = A(0);
    if (mine < end) my_col = col[mine], my_val = E::to_acc(val[mine]);
    const int count = min(G, end - p);
#pragma unroll 4
    for (int q = 0; q < count; ++q) {
      const int32_t k = __shfl_sync(gmask, my_col, q, G);
      const A v = __shfl_sync(gmask, my_val, q, G);
      const T* xk = x + static_cast<int64_t>(k) * n + c0;
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        if (c0 + j * span < n) {
          A xv[kVec];
          load_acc<T, kVec>(xk + j * span, xv);
#pragma unroll
          for (int t = 0; t < kVec; ++t) acc[j][t] = E::fma(v, xv[t], acc[j][t]);
        }
      }
    }
  }
  T* yr = y + r * n + c0;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    if (c0 + j * span < n) store_acc<T, kVec>(yr + j * span, acc[j]);
  }
}

__global__ void row_order_keys_kernel(const int32_t* __restrict__ crow, int64_t rows, int64_t cols,
                                      uint32_t* __restrict__ keys, int32_t* __restrict__ ids) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= rows) return;
  keys[r] = static_cast<uint32_t>(cols - (crow[r + 1] - crow[r]));
  ids[r] = static_cast<int32_t>(r);
}

// ---------------------------------------------------------------- launch

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int vec_of(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

unsigned blocks_for(int64_t threads) {
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  COPPICE_CHECK(blocks <= INT_MAX, "csr_spmm: ", blocks, " thread blocks exceed the grid limit");
  return static_cast<unsigned>(blocks);
}

template <typename T, int kStageKB, int kStageCount, int kRows>
void launch_tiled_as(const CsrSpmmArgs& a, cudaStream_t stream) {
  using C = Tiled<T, kStageKB, kStageCount, kRows>;
  const int64_t row_tiles = (a.rows + C::kTileM - 1) / C::kTileM;
  const int64_t col_tiles = (a.n + C::kTileN - 1) / C::kTileN;
  COPPICE_CHECK(row_tiles * col_tiles <= INT_MAX, "csr_spmm: ", row_tiles * col_tiles,
                " thread blocks exceed the grid limit");
  // Above 48 KB of dynamic shared memory a kernel must opt in (per device;
  // cheap to repeat).
  auto kernel = tiled_kernel<T, kStageKB, kStageCount, kRows>;
  COPPICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes),
                     "csr_spmm");
  kernel<<<static_cast<unsigned>(row_tiles * col_tiles), C::kBlockThreads, C::kSmemBytes, stream>>>(
      a.crow, a.col, static_cast<const T*>(a.values), a.row_order, a.rows, a.cols, a.n, row_tiles,
      static_cast<const T*>(a.x), static_cast<T*>(a.y));
}

// The shape, measured on the H100 (4096^2 at 90 % sparsity x 4096^2 f32;
// 50 % in brackets): 16 warps of 4 rows (64-row tiles, two blocks per SM),
// 32 KB x 3 stages: 2.22 ms (6.59); 16 warps of 8 rows (128-row tiles, one
// block per SM), 64 KB x 3: 2.33 (7.84); the same with 32 KB x 6: 2.85;
// 72 KB x 3: 2.37; 8 warps of 8 rows, 32 KB x 3: 3.00. The L2 is not what
// limits it (6 % busy, 87 % hits under ncu); L1/shared memory is 65-72 %
// busy and the schedulers find an eligible warp 40 % of the time, so more
// warps per SM (fewer accumulators per thread) won over more X reuse.
template <typename T>
void launch_tiled(const CsrSpmmArgs& a, cudaStream_t stream) {
  launch_tiled_as<T, kTiledStageKB, kTiledStages, kTiledRowsPerWarp>(a, stream);
}

template <typename T, int kVec, int kVecs>
void launch_rows_as(const CsrSpmmArgs& a, cudaStream_t stream) {
  // The smallest group whose tile covers n (small n: several rows per warp),
  // at most a warp.
  int g_log2 = 2;
  while (g_log2 < 5 && (int64_t{1} << g_log2) * kVec * kVecs < a.n) ++g_log2;
  const int64_t tile_cols = (int64_t{1} << g_log2) * kVec * kVecs;
  const int64_t tiles = (a.n + tile_cols - 1) / tile_cols;
  rows_kernel<T, kVec, kVecs><<<blocks_for((a.rows * tiles) << g_log2), kThreads, 0, stream>>>(
      a.crow, a.col, static_cast<const T*>(a.values), a.row_order, a.rows, a.n, tiles, g_log2,
      static_cast<const T*>(a.x), static_cast<T*>(a.y));
}

template <typename T>
void launch_rows(const CsrSpmmArgs& a, cudaStream_t stream) {
  if (csr_tiled_supported(a)) {
    launch_rows_as<T, Elem<T>::kVec, Tiled<T, kTiledStageKB, kTiledStages, kTiledRowsPerWarp>::kVecsPerLane>(a, stream);
  } else {
    launch_rows_as<T, 1, 4>(a, stream);
  }
}

template <typename T>
void launch(CsrSpmmKernel kernel, const CsrSpmmArgs& a, cudaStream_t stream) {
  if (kernel == CsrSpmmKernel::kTiled) {
    COPPICE_CHECK(csr_tiled_supported(a), "csr_spmm: internal: the tiled kernel needs 16-byte aligned operands and n",
                  " a multiple of ", vec_of(a.dtype), ", got n = ", a.n);
    launch_tiled<T>(a, stream);
  } else {
    launch_rows<T>(a, stream);
  }
}

}  // namespace

const char* csr_spmm_kernel_name(CsrSpmmKernel kernel) { return kernel == CsrSpmmKernel::kTiled ? "tiled" : "rows"; }

bool csr_tiled_supported(const CsrSpmmArgs& a) {
  const bool floating =
      a.dtype == DType::kF32 || a.dtype == DType::kF64 || a.dtype == DType::kBF16 || a.dtype == DType::kF16;
  return floating && a.n % vec_of(a.dtype) == 0 && aligned16(a.x) && aligned16(a.y);
}

int64_t csr_tiled_blocks(const CsrSpmmArgs& a) {
  using F32 = Tiled<float, kTiledStageKB, kTiledStages, kTiledRowsPerWarp>;
  using F64 = Tiled<double, kTiledStageKB, kTiledStages, kTiledRowsPerWarp>;
  const int64_t tile_n = a.dtype == DType::kF64 ? F64::kTileN : F32::kTileN;
  const int64_t tile_m = F32::kTileM;
  return ((a.rows + tile_m - 1) / tile_m) * ((a.n + tile_n - 1) / tile_n);
}

void csr_spmm(CsrSpmmKernel kernel, const CsrSpmmArgs& a, cudaStream_t stream) {
  COPPICE_CHECK(a.rows >= 1 && a.n >= 1, "csr_spmm: internal: empty output [", a.rows, ", ", a.n, "]");
  switch (a.dtype) {
    case DType::kF32: launch<float>(kernel, a, stream); break;
    case DType::kF64: launch<double>(kernel, a, stream); break;
    case DType::kBF16: launch<__nv_bfloat16>(kernel, a, stream); break;
    case DType::kF16: launch<__half>(kernel, a, stream); break;
    default: fail("csr_spmm: ", dtype_name(a.dtype), " values are not supported (f32, f64, bf16, f16)");
  }
  cuda::check_launch("csr_spmm");
}

void csr_row_order_keys(const int32_t* crow, int64_t rows, int64_t cols, uint32_t* keys, int32_t* ids,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  row_order_keys_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(crow, rows, cols, keys, ids);
  cuda::check_launch("csr_row_order");
}

}  // namespace coppice::sparse_cuda
