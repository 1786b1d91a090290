// BSR products of 32x32 blocks on Hopper's warpgroup MMA (bsr_wgmma32.h).
//
// bsr_wgmma.cu's kernel puts op(S)'s block rows on wgmma's M, which is 64:
// a 32-row block row would fill half of it, and two block rows share no
// slices of x. Here the tokens take M and the block row takes N
// (m64n32k16): a tile is 256 tokens (four m64 halves; 128 for the forward
// gelu forms: ProductTile) by one output block row (32 features of y), and
// each stored block of the row is one stage of the ring: x's [tokens, 32]
// slice at the block's column and the block
// itself, both in rows of 64 bytes in the 64-byte swizzle (wgmma.cuh). x is
// K-major (token-major, its 32 columns along the row); the block is B,
// K-major for op(S) = S (its rows are y's features) and MN-major for op(S)
// = S^T (dY @ W, walking S by block columns), read with wgmma's transpose
// of B, so neither direction copies or transposes a block. The
// accumulators then hold y's tile in y's own token-major order: the
// write-out applies bsr_mma.cu's arithmetic (epilogue.cuh: bias, relu or a
// gelu form, rounded once), stmatrix moves it untransposed into a staging
// tile in the same swizzle, and one thread writes that to y with a TMA store
// that runs on while the warpgroup goes on (a gelu form's z goes out the
// same way, or for its gradient comes in by TMA load during the products;
// so does linear_add's residual r in the plain form, added to each value
// after its rounding: add(r, y)'s bits).
//
// A thread block is one warpgroup that multiplies and one warp that loads
// (a single thread issues the TMA copies into a ring of stages, running
// ahead of the warpgroup across tiles, 32 tiles' work read at a time:
// bsr_wgmma_walk.cuh). Two or three thread blocks share an SM, so one
// block's write-out overlaps the others' products without the 64x64
// kernel's ping-pong turns.
//
// Why 256 tokens a tile: the product is bound by its L2 traffic (Nsight
// Compute: the L2 at three quarters of its peak), which is x's slices, read
// once per stored block of a column, and the stored blocks, read once per
// tile. Tiles of 256 tokens read the blocks half as often as tiles of 128 (on
// fc2's forward product, 54 of 538 MB). On an H200 the products took 4-10 %
// less time for it; on an H100 (its L2 then at 86 % of peak) the plain and
// gradient forms 0-8 % less. Four thread blocks an SM of 128-token tiles,
// more resident work without less traffic, gained nothing. The forward gelu
// forms keep tiles of 128 (ProductTile says why).
//
// Tokens past n arrive as zeros and are not stored; an empty block row writes
// the bias (or zeros). No atomics: each output is one thread's sum in a fixed
// order, the same bits on every run.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "sparse/cuda/bsr_wgmma.h"
#include "sparse/cuda/bsr_wgmma32.h"
#include "sparse/cuda/bsr_wgmma_walk.cuh"
#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/sddmm_run.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/shared_memory_limit.h"
#include "tensor/cuda/tma.cuh"
#include "tensor/cuda/wgmma.cuh"
#include "tensor/error.h"

namespace coppice::sparse_cuda {
namespace {

using cuda::barrier_arrive;
using cuda::barrier_expect;
using cuda::sw64_desc;
using cuda::tma_load;
using cuda::tma_store;

constexpr std::string_view kOp = "bsr wgmma product";
constexpr int kB = 32;                     // the block's side
constexpr int kConsumers = 128;            // one warpgroup multiplies
constexpr int kThreads = kConsumers + 32;  // and one warp loads
constexpr int kABytes = kB * kB * 2;       // the block: 2 KB

// A form's tile and ring. Tiles of 256 tokens (four m64 halves, four stages
// of 18 KB, two thread blocks an SM) for the plain and gradient forms; the
// forward gelu forms, which hold y's and z's values in the write-out and
// spilled 8-24 bytes at the 168 registers two blocks an SM leave, keep tiles
// of 128 (two halves, five stages of 10 KB, three blocks an SM): at 256 they
// took 14 % longer on an H100 (fc1's x W^T + gelu, 0.1692 -> 0.1936 ms) and
// the same on an H200.
template <GeluWriteOut kGelu>
struct ProductTile {
  static constexpr bool kShort = is_gelu_forward(kGelu);
  static constexpr int kTileN = kShort ? 128 : 256;    // tokens a tile
  static constexpr int kHalves = kTileN / 64;          // m64 products a k16 step
  static constexpr int kBlocksPerSm = kShort ? 3 : 2;  // thread blocks an SM (as shared memory allows)
  static constexpr int kXBytes = kTileN * kB * 2;      // x's slice: 8 or 16 KB
  static constexpr int kStageBytes = kXBytes + kABytes;
  static constexpr int kStages = kShort ? 5 : 4;
  static constexpr int kOutBytes = kTileN * kB * 2;  // y's tile (or z's) in the staging area
  static constexpr int kOutOffset = (kStages * kStageBytes + 16 * kStages + 1023) / 1024 * 1024;  // from the ring
  static constexpr int kZBarOffset = kOutOffset + 2 * kOutBytes;  // after y's and z's tiles
  static constexpr int kSmemBytes = 1024 + kZBarOffset + 8;
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms aligned");
  static_assert(kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024, "an SM's shared memory for kBlocksPerSm blocks");
};

struct Maps {
  CUtensorMap values;  // S's blocks as [nblocks * 32, 32]: a box a block
  CUtensorMap x;       // x as [n, inner]: boxes of 32 x kTileN
  CUtensorMap y;       // y as [n, rows]: boxes of 32 features x kTileN tokens, stored from the staging tile
  CUtensorMap aux;     // z, as y (a gelu form only): stored (forward) or loaded (gradient); or the residual, loaded
};

// The write-out's form is the kernel's (kGelu, kRelu, kResidual), as in bsr_wgmma.cu.
template <typename T, bool kTransB, GeluWriteOut kGelu, bool kRelu, bool kResidual>
__global__ void __launch_bounds__(kThreads, ProductTile<kGelu>::kBlocksPerSm)
    bsr_wgmma32_kernel(const __grid_constant__ Maps maps, const BsrProductArgs<T> p, int64_t tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = ProductTile<kGelu>;
  extern __shared__ unsigned char smem_raw[];
  const auto ring = cuda::stage_ring<Tile::kStages, Tile::kStageBytes>(smem_raw, kConsumers / 32);
  const int tid = threadIdx.x;
  const uint32_t zbar = ring.base + Tile::kZBarOffset;
  if (tid == 0) {
    cuda::barrier_init(zbar, 1);
    cuda::barrier_init_fence();
  }
  __syncthreads();
  // Launched to overlap the kernel before it (launch): only the barriers
  // above come before this wait; every read and write of global memory (the
  // walk's pattern, x, the blocks, y) comes after it.
  cuda::wait_for_prerequisite_grids();
  cuda::allow_dependent_launch();  // the next kernel may set up under this one's tail

  if (tid >= kConsumers) {
    // The loading warp: one thread issues every copy, a stage a stored
    // block; the rest of the warp helps read the tiles' work.
    int step = 0;
    for_each_tile<true>(p, tiles, Tile::kTileN, [&](int64_t, const TileWork& w) {
      if (tid != kConsumers) return;
      for (int32_t e = w.begin; e < w.end; ++e, ++step) {
        const int32_t k = e - w.begin;
        // (Selects, not w.blk[k]: an index the compiler cannot see puts w in local memory.)
        const int64_t blk = k == 0 ? w.blk[0] : k == 1 ? w.blk[1] : p.bid != nullptr ? p.bid[e] : e;
        const int32_t kblk = k == 0 ? w.kblk[0] : k == 1 ? w.kblk[1] : p.kblk[e];
        ring.wait_empty(step);
        const uint32_t full = ring.full(step), st = ring.stage(step);
        barrier_expect(full, Tile::kStageBytes);
        tma_load(st, &maps.x, kblk * kB, w.n0, full);
        tma_load(st + Tile::kXBytes, &maps.values, 0, static_cast<int>(blk * kB), full);
      }
    });
    return;
  }

  const int warp = tid / 32, lane = tid % 32, t4 = lane % 4;
  const bool leader = tid == 0;  // issues the TMA stores and z loads
  unsigned char* y_stage = ring.smem + Tile::kOutOffset;
  unsigned char* z_stage = y_stage + Tile::kOutBytes;
  constexpr bool gradient = is_gelu_gradient(kGelu), forward = is_gelu_forward(kGelu);
  static_assert(!kResidual || (kGelu == GeluWriteOut::kNone && !kRelu), "the residual beside the plain form only");
  constexpr bool loads_aux = gradient || kResidual;  // z, or the residual, arrives by TMA under the products
  // stmatrix's rows: lane l gives the 16 bytes of the warp's row 8 (q % 2) +
  // l % 8 at columns 8 (j + q / 2).., q = l / 8 (the four matrices of
  // accumulators j and j + 1: rows g and g + 8 of the warp's 16).
  const int q = lane / 8;
  int zphase = 0;
  int step = 0;
  for_each_tile<false>(p, tiles, Tile::kTileN, [&](int64_t, const TileWork& w) {
    const int steps = w.end - w.begin;
    const int64_t r0 = int64_t{w.obr} * kB;  // y's first feature
    // Accumulators j hold features 8j + 2 t4 and 8j + 2 t4 + 1 of the tile:
    // their biases, read before the products, off the write-out's path.
    const bool has_bias = p.bias != nullptr;
    float bias[4][2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int k = 0; k < 2; ++k) bias[j][k] = has_bias ? to_float(p.bias[r0 + 8 * j + 2 * t4 + k]) : 0.f;
    }
    // The gradient's z (or the residual) comes in under the products (the
    // last write-out has read the staging tile: the warpgroup met at barrier
    // 1 since).
    if (loads_aux && leader) {
      barrier_expect(zbar, Tile::kOutBytes);
      tma_load(cuda::smem_u32(z_stage), &maps.aux, static_cast<int>(r0), w.n0, zbar);
    }
    float acc[Tile::kHalves][4][4] = {};
    cuda::fence_registers(acc);

    for (int s = 0; s < steps; ++s, ++step) {
      const uint32_t st = ring.stage(step);
      ring.wait_full(step);
      cuda::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kB / 16; ++ks) {
        // B: K-major, 32 bytes along the rows a k16 step; MN-major (the block
        // read transposed), 16 rows of k, 1024 bytes.
        const uint64_t b = sw64_desc(st + Tile::kXBytes + (kTransB ? ks * 1024 : ks * 32));
#pragma unroll
        for (int h = 0; h < Tile::kHalves; ++h)
          cuda::wgmma_64x32_ss<T, false, kTransB>(acc[h], sw64_desc(st + h * 64 * 64 + ks * 32), b);
      }
      cuda::wgmma_commit();
      // The previous step's group is done: its stage goes back to the loader.
      cuda::wgmma_wait<1>();
      cuda::fence_registers(acc);
      if (s > 0 && lane == 0) barrier_arrive(ring.empty(step - 1));
    }
    cuda::wgmma_wait<0>();
    cuda::fence_registers(acc);
    if (steps > 0 && lane == 0) barrier_arrive(ring.empty(step - 1));  // the tile's last stage

    // The staging tiles are free once the last store has read them.
    if (leader) cuda::bulk_wait_read<0>();
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
    if constexpr (loads_aux) {
      cuda::barrier_wait(zbar, zphase);
      zphase ^= 1;
    }
#pragma unroll
    for (int h = 0; h < Tile::kHalves; ++h) {
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        const int offset = cuda::sw64_offset(64 * h + 16 * warp + 8 * (q % 2) + lane % 8, j + q / 2);
        uint32_t zs[4];  // z's pairs (the gelu forms), or the residual's
        if constexpr (loads_aux) cuda::ldmatrix_x4<false>(zs, z_stage + offset);
        // The eight values of the four matrices (v[m][k]: matrix m,
        // accumulator j + m / 2's 2 (m % 2) + k), each pair through its gelu
        // form as it is formed.
        float v[4][2];
        uint32_t ys[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            float& x = v[m][k];
            x = acc[h][j + m / 2][2 * (m % 2) + k];
            if (has_bias) x += bias[j + m / 2][k];
            if constexpr (kRelu) x = relu(x);
          }
          ys[m] = gelu_pair<T, kGelu>(v[m], zs[m]);
          if constexpr (kResidual) ys[m] = add_residual_pair<T>(ys[m], zs[m]);
        }
        cuda::stmatrix_x4<false>(y_stage + offset, ys);
        if constexpr (forward) cuda::stmatrix_x4<false>(z_stage + offset, zs);
      }
    }
    cuda::fence_proxy_async();  // the staging tiles' writes, before the TMA store reads them
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
    if (leader) {
      tma_store(&maps.y, cuda::smem_u32(y_stage), static_cast<int>(r0), w.n0);
      if constexpr (forward) tma_store(&maps.aux, cuda::smem_u32(z_stage), static_cast<int>(r0), w.n0);
      cuda::bulk_commit();
    }
  });
  if (leader) cuda::bulk_wait<0>();  // shared memory stays until the stores have read it
#endif
}

template <typename T, bool kTransB, GeluWriteOut kGelu, bool kRelu, bool kResidual = false>
void launch(const BsrProductArgs<T>& p, cudaStream_t stream) {
  using Tile = ProductTile<kGelu>;
  static std::atomic<uint64_t> configured{0};  // (the largest carveout holds two of its blocks an SM)
  cuda::allow_shared_memory(bsr_wgmma32_kernel<T, kTransB, kGelu, kRelu, kResidual>, Tile::kSmemBytes, configured, kOp);
  const CUtensorMapDataType type = cuda::tensor_map_type_16bit<T>();
  constexpr CUtensorMapSwizzle kSwizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  Maps maps;
  maps.values = cuda::tensor_map_16bit(p.values, kB, p.nblocks * kB, kB, kB, kB, kSwizzle, type, kOp);
  maps.x = cuda::tensor_map_16bit(p.x.data, p.inner, p.n, p.x.col_stride, kB, Tile::kTileN, kSwizzle, type, kOp);
  const int64_t rows = p.out_block_rows * kB;
  maps.y = cuda::tensor_map_16bit(p.y.data, rows, p.n, p.y.col_stride, kB, Tile::kTileN, kSwizzle, type, kOp);
  const auto aux_map = [&](const void* data, int64_t col_stride) {
    return cuda::tensor_map_16bit(data, rows, p.n, col_stride, kB, Tile::kTileN, kSwizzle, type, kOp);
  };
  maps.aux = kResidual                       ? aux_map(p.residual.data, p.residual.col_stride)
             : p.gelu != GeluWriteOut::kNone ? aux_map(p.aux.data, p.aux.col_stride)
                                             : maps.y;  // not read
  const int64_t tiles = p.out_block_rows * ((p.n + Tile::kTileN - 1) / Tile::kTileN);
  const dim3 grid(static_cast<unsigned>(persistent_grid(tiles, p.out_block_rows, Tile::kBlocksPerSm, kOp)));
  cuda::launch_overlapping(bsr_wgmma32_kernel<T, kTransB, kGelu, kRelu, kResidual>, grid, dim3(kThreads),
                           Tile::kSmemBytes, stream, kOp, maps, p, tiles);
}

template <typename T, bool kTransB>
void launch_form(const BsrProductArgs<T>& p, cudaStream_t stream) {
  COPPICE_CHECK(!p.relu || p.gelu == GeluWriteOut::kNone, kOp, ": internal: a relu and a gelu form in one write-out");
  if (p.residual.data != nullptr) {
    COPPICE_CHECK(p.gelu == GeluWriteOut::kNone && !p.relu, kOp, ": internal: a residual beside a relu or gelu form");
    return launch<T, kTransB, GeluWriteOut::kNone, false, true>(p, stream);
  }
  switch (p.gelu) {
    case GeluWriteOut::kNone:
      return p.relu ? launch<T, kTransB, GeluWriteOut::kNone, true>(p, stream)
                    : launch<T, kTransB, GeluWriteOut::kNone, false>(p, stream);
    case GeluWriteOut::kForward: return launch<T, kTransB, GeluWriteOut::kForward, false>(p, stream);
    case GeluWriteOut::kGradient: return launch<T, kTransB, GeluWriteOut::kGradient, false>(p, stream);
    case GeluWriteOut::kForwardTanh: return launch<T, kTransB, GeluWriteOut::kForwardTanh, false>(p, stream);
    case GeluWriteOut::kGradientTanh: return launch<T, kTransB, GeluWriteOut::kGradientTanh, false>(p, stream);
  }
}

// ---- SDDMM ----
//
// values[e] = a[rows of e, :] @ b[:, cols of e] for a linear's weight
// gradient (a = dy^T, contiguous along its rows; b = x, contiguous along its
// columns; the inner dimension the tokens), as bsr_wgmma.cu's SDDMM does for
// 64x64 blocks, whose rows are wgmma's M there. A 32x32 block's rows are N
// here, and M pairs two blocks of a run: A is b's [64 tokens, 32 columns]
// slices of the pair's blocks side by side (MN-major, the second one the
// descriptor's leading offset on), B is a's [64 tokens, 32 rows] slice of
// the block row (MN-major), so one m64n32 product makes both blocks,
// transposed: D's row m is column m % 32 of the pair's block m / 32. A
// thread block takes a run of up to kRun stored blocks of one block row
// (BsrSddmmArgs::group_begin: bsr_mma_sddmm_group's 4, or 8 in rows of 10
// blocks or more) over one range of the tokens, in steps of 64: one thread
// copies a's slice once a step and each block's b slice; warpgroup w
// multiplies pairs w (and w + 2) of the run. Runs of 4 take stages of 20 KB
// and two thread blocks an SM, runs of 8 stages of 36 KB and one. Each thread stores
// its accumulators straight from registers (rounded to the values, or f32
// partial sums of its range, which bsr_sum_splits adds in range order), and
// the row sums (the bias gradient) come from the a slices the consumers wait
// for anyway, as in bsr_wgmma.cu.
constexpr int kSddmmConsumers = 256;                 // two warpgroups multiply
constexpr int kSddmmThreads = kSddmmConsumers + 32;  // and one warp loads
constexpr int kSddmmStep = 64;                       // tokens a stage
constexpr int kSliceBytes = kSddmmStep * kB * 2;     // a [64 tokens, 32] slice: 4 KB

template <int kRun>
struct Sddmm32Tile {
  static_assert(kRun == 4 || kRun == kBsrWgmma32MostRun, "runs of 4 or 8 blocks");
  static constexpr int kPairs = kRun / 4;  // a warpgroup's pairs of blocks
  static constexpr int kBlocksPerSm = bsr_wgmma_sddmm_resident(kB, kRun);
  static constexpr int kStageBytes = (1 + kRun) * kSliceBytes;  // a's slice and each block's
  static constexpr int kStages = kRun == 4 ? 5 : 6;             // 100 KB (two an SM) or 216 KB (one)
  static constexpr int kSmemBytes = cuda::StageRing<kStages, kStageBytes>::kSmemBytes;
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms aligned");
  static_assert(kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024, "an SM's shared memory for kBlocksPerSm blocks");
};

struct SddmmMaps {
  CUtensorMap a;  // a as [k, rows] (a.col_stride apart): boxes of 32 rows x 64 tokens
  CUtensorMap b;  // b as [k, cols] (b.row_stride apart): boxes of 32 columns x 64 tokens
};

template <typename T, int kRun>
__global__ void __launch_bounds__(kSddmmThreads, Sddmm32Tile<kRun>::kBlocksPerSm)
    bsr_wgmma32_sddmm_kernel(const __grid_constant__ SddmmMaps maps, const BsrSddmmArgs<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = Sddmm32Tile<kRun>;
  constexpr int kPairs = Tile::kPairs;
  extern __shared__ unsigned char smem_raw[];
  const auto ring = cuda::stage_ring<Tile::kStages, Tile::kStageBytes>(smem_raw, kSddmmConsumers / 32);
  const int tid = threadIdx.x;
  // Launched to overlap the kernel before it: only the ring's barriers come
  // before this wait, every read and write of global memory after it.
  cuda::wait_for_prerequisite_grids();
  cuda::allow_dependent_launch();  // the next kernel may set up under this one's tail
  const SddmmRun task = sddmm_run(p);
  const int32_t begin = task.begin;
  const int count = task.count;
  const int64_t r0 = static_cast<int64_t>(task.block_row) * kB;
  const bool sums_rows = task.sums_rows;  // block-uniform
  const int64_t k_begin = p.splits > 1 ? blockIdx.y * p.split_k : 0;
  const int64_t k_end = p.splits > 1 ? std::min<int64_t>(p.k, k_begin + p.split_k) : p.k;
  const int steps = static_cast<int>((k_end - k_begin + kSddmmStep - 1) / kSddmmStep);

  if (tid >= kSddmmConsumers) {
    if (tid == kSddmmConsumers) {
      for (int step = 0; step < steps; ++step) {
        const int k0 = static_cast<int>(k_begin + static_cast<int64_t>(step) * kSddmmStep);
        ring.wait_empty(step);
        const uint32_t full = ring.full(step), st = ring.stage(step);
        barrier_expect(full, (1 + count) * kSliceBytes);
        tma_load(st, &maps.a, static_cast<int>(r0), k0, full);
        for (int q = 0; q < count; ++q) tma_load(st + (1 + q) * kSliceBytes, &maps.b, p.bcol[begin + q] * kB, k0, full);
      }
    }
    return;
  }

  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  // This warpgroup's pairs of the run: pair wg + 2i is blocks 2 (wg + 2i) and
  // the one after (the second past the run's end is read and never stored).
  float acc[kPairs][4][4] = {};
  cuda::fence_registers(acc);
  // Row sums: consumer thread tid adds row tid % 32 of a's slices at tokens
  // tid / 32, tid / 32 + kSumLanes, ... (0 past k's end: TMA fills them so);
  // the lanes are added in order at the end.
  constexpr int kSumLanes = kSddmmConsumers / kB;
  const int sum_row = tid % kB;
  float row_sum = 0.f;

  for (int step = 0; step < steps; ++step) {
    const uint32_t st = ring.stage(step);
    ring.wait_full(step);
    if (sums_rows) {
      const unsigned char* slice = ring.smem + (st - ring.base);
#pragma unroll
      for (int j = 0; j < kSddmmStep / kSumLanes; ++j) {
        const int k = tid / kB + j * kSumLanes;  // token k's 64 bytes, their 16-byte chunks swizzled
        row_sum += to_float(*reinterpret_cast<const T*>(slice + cuda::sw64_offset(k, sum_row / 8) + (sum_row % 8) * 2));
      }
      __syncwarp();  // the warp's reads are done before its lane 0 frees the stage
    }
    if (2 * wg < count) {
      cuda::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kSddmmStep / 16; ++ks) {
        const uint64_t b = sw64_desc(st + ks * 1024);  // a's slice, 16 tokens a k16 step
#pragma unroll
        for (int i = 0; i < kPairs; ++i) {
          // This test between one group's products makes ptxas serialize
          // the runs of 8's wgmmas (its C7520 warning). Deciding the pairs
          // before the group instead (a group of one pair or of two) silenced
          // it and took 8 % longer (H200, bench bsr --block 32, 1024 x 4096
          // dW: 0.0976/0.0963 -> 0.1048/0.1049 ms), so the test stays.
          const int pair = wg + 2 * i;
          if (2 * pair < count) {
            const uint64_t a = sw64_desc(st + (1 + 2 * pair) * kSliceBytes + ks * 1024, kSliceBytes);
            cuda::wgmma_64x32_ss<T, true, true>(acc[i], a, b);
          }
        }
      }
      cuda::wgmma_commit();
      cuda::wgmma_wait<1>();
      cuda::fence_registers(acc);
    }
    if (step > 0 && lane == 0) barrier_arrive(ring.empty(step - 1));
  }
  cuda::wgmma_wait<0>();
  cuda::fence_registers(acc);
  if (sums_rows) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kSddmmConsumers) : "memory");  // the ring is drained: reuse it
    float* lanes = reinterpret_cast<float*>(ring.smem);                   // [kSumLanes][32]
    lanes[tid] = row_sum;
    asm volatile("bar.sync 1, %0;\n" ::"n"(kSddmmConsumers) : "memory");
    write_row_sums<T, kB, kSumLanes>(p, lanes, r0);
  }

  // Accumulators j: D's rows g and g + 8 of the warp's 16 (columns of the
  // pair's blocks), its columns 8j + 2t and 8j + 2t + 1 (rows of them).
#pragma unroll
  for (int i = 0; i < kPairs; ++i) {
    const int pair = wg + 2 * i;
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int m = warp * 16 + g + 8 * hi, q = 2 * pair + m / kB, c = m % kB;
      if (q >= count) continue;
      const int64_t e = begin + q;
      T* out = p.values + e * kB * kB;
      float* part = p.splits > 1 ? p.partial + (blockIdx.y * p.nblocks + e) * kB * kB : nullptr;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int r = 8 * j + 2 * t + k;
          const float v = acc[i][j][2 * hi + k];
          if (part != nullptr) {
            part[r * kB + c] = v;
          } else {
            out[r * kB + c] = from_float<T>(v);
          }
        }
      }
    }
  }
#endif
}

template <typename T, int kRun>
void launch_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  using Tile = Sddmm32Tile<kRun>;
  static std::atomic<uint64_t> configured{0};
  cuda::allow_shared_memory(bsr_wgmma32_sddmm_kernel<T, kRun>, Tile::kSmemBytes, configured, kOp);
  const CUtensorMapDataType type = cuda::tensor_map_type_16bit<T>();
  SddmmMaps maps;
  maps.a = cuda::tensor_map_16bit(p.a.data, p.block_rows * kB, p.k, p.a.col_stride, kB, kSddmmStep,
                                  CU_TENSOR_MAP_SWIZZLE_64B, type, kOp);
  maps.b = cuda::tensor_map_16bit(p.b.data, p.b_cols, p.k, p.b.row_stride, kB, kSddmmStep, CU_TENSOR_MAP_SWIZZLE_64B,
                                  type, kOp);
  const int64_t blocks = p.ngroups + (p.row_sums != nullptr ? p.nempty : 0);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.splits > 1 ? p.splits : 1));
  cuda::launch_overlapping(bsr_wgmma32_sddmm_kernel<T, kRun>, grid, dim3(kSddmmThreads), Tile::kSmemBytes, stream, kOp,
                           maps, p);
}

}  // namespace

template <typename T>
void bsr_wgmma32_product(const BsrProductArgs<T>& p, cudaStream_t stream) {
  COPPICE_CHECK(p.bh == kB && p.bw == kB, kOp, ": internal: ", p.bh, "x", p.bw, " blocks in the 32x32 kernel");
  if (p.out_block_rows <= 0 || p.n <= 0) return;
  p.transposed ? launch_form<T, true>(p, stream) : launch_form<T, false>(p, stream);
}

template <typename T>
void bsr_wgmma32_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  COPPICE_CHECK(p.bh == kB && p.bw == kB && p.group <= kBsrWgmma32MostRun, kOp, ": internal: ", p.bh, "x", p.bw,
                " blocks in runs of ", p.group, " in the 32x32 SDDMM");
  if (p.ngroups <= 0 && (p.row_sums == nullptr || p.nempty <= 0)) return;
  p.group <= 4 ? launch_sddmm<T, 4>(p, stream) : launch_sddmm<T, kBsrWgmma32MostRun>(p, stream);
}

template void bsr_wgmma32_product<__nv_bfloat16>(const BsrProductArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_wgmma32_product<__half>(const BsrProductArgs<__half>&, cudaStream_t);
template void bsr_wgmma32_sddmm<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_wgmma32_sddmm<__half>(const BsrSddmmArgs<__half>&, cudaStream_t);

}  // namespace coppice::sparse_cuda
