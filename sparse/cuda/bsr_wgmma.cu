// BSR products on Hopper's warpgroup MMA (bsr_wgmma.h).
//
// y = op(S) @ x as bsr_mma.cu computes it, for the shapes of a linear layer's
// products: x (op(S)'s columns by n) is contiguous along op(S)'s columns,
// that is, it is the token-major activation x or gradient dy. The output is
// cut into tiles of one output block row (B rows of y) by 128 columns
// (tokens); the kernel is persistent: one thread block an SM walks tiles b,
// b + grid, ... (block rows fastest, so the thread blocks at work share x's
// slices in L2), each tile in k steps of 64 over its row's stored blocks,
// with warpgroups of two kinds, as nm24_wgmma.cu's kernel does:
//   - one loads: a single thread issues the TMA copies of each step (the
//     block's 64 columns of op(S), B x 64, and x's [128, 64] slice at the
//     block's column, both in the 128-byte swizzle) into a ring of stages,
//     each guarded by a "full" and an "empty" mbarrier (tensor/cuda/tma.cuh).
//     The ring runs through all of the thread block's tiles, so the next
//     tile's first blocks load while this one is written out. What each
//     tile needs (its block row, range of stored blocks, first blocks) is
//     read 32 tiles at a time by the lanes of a warp (for_each_tile): read
//     tile by tile, that chain of dependent reads was the loader's pace in
//     short block rows;
//   - G multiply (bsr_wgmma_groups: two; at 64x64 three under a forward gelu
//     form, four under a gradient form), m64 x n128 wgmma parts with both
//     operands read from shared memory through descriptors, one step's group
//     kept in flight while the next issues, and write their sums out. For
//     128x128 blocks the two take the two 64-row halves of one tile
//     (cooperative). For 64x64 blocks each takes every G-th tile of the
//     thread block whole (ping-pong, as FlashAttention-3 and CUTLASS's
//     persistent kernels do): while one writes its tile out the others
//     multiply the next (rows of 6.4 blocks: 9 % off the cooperative form's
//     time; a gelu's arithmetic in the write-out needs a third warpgroup to
//     hide it, its gradient's a fourth). The warpgroups take turns at the
//     ring (an order barrier: one starts a tile's products once the one
//     before has read every stage of the tile before), which keeps the
//     stages in the order the loader fills them and each wait on a stage's
//     barrier in the phase it means.
// Why persistent: with one thread block an SM (the ring and 104-224
// registers a consumer thread), a thread block per tile left the SM idle
// while a tile's first blocks loaded and its output was written. The grid
// is coprime with the block rows (persistent_grid), so each thread block
// meets them all.
// op(S) = S reads each block K-major (its rows are y's rows); op(S) = S^T
// (dY @ W, walking S by block columns) reads the stored block MN-major with
// wgmma's transpose of A, so neither direction copies or transposes a block.
//
// The write-out applies bsr_mma.cu's arithmetic (epilogue.cuh) to each
// accumulator in registers: the bias, relu or a gelu form, rounded once.
// stmatrix then moves a warpgroup's 64 rows by 128 tokens of y, transposed to
// y's token-major order, into a staging tile in the 128-byte swizzle, and one
// thread writes it to y with a TMA store, which runs on while the warpgroup
// goes on to its next tile (a gelu form's z goes out, or for its gradient
// comes in by TMA load during the products, through a second staging tile;
// so does linear_add's residual r, added to each value after its rounding:
// add(r, y)'s bits).
// Tokens past n arrive as zeros (TMA fills outside the tensor) and are not
// stored (TMA clips its store there); an empty block row writes the bias (or
// zeros). No atomics: each output is one thread's sum in a fixed order, the
// same bits on every run (not mma.sync's bits: the order of the f32
// additions differs).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "sparse/cuda/bsr_wgmma.h"
#include "sparse/cuda/bsr_wgmma32.h"
#include "sparse/cuda/bsr_wgmma_walk.cuh"
#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/sddmm_run.cuh"
#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/tma.cuh"
#include "tensor/cuda/wgmma.cuh"
#include "tensor/error.h"

namespace coppice::sparse_cuda {
namespace {

using cuda::barrier_arrive;
using cuda::barrier_expect;
using cuda::sw128_desc;
using cuda::tma_load;
using cuda::tma_store;
using cuda::wgmma_commit;
using cuda::wgmma_fence;
using cuda::wgmma_wait;

constexpr std::string_view kOp = "bsr wgmma product";
constexpr int kStep = 64;                             // k per stage: one 128-byte swizzle row of 16-bit values
constexpr int kSddmmConsumers = 256;                  // the SDDMM's: two warpgroups multiply
constexpr int kSddmmThreads = kSddmmConsumers + 128;  // and one loads
using SddmmRegisters = cuda::RegisterSplit<kSddmmThreads, 40, 232>;

// The shape for blocks of B: the stages of the ring, then (1024-byte
// aligned, for the swizzle) each warpgroup's staging tiles and the barrier
// of its z loads; together at most the 227 KB of shared memory a thread
// block may have. Two staging tiles a warpgroup (y's, and z's under a gelu
// form), or with four warpgroups (the gradient forms) one: z arrives in it
// and y replaces z in place.
template <int B, int G>
struct WgmmaTile {
  static constexpr bool kPingPong = B == 64;
  static_assert(G == 2 || (kPingPong && (G == 3 || G == 4)), "128x128 blocks: two warpgroups share a tile");
  static constexpr int kConsumers = 128 * G;         // G warpgroups multiply
  static constexpr int kThreads = kConsumers + 128;  // and one loads
  // Registers a thread: the loader's 56, the consumers' as many as the
  // launch leaves them, in steps of 8.
  using Registers = cuda::RegisterSplit<kThreads, 56, G == 2 ? 224 : G == 3 ? 152 : 104>;
  static constexpr int kTileN = 128;                     // tokens a tile
  static constexpr int kStageWarps = kPingPong ? 4 : 8;  // arrivals that free a stage: the warps that read it
  static constexpr int kABytes = B * kStep * 2;          // the block's 64 columns (or rows, transposed)
  static constexpr int kXBytes = kTileN * kStep * 2;
  static constexpr int kStageBytes = kABytes + kXBytes;
  static constexpr int kStages = B == 128 ? 4 : G == 3 ? 5 : 6;  // 128 KB; 120 KB with three warpgroups, else 144
  static constexpr int kStaging = G == 4 ? 1 : 2;                // staging tiles a warpgroup
  static constexpr int kOutBytes = kTileN * 64 * 2;  // a warpgroup's 64 rows of y (or z) by the tile's tokens
  static constexpr int kOutOffset = (kStages * kStageBytes + 16 * kStages + 1023) / 1024 * 1024;  // from its start
  static constexpr int kZBarOffset = kOutOffset + kStaging * G * kOutBytes;  // [warpgroup][kStaging] staging tiles
  static constexpr int kSmemBytes = 1024 + kZBarOffset + 8 * G;
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms aligned");
  static_assert(kSmemBytes <= 227 * 1024, "a thread block's shared memory");
};

struct Maps {
  CUtensorMap values;  // S's blocks as [nblocks * B, B]: boxes of 64 x B (K-major) or 64 x 64 (transposed)
  CUtensorMap x;       // x as [n, inner]: boxes of 64 x kTileN
  CUtensorMap y;       // y as [n, rows]: boxes of 64 rows x kTileN tokens, stored from the staging tiles
  CUtensorMap aux;     // z, as y (a gelu form only): stored (forward) or loaded (gradient); or the residual, loaded
};

// The write-out's form is the kernel's (kGelu, kRelu: p.gelu and p.relu,
// which the launcher matches): a runtime branch on them inside the unrolled
// write-out left the relu's compare and two selects in every value's path
// (3 of the plain product's 11 instructions a value) and every form's code
// in each kernel (under the gradient form 19 % of the warps' stall samples
// waited on instruction fetch). kResidual: p.residual added after the
// rounding (the plain form only), loaded as the gradient form loads z.
template <typename T, int B, int G, bool kATrans, GeluWriteOut kGelu, bool kRelu, bool kResidual>
__global__ void __launch_bounds__(WgmmaTile<B, G>::kThreads, 1)
    bsr_wgmma_kernel(const __grid_constant__ Maps maps, const BsrProductArgs<T> p, int64_t tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = WgmmaTile<B, G>;
  constexpr int kConsumers = Tile::kConsumers;
  constexpr int kStages = Tile::kStages, kStageBytes = Tile::kStageBytes, kTileN = Tile::kTileN;
  constexpr int kChunks = B / kStep;  // k steps a block
  extern __shared__ unsigned char smem_raw[];
  const auto ring = cuda::stage_ring<kStages, kStageBytes>(smem_raw, Tile::kStageWarps);
  const int tid = threadIdx.x;
  const uint32_t zbar0 = ring.base + Tile::kZBarOffset;  // warpgroup w's: zbar0 + 8 w
  if (tid == 0) {
    for (int w = 0; w < G; ++w) cuda::barrier_init(zbar0 + 8 * w, 1);
    cuda::barrier_init_fence();
  }
  __syncthreads();
  // Launched to overlap the kernel before it (launch): only the
  // barriers above come before this wait; every read and write of global
  // memory (the walk's pattern, x, the blocks, y) comes after it.
  cuda::wait_for_prerequisite_grids();
  cuda::allow_dependent_launch();  // the next kernel may set up under this one's tail

  if (tid >= kConsumers) {
    // The loading warpgroup: one thread issues every copy, running ahead of
    // the consumers by up to the ring's stages, across tiles; the rest of its
    // warp helps read the tiles' work.
    // 56 registers: the tiles' work read 32 at a time takes more than 40 (ptxas
    // spilled); the consumers take what it gives back (Tile::Registers).
    Tile::Registers::loader();
    if (tid / 32 == kConsumers / 32) {
      int step = 0;  // the ring's running count
      for_each_tile<true>(p, tiles, kTileN, [&](int64_t, const TileWork& w) {
        if (tid != kConsumers) return;
        for (int32_t e = w.begin; e < w.end; ++e) {
          const int32_t k = e - w.begin;
          // (Selects, not w.blk[k]: an index the compiler cannot see puts w in local memory.)
          const int64_t blk = k == 0 ? w.blk[0] : k == 1 ? w.blk[1] : p.bid != nullptr ? p.bid[e] : e;
          const int32_t kblk = k == 0 ? w.kblk[0] : k == 1 ? w.kblk[1] : p.kblk[e];
#pragma unroll
          for (int chunk = 0; chunk < kChunks; ++chunk, ++step) {
            ring.wait_empty(step);
            const uint32_t full = ring.full(step), st = ring.stage(step);
            barrier_expect(full, kStageBytes);
            if constexpr (kATrans) {  // rows chunk*64.. of the block, each 64-wide half of its columns a tile
#pragma unroll
              for (int h = 0; h < B / 64; ++h)
                tma_load(st + h * 64 * 128, &maps.values, h * 64, static_cast<int>(blk * B + chunk * kStep), full);
            } else {  // columns chunk*64.. of the block's B rows
              tma_load(st, &maps.values, chunk * kStep, static_cast<int>(blk * B), full);
            }
            tma_load(st + Tile::kABytes, &maps.x, kblk * B + chunk * kStep, w.n0, full);
          }
        }
      });
    }
    return;
  }
  Tile::Registers::consumer();

  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4;
  const bool leader = tid % 128 == 0;  // issues the warpgroup's TMA stores and z loads
  // Cooperative: this warpgroup's rows of the block row. Ping-pong: the whole
  // tile, every G-th one of the thread block's. Either way a warpgroup
  // writes its 64 rows out alone (named barrier 1 + wg); ping-pong turns at
  // the ring go round through barriers 1 + G + wg (warpgroup wg's turn,
  // after warpgroup wg - 1's products).
  const int row0 = Tile::kPingPong ? 0 : 64 * wg;
  const int out_bar = 1 + wg;
  const int my_turn_bar = 1 + G + wg, next_turn_bar = 1 + G + (wg + 1) % G;
  constexpr bool gradient = is_gelu_gradient(kGelu), forward = is_gelu_forward(kGelu);
  static_assert(Tile::kStaging == 2 || !forward, "a forward form stores y and z: two staging tiles");
  static_assert(!kResidual || (kGelu == GeluWriteOut::kNone && !kRelu && Tile::kStaging == 2),
                "the residual comes into the second staging tile of the plain form");
  constexpr bool loads_aux = gradient || kResidual;  // z, or the residual, arrives by TMA under the products
  unsigned char* y_stage = ring.smem + Tile::kOutOffset + Tile::kStaging * wg * Tile::kOutBytes;
  unsigned char* z_stage = y_stage + (Tile::kStaging - 1) * Tile::kOutBytes;  // in place with one
  const uint32_t zbar = zbar0 + 8 * wg;
  // stmatrix's rows: lane l gives token 8 (j + q / 2) + l % 8's 16 bytes at
  // this warp's rows 16 warp + 8 (q % 2) of the tile, q = l / 8 (the four
  // matrices of accumulators j and j + 1: rows g and g + 8 of the warp's 16).
  const int q = lane / 8;
  int zphase = 0;
  int step = 0;
  const int64_t turns = (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x;  // the thread block's tiles
  for_each_tile<false>(p, tiles, kTileN, [&](int64_t turn, const TileWork& w) {
    const int steps = (w.end - w.begin) * kChunks;
    if (Tile::kPingPong && turn % G != wg) {  // another warpgroup's tile: its stages are not ours
      step += steps;
      return;
    }
    const int64_t r0 = int64_t{w.obr} * B + row0;  // y's first row this warpgroup writes
    // Accumulators 4j and 4j + 1 are row g of the warp's 16 (y's row r) and
    // tokens 8j + 2t, 8j + 2t + 1; 4j + 2 and 4j + 3 the same tokens of row r
    // + 8. Their biases are read before the products, off the write-out's path.
    const int64_t r = r0 + warp * 16 + g;
    const bool has_bias = p.bias != nullptr;
    const float bias_lo = has_bias ? to_float(p.bias[r]) : 0.f, bias_hi = has_bias ? to_float(p.bias[r + 8]) : 0.f;
    // The gradient's z (or the residual) comes in under the products (this
    // warpgroup's last write-out has read the staging tile: it met at barrier
    // 1 + wg since; with y in place, its store has read it too).
    if (loads_aux && leader) {
      if (Tile::kStaging == 1) cuda::bulk_wait_read<0>();
      barrier_expect(zbar, Tile::kOutBytes);
      tma_load(cuda::smem_u32(z_stage), &maps.aux, static_cast<int>(r0), w.n0, zbar);
    }
    float acc[16][4];
#pragma unroll
    for (auto& a : acc)
#pragma unroll
      for (float& v : a) v = 0.0f;
    cuda::fence_registers(acc);

    // Ping-pong: the warpgroup before has waited for every stage of the tile
    // before this one (so each stage of this tile is in the phase this
    // warpgroup waits for) before this one starts.
    if (Tile::kPingPong && turn > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(my_turn_bar) : "memory");
    for (int s = 0; s < steps; ++s, ++step) {
      const uint32_t st = ring.stage(step);
      ring.wait_full(step);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kStep / 16; ++ks) {
        // K-major A: 32 bytes along the row a k16 step; MN-major A (the block
        // read transposed): 16 rows of k, 2048 bytes, in this half's tile.
        const uint64_t a =
            kATrans ? sw128_desc(st + (row0 / 64) * 64 * 128 + ks * 2048) : sw128_desc(st + row0 * 128 + ks * 32);
        const uint64_t b = sw128_desc(st + Tile::kABytes + ks * 32);
        cuda::wgmma_64x128_ss<T, kATrans>(acc, a, b);
      }
      wgmma_commit();
      // The previous step's group is done: its stage goes back to the loader.
      wgmma_wait<1>();
      cuda::fence_registers(acc);
      if (s > 0 && lane == 0) barrier_arrive(ring.empty(step - 1));
    }
    // The next warpgroup's turn, when the thread block has another tile.
    if (Tile::kPingPong && turn + 1 < turns) asm volatile("bar.arrive %0, 256;\n" ::"r"(next_turn_bar) : "memory");
    wgmma_wait<0>();
    cuda::fence_registers(acc);
    if (steps > 0 && lane == 0) barrier_arrive(ring.empty(step - 1));  // the tile's last stage

    // The staging tiles are free once this warpgroup's last store has read them.
    if (leader) cuda::bulk_wait_read<0>();
    asm volatile("bar.sync %0, 128;\n" ::"r"(out_bar) : "memory");
    if constexpr (loads_aux) {
      cuda::barrier_wait(zbar, zphase);
      zphase ^= 1;
    }
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
      const int offset = cuda::sw128_offset(8 * (j + q / 2) + lane % 8, 2 * warp + q % 2);
      uint32_t zs[4];  // z's pairs (the gelu forms), or the residual's
      if constexpr (loads_aux) cuda::ldmatrix_x4<true>(zs, z_stage + offset);
      // The eight values of the four matrices (v[m][k]: matrix m, accumulator
      // j + m / 2's 2 (m % 2) + k), each pair through its gelu form as it is
      // formed.
      float v[4][2];
      uint32_t ys[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          float& x = v[m][k];
          x = acc[j + m / 2][2 * (m % 2) + k];
          if (has_bias) x += m % 2 ? bias_hi : bias_lo;
          if constexpr (kRelu) x = relu(x);
        }
        ys[m] = gelu_pair<T, kGelu>(v[m], zs[m]);
        if constexpr (kResidual) ys[m] = add_residual_pair<T>(ys[m], zs[m]);
      }
      cuda::stmatrix_x4<true>(y_stage + offset, ys);
      if constexpr (forward) cuda::stmatrix_x4<true>(z_stage + offset, zs);
    }
    cuda::fence_proxy_async();  // the staging tiles' writes, before the TMA store reads them
    asm volatile("bar.sync %0, 128;\n" ::"r"(out_bar) : "memory");
    if (leader) {
      tma_store(&maps.y, cuda::smem_u32(y_stage), static_cast<int>(r0), w.n0);
      if constexpr (forward) tma_store(&maps.aux, cuda::smem_u32(z_stage), static_cast<int>(r0), w.n0);
      cuda::bulk_commit();
    }
  });
  if (leader) cuda::bulk_wait<0>();  // shared memory stays until the stores have read it
#endif
}

// ---- SDDMM ----
//
// values[e] = a[rows of e, :] @ b[:, cols of e] for a linear's weight
// gradient: a = dy^T (contiguous along its rows: the output features), b = x
// (contiguous along its columns: the input features), the inner dimension
// the tokens. A thread block takes a run of the stored blocks of one block
// row (BsrSddmmArgs::group_begin: two 64x64 blocks, or one 128x128) over one
// range of the tokens (BsrSddmmArgs::splits), in steps of 64 tokens: the
// loader copies a's [64 tokens, B rows] slice once for the run and b's
// [64 tokens, 64 columns] slices of each block, all MN-major (tokens down
// the tile's rows), which wgmma reads with both operands transposed. The
// consumers: for 64x64 blocks warpgroup w multiplies block w of the run (an
// m64n64 product a step); for 128x128 blocks warpgroup w takes rows 64w..
// of the block and both 64-column halves. Each thread stores its
// accumulators straight from registers: rounded to the values, or as f32
// partial sums of its range, which bsr_sum_splits adds in range order.
// Asked for a's row sums (BsrSddmmArgs::row_sums: the bias gradient), the
// first run of each block row also adds up the a slices the consumers wait
// for anyway, every consumer thread one row's tokens at a stride, read
// through the 128-byte swizzle; rows without a stored block get a thread
// block each that loads and sums a alone.
template <int B>
struct SddmmWgmmaTile {
  static constexpr int kGroup = B == 128 ? 1 : 2;         // stored blocks a thread block
  static constexpr int kSliceBytes = 64 * kStep * 2;      // one 64 x 64 tile
  static constexpr int kABytes = (B / 64) * kSliceBytes;  // a's rows of the block row
  static constexpr int kBBytes = (B / 64) * kSliceBytes;  // each block's columns of b
  static constexpr int kStageBytes = kABytes + kGroup * kBBytes;
  static constexpr int kStages = B == 128 ? 6 : 8;  // 192 KB: one thread block an SM
  static constexpr int kSmemBytes = cuda::StageRing<kStages, kStageBytes>::kSmemBytes;
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms aligned");
};

struct SddmmMaps {
  CUtensorMap a;  // a as [k, rows] (a.col_stride apart): boxes of 64 x 64
  CUtensorMap b;  // b as [k, cols] (b.row_stride apart): boxes of 64 x 64
};

template <typename T, int B>
__global__ void __launch_bounds__(kSddmmThreads, 1)
    bsr_wgmma_sddmm_kernel(const __grid_constant__ SddmmMaps maps, const BsrSddmmArgs<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = SddmmWgmmaTile<B>;
  constexpr int kStages = Tile::kStages, kStageBytes = Tile::kStageBytes;
  extern __shared__ unsigned char smem_raw[];
  const auto ring = cuda::stage_ring<kStages, kStageBytes>(smem_raw, kSddmmConsumers / 32);
  const int tid = threadIdx.x;
  // Launched to overlap the kernel before it: only the ring's barriers come
  // before this wait, every read and write of global memory after it.
  cuda::wait_for_prerequisite_grids();
  cuda::allow_dependent_launch();  // the next kernel may set up under this one's tail
  const SddmmRun task = sddmm_run(p);
  const int32_t begin = task.begin;
  const int count = task.count;
  const int64_t r0 = static_cast<int64_t>(task.block_row) * B;
  const bool sums_rows = task.sums_rows;  // block-uniform
  const int64_t k_begin = p.splits > 1 ? blockIdx.y * p.split_k : 0;
  const int64_t k_end = p.splits > 1 ? std::min<int64_t>(p.k, k_begin + p.split_k) : p.k;
  const int steps = static_cast<int>((k_end - k_begin + kStep - 1) / kStep);

  if (tid >= kSddmmConsumers) {
    SddmmRegisters::loader();
    if (tid == kSddmmConsumers) {
      for (int step = 0; step < steps; ++step) {
        const int k0 = static_cast<int>(k_begin + static_cast<int64_t>(step) * kStep);
        ring.wait_empty(step);
        const uint32_t full = ring.full(step), st = ring.stage(step);
        barrier_expect(full, Tile::kABytes + count * Tile::kBBytes);
#pragma unroll
        for (int h = 0; h < B / 64; ++h)
          tma_load(st + h * Tile::kSliceBytes, &maps.a, static_cast<int>(r0) + 64 * h, k0, full);
        for (int q = 0; q < count; ++q) {
          const int c0 = p.bcol[begin + q] * B;
#pragma unroll
          for (int h = 0; h < B / 64; ++h)
            tma_load(st + Tile::kABytes + q * Tile::kBBytes + h * Tile::kSliceBytes, &maps.b, c0 + 64 * h, k0, full);
        }
      }
    }
    return;
  }
  SddmmRegisters::consumer();

  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  // This warpgroup's block of the run and its rows of it; a warpgroup past
  // the run's end only keeps the barriers' counts.
  const int q = B == 128 ? 0 : wg, row0 = B == 128 ? 64 * wg : 0;
  const bool active = q < count;
  float acc[B / 64][8][4];
#pragma unroll
  for (auto& half : acc)
#pragma unroll
    for (auto& a : half)
#pragma unroll
      for (float& v : a) v = 0.0f;
#pragma unroll
  for (auto& half : acc) cuda::fence_registers(half);
  // Row sums: consumer thread tid adds row tid % B of a's slices at tokens
  // tid / B, tid / B + kSumLanes, ... (0 past k's end: TMA fills them so; a
  // split's range is whole steps); the lanes are added in order at the end.
  constexpr int kSumLanes = kSddmmConsumers / B;
  const int sum_row = tid % B, sum_chunk = (sum_row % 64) / 8;
  float row_sum = 0.f;

  for (int step = 0; step < steps; ++step) {
    const uint32_t st = ring.stage(step);
    ring.wait_full(step);
    if (sums_rows) {
      const unsigned char* slice = ring.smem + (st - ring.base) + (sum_row / 64) * Tile::kSliceBytes;
#pragma unroll
      for (int j = 0; j < kStep / kSumLanes; ++j) {
        const int k = tid / B + j * kSumLanes;  // token k's 128 bytes, their 16-byte chunks swizzled by k % 8
        row_sum +=
            to_float(*reinterpret_cast<const T*>(slice + k * 128 + ((sum_chunk ^ (k % 8)) * 16) + (sum_row % 8) * 2));
      }
      __syncwarp();  // the warp's reads are done before its lane 0 frees the stage
    }
    if (active) {
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kStep / 16; ++ks) {
        const uint64_t a = sw128_desc(st + (row0 / 64) * Tile::kSliceBytes + ks * 2048);
#pragma unroll
        for (int h = 0; h < B / 64; ++h) {
          const uint64_t b = sw128_desc(st + Tile::kABytes + q * Tile::kBBytes + h * Tile::kSliceBytes + ks * 2048);
          cuda::wgmma_64x64_ss<T, true, true, true>(acc[h], a, b);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
#pragma unroll
      for (auto& half : acc) cuda::fence_registers(half);
    }
    if (step > 0 && lane == 0) barrier_arrive(ring.empty(step - 1));
  }
  wgmma_wait<0>();
#pragma unroll
  for (auto& half : acc) cuda::fence_registers(half);
  if (sums_rows) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kSddmmConsumers) : "memory");  // the ring is drained: reuse it
    float* lanes = reinterpret_cast<float*>(ring.smem);                   // [kSumLanes][B]
    lanes[tid] = row_sum;
    asm volatile("bar.sync 1, %0;\n" ::"n"(kSddmmConsumers) : "memory");
    write_row_sums<T, B, kSumLanes>(p, lanes, r0);
  }
  if (!active) return;

  // Accumulators 4j, 4j + 1: row g of the warp's 16, columns 8j + 2t and
  // 8j + 2t + 1 of the half; 4j + 2, 4j + 3: row g + 8.
  const int64_t e = begin + q;
  T* out = p.values + e * B * B;
  float* part = p.splits > 1 ? p.partial + (blockIdx.y * p.nblocks + e) * B * B : nullptr;
#pragma unroll
  for (int h = 0; h < B / 64; ++h) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int r = row0 + warp * 16 + g + 8 * hi, c = 64 * h + 8 * j + 2 * t;
        const float lo_v = acc[h][j][2 * hi], hi_v = acc[h][j][2 * hi + 1];
        if (part != nullptr) {
          *reinterpret_cast<float2*>(part + r * B + c) = make_float2(lo_v, hi_v);
        } else {
          T v2[2] = {from_float<T>(lo_v), from_float<T>(hi_v)};
          uint32_t packed;
          memcpy(&packed, v2, sizeof(packed));
          *reinterpret_cast<uint32_t*>(out + r * B + c) = packed;
        }
      }
    }
  }
#endif
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <typename T, int B>
void launch_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  using Tile = SddmmWgmmaTile<B>;
  static const bool configured = [] {
    COPPICE_CUDA_CHECK(cudaFuncSetAttribute(bsr_wgmma_sddmm_kernel<T, B>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tile::kSmemBytes),
                       kOp);
    return true;
  }();
  (void)configured;
  const CUtensorMapDataType type = cuda::tensor_map_type_16bit<T>();
  SddmmMaps maps;
  const int64_t rows = p.block_rows * B;
  maps.a =
      cuda::tensor_map_16bit(p.a.data, rows, p.k, p.a.col_stride, 64, kStep, CU_TENSOR_MAP_SWIZZLE_128B, type, kOp);
  maps.b =
      cuda::tensor_map_16bit(p.b.data, p.b_cols, p.k, p.b.row_stride, 64, kStep, CU_TENSOR_MAP_SWIZZLE_128B, type, kOp);
  const int64_t blocks = p.ngroups + (p.row_sums != nullptr ? p.nempty : 0);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.splits > 1 ? p.splits : 1));
  cuda::launch_overlapping(bsr_wgmma_sddmm_kernel<T, B>, grid, dim3(kSddmmThreads), Tile::kSmemBytes, stream, kOp, maps,
                           p);
}

template <typename T, int B, int G, bool kATrans, GeluWriteOut kGelu, bool kRelu, bool kResidual = false>
void launch(const BsrProductArgs<T>& p, cudaStream_t stream) {
  using Tile = WgmmaTile<B, G>;
  static const bool configured = [] {
    COPPICE_CUDA_CHECK(cudaFuncSetAttribute(bsr_wgmma_kernel<T, B, G, kATrans, kGelu, kRelu, kResidual>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes),
                       kOp);
    return true;
  }();
  (void)configured;
  const CUtensorMapDataType type = cuda::tensor_map_type_16bit<T>();
  Maps maps;
  maps.values = cuda::tensor_map_16bit(p.values, B, p.nblocks * B, B, kStep, kATrans ? 64 : B,
                                       CU_TENSOR_MAP_SWIZZLE_128B, type, kOp);
  maps.x = cuda::tensor_map_16bit(p.x.data, p.inner, p.n, p.x.col_stride, kStep, Tile::kTileN,
                                  CU_TENSOR_MAP_SWIZZLE_128B, type, kOp);
  const int64_t rows = p.out_block_rows * B;
  maps.y = cuda::tensor_map_16bit(p.y.data, rows, p.n, p.y.col_stride, 64, Tile::kTileN, CU_TENSOR_MAP_SWIZZLE_128B,
                                  type, kOp);
  const auto aux_map = [&](const void* data, int64_t col_stride) {
    return cuda::tensor_map_16bit(data, rows, p.n, col_stride, 64, Tile::kTileN, CU_TENSOR_MAP_SWIZZLE_128B, type, kOp);
  };
  maps.aux = kResidual                       ? aux_map(p.residual.data, p.residual.col_stride)
             : p.gelu != GeluWriteOut::kNone ? aux_map(p.aux.data, p.aux.col_stride)
                                             : maps.y;  // not read
  const int64_t tiles = p.out_block_rows * ((p.n + Tile::kTileN - 1) / Tile::kTileN);
  const dim3 grid(static_cast<unsigned>(persistent_grid(tiles, p.out_block_rows, 1, kOp)));
  cuda::launch_overlapping(bsr_wgmma_kernel<T, B, G, kATrans, kGelu, kRelu, kResidual>, grid, dim3(Tile::kThreads),
                           Tile::kSmemBytes, stream, kOp, maps, p, tiles);
}

// The kernel of p's write-out form (p.gelu, p.relu) with G warpgroups: only
// the forms bsr_wgmma_groups gives G are built with it (both forward forms
// take the same count, and both gradient forms).
template <typename T, int B, int G, bool kATrans>
void launch_form(const BsrProductArgs<T>& p, cudaStream_t stream) {
  constexpr bool kBuildsPlain = bsr_wgmma_groups(B, GeluWriteOut::kNone) == G;
  constexpr bool kBuildsForward = bsr_wgmma_groups(B, GeluWriteOut::kForward) == G;
  constexpr bool kBuildsGradient = bsr_wgmma_groups(B, GeluWriteOut::kGradient) == G;
  static_assert(bsr_wgmma_groups(B, GeluWriteOut::kForwardTanh) == bsr_wgmma_groups(B, GeluWriteOut::kForward) &&
                    bsr_wgmma_groups(B, GeluWriteOut::kGradientTanh) == bsr_wgmma_groups(B, GeluWriteOut::kGradient),
                "each gelu form's two variants take one count");
  COPPICE_CHECK(!p.relu || p.gelu == GeluWriteOut::kNone, kOp, ": internal: a relu and a gelu form in one write-out");
  COPPICE_CHECK(p.residual.data == nullptr || (p.gelu == GeluWriteOut::kNone && !p.relu), kOp,
                ": internal: a residual beside a relu or gelu form");
  if constexpr (kBuildsPlain) {
    if (p.residual.data != nullptr) return launch<T, B, G, kATrans, GeluWriteOut::kNone, false, true>(p, stream);
    if (p.gelu == GeluWriteOut::kNone) {
      return p.relu ? launch<T, B, G, kATrans, GeluWriteOut::kNone, true>(p, stream)
                    : launch<T, B, G, kATrans, GeluWriteOut::kNone, false>(p, stream);
    }
  }
  if constexpr (kBuildsForward) {
    if (p.gelu == GeluWriteOut::kForward) return launch<T, B, G, kATrans, GeluWriteOut::kForward, false>(p, stream);
    if (p.gelu == GeluWriteOut::kForwardTanh) {
      return launch<T, B, G, kATrans, GeluWriteOut::kForwardTanh, false>(p, stream);
    }
  }
  if constexpr (kBuildsGradient) {
    if (p.gelu == GeluWriteOut::kGradient) return launch<T, B, G, kATrans, GeluWriteOut::kGradient, false>(p, stream);
    if (p.gelu == GeluWriteOut::kGradientTanh) {
      return launch<T, B, G, kATrans, GeluWriteOut::kGradientTanh, false>(p, stream);
    }
  }
  COPPICE_CHECK(false, kOp, ": internal: no kernel for ", B, "x", B, " blocks on ", G,
                " warpgroups under this write-out");
}

}  // namespace

template <typename T>
bool bsr_wgmma_runs(const BsrProductArgs<T>& p) {
  if (!bsr_wgmma_takes(p.bh, p.bw) || p.inner <= 0 || p.nblocks <= 0) return false;
  // TMA: 16-byte aligned bases and row pitches, coordinates in int32.
  if (!aligned16(p.values) || !aligned16(p.x.data) || p.x.row_stride != 1 || p.x.col_stride % 8 != 0 ||
      p.x.col_stride < p.inner)
    return false;
  if (p.nblocks * p.bh >= (int64_t{1} << 31) || p.inner >= (int64_t{1} << 31) || p.n >= (int64_t{1} << 31) ||
      p.out_block_rows * p.bh >= (int64_t{1} << 31))
    return false;
  // y (and z under a gelu form) token-major as TMA stores them: contiguous
  // along the rows, 16-byte aligned, the token pitch a multiple of 8.
  const auto stores = [&](const auto& m) {
    return aligned16(m.data) && m.row_stride == 1 && m.col_stride % 8 == 0 && m.col_stride >= p.out_block_rows * p.bh;
  };
  if (!stores(p.y) || (p.gelu != GeluWriteOut::kNone && !stores(p.aux))) return false;
  // The residual is loaded by TMA in the same boxes as y is stored.
  if (p.residual.data != nullptr && !stores(p.residual)) return false;
  return cuda::runs_sm90a(cuda::current_device(kOp), kOp);
}

template <typename T>
void bsr_wgmma_product(const BsrProductArgs<T>& p, cudaStream_t stream) {
  if (p.out_block_rows <= 0 || p.n <= 0) return;
  if (p.bh == 32) {
    bsr_wgmma32_product<T>(p, stream);
  } else if (p.bh == 128) {
    p.transposed ? launch_form<T, 128, 2, true>(p, stream) : launch_form<T, 128, 2, false>(p, stream);
  } else if (bsr_wgmma_groups(64, p.gelu) == 4) {
    p.transposed ? launch_form<T, 64, 4, true>(p, stream) : launch_form<T, 64, 4, false>(p, stream);
  } else if (bsr_wgmma_groups(64, p.gelu) == 3) {
    p.transposed ? launch_form<T, 64, 3, true>(p, stream) : launch_form<T, 64, 3, false>(p, stream);
  } else {
    p.transposed ? launch_form<T, 64, 2, true>(p, stream) : launch_form<T, 64, 2, false>(p, stream);
  }
}

template <typename T>
bool bsr_wgmma_sddmm_runs(const BsrSddmmArgs<T>& p) {
  if (!bsr_wgmma_takes(p.bh, p.bw) || p.b_cols <= 0) return false;
  if (p.group > (p.bh == 32 ? kBsrWgmma32MostRun : SddmmWgmmaTile<64>::kGroup) || (p.bh == 128 && p.group > 1))
    return false;
  // a contiguous along its rows, b along its columns; TMA: 16-byte aligned
  // bases and pitches, coordinates in int32.
  if (!aligned16(p.a.data) || !aligned16(p.b.data) || p.a.row_stride != 1 || p.b.col_stride != 1 ||
      p.a.col_stride % 8 != 0 || p.b.row_stride % 8 != 0 || p.a.col_stride < p.block_rows * p.bh ||
      p.b.row_stride < p.b_cols)
    return false;
  if (p.k >= (int64_t{1} << 31) || p.block_rows * p.bh >= (int64_t{1} << 31) || p.b_cols >= (int64_t{1} << 31))
    return false;
  if (p.splits > 1 && p.split_k % kStep != 0) return false;
  return cuda::runs_sm90a(cuda::current_device(kOp), kOp);
}

template <typename T>
void bsr_wgmma_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream) {
  if (p.ngroups <= 0 && (p.row_sums == nullptr || p.nempty <= 0)) return;
  if (p.bh == 32) {
    bsr_wgmma32_sddmm<T>(p, stream);
  } else {
    p.bh == 128 ? launch_sddmm<T, 128>(p, stream) : launch_sddmm<T, 64>(p, stream);
  }
}

template bool bsr_wgmma_runs<__nv_bfloat16>(const BsrProductArgs<__nv_bfloat16>&);
template bool bsr_wgmma_runs<__half>(const BsrProductArgs<__half>&);
template void bsr_wgmma_product<__nv_bfloat16>(const BsrProductArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_wgmma_product<__half>(const BsrProductArgs<__half>&, cudaStream_t);
template bool bsr_wgmma_sddmm_runs<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&);
template bool bsr_wgmma_sddmm_runs<__half>(const BsrSddmmArgs<__half>&);
template void bsr_wgmma_sddmm<__nv_bfloat16>(const BsrSddmmArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_wgmma_sddmm<__half>(const BsrSddmmArgs<__half>&, cudaStream_t);

}  // namespace coppice::sparse_cuda
