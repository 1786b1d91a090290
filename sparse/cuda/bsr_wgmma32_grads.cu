// A sparse linear's dx, dW and db in one pass (bsr_wgmma32_grads.h), for
// 32x32 blocks on Hopper's wgmma.
//
// Why one pass. Apart, dx = dy W (bsr_wgmma32.cu's product walking W by
// block columns) reads, for every stored block, dy's [tokens, 32] slice at
// the block's row; the SDDMM reads the same slice again for the block's dW,
// and x's slice at the block's column once per stored block. Both kernels
// are bound by what the L2 hands the SMs. Here a thread block takes one
// block column c and one range of the tokens: x's slice at c is read once a
// step for every block of the column, and each block's dy slice once for
// both its share of dx[:, c] and its own dW.
//
// A thread block: two warpgroups multiply, two warps load. The column's
// blocks go in pairs (blocks 2i and 2i + 1); warpgroup 1 takes pairs 0, 2,
// 4, ... and warpgroup 0 pairs 1, 3, 5, ..., each holding its pairs' dW
// accumulators (m64n32: the pair's two dy slices side by side on M,
// MN-major, x's slice on N, MN-major; D's row m is row m % 32 of the pair's
// block m / 32, untransposed) in registers for the whole range. Each step
// (128 tokens) a warpgroup also adds its pairs' dy W to its own dx
// accumulators (the tokens on M, two m64 halves, K-major dy; the resident
// block on N, read transposed as in the product). Warpgroup 1 then hands
// its dx part to warpgroup 0 through shared memory (f32, two buffers, named
// barriers) and goes on to the next step, while warpgroup 0 adds it to its
// own, applies the gelu gradient form where asked (z's slice arrives beside
// x's), rounds once and stores dx's [128, 32] tile by TMA: the warpgroup
// that writes out takes the fewer pairs, none in a column of one or two
// blocks.
//
// Rings. Each warpgroup has its own ring of pair stages (the pair's two dy
// slices, 16 KB), filled in its order by a loading thread of its own (warp
// 8 for warpgroup 0, which also loads the column's blocks once and x's ring;
// warp 9 for warpgroup 1). A ring has one consumer taking its stages in
// order: a barrier's parity tells phases apart only up to one fill back, so
// two consumers taking turns from one ring could mistake an older fill for
// theirs (the race an earlier build of this kernel had). x's ring (two
// stages) is read by both warpgroups every step.
//
// db: one stored block of each block row (sum_mask, spread over the columns
// by the host) has its dy slice summed by the warpgroup that holds it, 16
// bytes a lane, across the warp by shuffles, into a per-warp row in shared
// memory; the warps are added in order at the range's end. Block rows with
// no stored block get thread blocks of their own, which read dy directly.
//
// A column whose last pair lacks its second block loads a box past dy's end
// (zeros) in its place and multiplies it by a block of zeros: D's rows
// 32-63 are then zeros, not stored, and dx gets nothing. A column without
// blocks writes dx's zeros (through the gelu form). Tokens past n arrive as
// zeros and are not stored. No atomics: the same bits on every run.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "sparse/cuda/bsr_wgmma32_grads.h"
#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/tile_values.cuh"
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

constexpr std::string_view kOp = "bsr linear grads";
constexpr int kB = 32;
constexpr int kStep = kLinearGradsStep;      // tokens a step
constexpr int kConsumers = 256;              // two warpgroups multiply
constexpr int kThreads = kConsumers + 64;    // two warps load
constexpr int kSliceBytes = kStep * kB * 2;  // a [128 tokens, 32] slice: 8 KB
constexpr int kBlockBytes = kB * kB * 2;     // a block: 2 KB
// Named barriers (0 is __syncthreads).
constexpr int kBarWriteOut = 1;       // warpgroup 0's write-out
constexpr int kBarExchangeFull = 2;   // + buffer: warpgroup 1 has written its part
constexpr int kBarExchangeEmpty = 4;  // + buffer: warpgroup 0 has read it
constexpr int kBarConsumers = 6;      // both warpgroups

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The shared memory of a kernel whose warpgroups hold up to kPairs pairs
// each (columns of up to 4 kPairs blocks), with z's slice beside x's when
// kGelu; offsets from the 1024-aligned base.
template <int kPairs, bool kGelu>
struct GradsLayout {
  static constexpr int kMostBlocks = 4 * kPairs;
  static constexpr int kPairStages = kPairs == 6 && kGelu ? 2 : 3;  // each warpgroup's ring
  static constexpr int kPairBytes = 2 * kSliceBytes;
  static constexpr int kXBytes = (kGelu ? 2 : 1) * kSliceBytes;  // x's slice (and z's)
  static constexpr int kXStages = 2;
  static constexpr int kRing0 = 0;
  static constexpr int kRing1 = kRing0 + kPairStages * kPairBytes;
  static constexpr int kXRing = kRing1 + kPairStages * kPairBytes;
  static constexpr int kBlocks = kXRing + kXStages * kXBytes;  // the column's blocks
  static constexpr int kExchange = kBlocks + kMostBlocks * kBlockBytes;
  static constexpr int kStaging = kExchange + 2 * kStep * kB * 4;  // dx's tile for the TMA store
  static constexpr int kSums = kStaging + kSliceBytes;             // [kMostBlocks][4 warps][32] f32
  static constexpr int kBarriers = kSums + kMostBlocks * 4 * kB * 4;
  // full and empty for each stage of the three rings, and the blocks' barrier.
  static constexpr int kBytes = kBarriers + 8 * (2 * (2 * kPairStages + kXStages) + 1);
  static constexpr int kSmemBytes = kBytes + 1024;  // room to align
  static_assert(kSmemBytes <= 227 * 1024, "one thread block an SM");
};

// A ring's stages and barriers: full(i) armed by its loader, empty(i) one
// arrival from each of `warps` consumer warps; step i uses stage i % kStages
// in phase (i / kStages) & 1 (tma.cuh's StageRing, placed anywhere).
template <int kStages, int kStageBytes>
struct Ring {
  uint32_t stages, bars;  // shared addresses
  __device__ __forceinline__ uint32_t stage(int i) const { return stages + (i % kStages) * kStageBytes; }
  __device__ __forceinline__ uint32_t full(int i) const { return bars + 8 * (i % kStages); }
  __device__ __forceinline__ uint32_t empty(int i) const { return bars + 8 * (kStages + i % kStages); }
  __device__ __forceinline__ void wait_empty(int i) const { cuda::barrier_wait(empty(i), ((i / kStages) & 1) ^ 1); }
  __device__ __forceinline__ void wait_full(int i) const { cuda::barrier_wait(full(i), (i / kStages) & 1); }
  __device__ __forceinline__ void init(int warps) const {
    for (int s = 0; s < kStages; ++s) {
      cuda::barrier_init(full(s), 1);
      cuda::barrier_init(empty(s), warps);
    }
  }
};

struct GradsMaps {
  CUtensorMap dy;      // [n, out]: boxes of 32 features x 128 tokens
  CUtensorMap x;       // [n, in], as dy
  CUtensorMap z;       // [n, in] (a gelu form only), as dy
  CUtensorMap dx;      // [n, in], stored from the staging tile
  CUtensorMap values;  // W's blocks as [nblocks * 32, 32]: a box a block
};

// 8 values of T from 16 bytes, added to sum[0..7].
template <typename T>
__device__ __forceinline__ void add_chunk(float (&sum)[8], const unsigned char* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  T v[8];
  memcpy(v, &raw, sizeof(v));
#pragma unroll
  for (int i = 0; i < 8; ++i) sum[i] += to_float(v[i]);
}

// The thread block's task: a block column and a range of tokens, or (past
// the columns' tasks) an empty block row's sums over a range.
// Thread blocks go range by range, the columns longest first within each:
// those running at once share a range of tokens, so a block row's dy slices
// and x's steps are read from the L2 by every column that needs them, not
// from DRAM once per column.
struct GradsTask {
  bool column;
  int32_t c;      // the block column, or the empty block row
  int32_t begin;  // the column's first entry
  int count;      // its blocks
  int64_t range;  // of the tokens
  int64_t n0, n1;
  uint32_t sums;  // its blocks whose dy slices give db
};

template <typename T>
__device__ __forceinline__ GradsTask grads_task(const BsrLinearGradsArgs<T>& p) {
  GradsTask t{};
  const int64_t column_tasks = p.block_cols * p.splits;
  const int64_t i = blockIdx.x;
  t.column = i < column_tasks;
  const int64_t per_range = t.column ? p.block_cols : p.nempty, local = t.column ? i : i - column_tasks;
  t.range = local / per_range;
  t.n0 = t.range * p.split_n;
  t.n1 = t.n0 + p.split_n < p.n ? t.n0 + p.split_n : p.n;
  if (t.column) {
    t.c = p.col_order[local % per_range];
    t.begin = p.col_ptr[t.c];
    t.count = p.col_ptr[t.c + 1] - t.begin;
    t.sums = p.db != nullptr ? p.sum_mask[t.c] : 0u;
  } else {
    t.c = p.empty_rows[local % per_range];
  }
  return t;
}

// An empty block row's db over the task's tokens: consumer thread t adds
// feature t % 32 at tokens t / 32, t / 32 + 8, ...; the eight lanes are
// added in order.
template <typename T>
__device__ __forceinline__ void empty_row_sums(const BsrLinearGradsArgs<T>& p, const GradsTask& t, float* lanes) {
  const int tid = threadIdx.x, f = tid % kB, lane_group = tid / kB;
  constexpr int kGroups = kConsumers / kB;
  const int64_t r = int64_t{t.c} * kB + f;
  float sum = 0.f;
  for (int64_t k = t.n0 + lane_group; k < t.n1; k += kGroups) sum += to_float(p.dy[k * p.out + r]);
  lanes[lane_group * kB + f] = sum;
  named_sync(kBarConsumers, kConsumers);
  if (tid < kB) {
    float total = 0.f;
    for (int l = 0; l < kGroups; ++l) total += lanes[l * kB + tid];
    if (p.splits > 1) {
      p.db_partial[t.range * p.out + r] = total;
    } else {
      p.db[r] = from_float<T>(total);
    }
  }
}

template <typename T, int kPairs, GeluWriteOut kGelu>
__global__ void __launch_bounds__(kThreads, 1)
    linear_grads_kernel(const __grid_constant__ GradsMaps maps, const BsrLinearGradsArgs<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool gelu = kGelu != GeluWriteOut::kNone;
  using L = GradsLayout<kPairs, gelu>;
  using PairRing = Ring<L::kPairStages, L::kPairBytes>;
  using XRing = Ring<L::kXStages, L::kXBytes>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const uint32_t base = cuda::smem_u32(smem);
  const uint32_t bars = base + L::kBarriers;
  // Warpgroup w's ring of pairs.
  const auto pair_ring = [&](int w) {
    return PairRing{base + (w == 0 ? L::kRing0 : L::kRing1), bars + w * 16 * L::kPairStages};
  };
  const XRing xring{base + L::kXRing, bars + 32 * L::kPairStages};
  const uint32_t blocks_bar = xring.bars + 16 * L::kXStages;
  const int tid = threadIdx.x;
  if (tid == 0) {
    pair_ring(0).init(4);
    pair_ring(1).init(4);
    xring.init(8);
    cuda::barrier_init(blocks_bar, 1);
    cuda::barrier_init_fence();
  }
  __syncthreads();
  // Launched to overlap the kernel before it: every read and write of global
  // memory comes after this wait.
  cuda::wait_for_prerequisite_grids();
  cuda::allow_dependent_launch();

  const GradsTask task = grads_task(p);
  if (!task.column) {
    if (tid < kConsumers) empty_row_sums(p, task, reinterpret_cast<float*>(smem + L::kSums));
    return;
  }
  const int steps = static_cast<int>((task.n1 - task.n0 + kStep - 1) / kStep);
  const int count = task.count;
  const int c0 = task.c * kB;  // the column's first feature of x

  if (tid >= kConsumers) {
    const int loader = (tid - kConsumers) / 32;  // 0: x, the blocks and warpgroup 0's pairs; 1: warpgroup 1's pairs
    if (tid % 32 != 0) return;
    if (loader == 0 && count > 0) {
      barrier_expect(blocks_bar, count * kBlockBytes);
      for (int q = 0; q < count; ++q) {
        tma_load(base + L::kBlocks + q * kBlockBytes, &maps.values, 0, p.col_id[task.begin + q] * kB, blocks_bar);
      }
    }
    int pstep = 0;
    for (int s = 0; s < steps; ++s) {
      const int n0 = static_cast<int>(task.n0) + s * kStep;
      if (loader == 0) {
        xring.wait_empty(s);
        barrier_expect(xring.full(s), L::kXBytes);
        tma_load(xring.stage(s), &maps.x, c0, n0, xring.full(s));
        if constexpr (gelu) tma_load(xring.stage(s) + kSliceBytes, &maps.z, c0, n0, xring.full(s));
      }
      const PairRing ring = pair_ring(loader);
#pragma unroll 1
      for (int pair = 1 - loader; 2 * pair < count; pair += 2, ++pstep) {
        const int q = 2 * pair;
        ring.wait_empty(pstep);
        const uint32_t full = ring.full(pstep), st = ring.stage(pstep);
        barrier_expect(full, 2 * kSliceBytes);
        tma_load(st, &maps.dy, p.col_row[task.begin + q] * kB, n0, full);
        // A missing second block: a box past dy's last feature, which arrives as zeros.
        const int second = q + 1 < count ? p.col_row[task.begin + q + 1] * kB : static_cast<int>(p.out);
        tma_load(st + kSliceBytes, &maps.dy, second, n0, full);
      }
    }
    return;
  }

  const int wg = tid / 128, lt = tid % 128, warp = lt / 32, lane = tid % 32;
  const PairRing ring = pair_ring(wg);
  float* sums = reinterpret_cast<float*>(smem + L::kSums);  // [block][warp][feature]
  for (int i = tid; i < count * 4 * kB; i += kConsumers) sums[i] = 0.f;
  if (count % 2 == 1) {
    // The missing block of the last pair: zeros, so that the pair's dx
    // products run whole (a test between them would make ptxas serialize
    // every wgmma of the kernel: its C7520) and add nothing.
    uint32_t* missing = reinterpret_cast<uint32_t*>(smem + L::kBlocks + count * kBlockBytes);
    for (int i = tid; i < kBlockBytes / 4; i += kConsumers) missing[i] = 0u;
    cuda::fence_proxy_async();  // before wgmma reads them
  }
  named_sync(kBarConsumers, kConsumers);
  if (count > 0) cuda::barrier_wait(blocks_bar, 0);
  float* exchange = reinterpret_cast<float*>(smem + L::kExchange);
  unsigned char* staging = smem + L::kStaging;
  const bool leader = tid == 0;  // issues the TMA stores

  float acc[kPairs][4][4] = {};  // dW of this warpgroup's pairs
  cuda::fence_registers(acc);
  int pstep = 0;
  for (int s = 0; s < steps; ++s) {
    const int n0 = static_cast<int>(task.n0) + s * kStep;
    xring.wait_full(s);
    const uint32_t xst = xring.stage(s);
    float dx[2][4][4] = {};
    cuda::fence_registers(dx);
    int held = -1;  // the pair stage the last group still reads
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int pair = 1 - wg + 2 * i, q = 2 * pair;
      if (q < count) {
        const uint32_t st = ring.stage(pstep);
        ring.wait_full(pstep);
        cuda::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kStep / 16; ++ks) {
          // A: the pair's dy slices, 16 tokens a k16 step (MN-major, the second slice
          // the leading offset on); B: x's slice, the same 16 tokens (MN-major).
          cuda::wgmma_64x32_ss<T, true, true>(acc[i], sw64_desc(st + ks * 1024, kSliceBytes),
                                              sw64_desc(xst + ks * 1024));
        }
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const uint32_t block = base + L::kBlocks + (q + b) * kBlockBytes;
#pragma unroll
          for (int ks = 0; ks < kB / 16; ++ks) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              // A: dy's slice, tokens on M (K-major, 32 bytes a k16 step); B: the block,
              // read transposed (16 of its rows a k16 step).
              cuda::wgmma_64x32_ss<T, false, true>(dx[h], sw64_desc(st + b * kSliceBytes + h * 64 * 64 + ks * 32),
                                                   sw64_desc(block + ks * 1024));
            }
          }
        }
        cuda::wgmma_commit();
        // db: this pair's blocks that carry their block row's sums, while the products run.
        const uint32_t flagged = (task.sums >> q) & 3u;  // (no bit past the column's blocks)
        if (flagged != 0) {
          const unsigned char* slices = smem + (st - base);
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            if (((flagged >> b) & 1u) == 0) continue;
            // Lane l: chunk l % 4 (features 8 (l % 4)..) of tokens 32 warp + l / 4 + 8j.
            float part[8] = {};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              add_chunk<T>(part, slices + b * kSliceBytes + cuda::sw64_offset(32 * warp + lane / 4 + 8 * j, lane % 4));
            }
#pragma unroll
            for (int d = 4; d < 32; d *= 2) {
#pragma unroll
              for (int e = 0; e < 8; ++e) part[e] += __shfl_xor_sync(0xffffffffu, part[e], d);
            }
            if (lane < 4) {
              float* row = sums + ((q + b) * 4 + warp) * kB + 8 * lane;
#pragma unroll
              for (int e = 0; e < 8; ++e) row[e] += part[e];
            }
          }
        }
        cuda::wgmma_wait<1>();
        cuda::fence_registers(acc);
        cuda::fence_registers(dx);
        if (held >= 0 && lane == 0) barrier_arrive(ring.empty(held));
        held = pstep;
        ++pstep;
      }
    }
    cuda::wgmma_wait<0>();
    cuda::fence_registers(acc);
    cuda::fence_registers(dx);
    if (held >= 0 && lane == 0) barrier_arrive(ring.empty(held));

    // dx's tile: warpgroup 1 hands its part to warpgroup 0 through shared
    // memory (f32, two buffers), which adds it to its own, rounds once and
    // stores the tile by TMA, while warpgroup 1 goes on to the next step.
    const int buf = s % 2;
    float* part = exchange + buf * kStep * kB;
    if (wg == 1) {
      if (count > 0) {
        if (s >= 2) named_sync(kBarExchangeEmpty + buf, kConsumers);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) part[((h * 4 + j) * 4 + e) * 128 + lt] = dx[h][j][e];
          }
        }
        __threadfence_block();
        named_arrive(kBarExchangeFull + buf, kConsumers);
      }
      if (lane == 0) barrier_arrive(xring.empty(s));
      continue;
    }
    if (count > 0) {
      named_sync(kBarExchangeFull + buf, kConsumers);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) dx[h][j][e] += part[((h * 4 + j) * 4 + e) * 128 + lt];
        }
      }
      if (s + 2 < steps) named_arrive(kBarExchangeEmpty + buf, kConsumers);
    }
    if (leader) cuda::bulk_wait_read<0>();  // the last store has read the staging tile
    named_sync(kBarWriteOut, 128);
    // stmatrix's rows: lane l gives the 16 bytes of the warp's row 8 (sq % 2) +
    // l % 8 at columns 8 (j + sq / 2).., sq = l / 8 (as bsr_wgmma32.cu's write-out).
    const int sq = lane / 8;
    const unsigned char* z_stage = smem + (xst - base) + kSliceBytes;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        const int offset = cuda::sw64_offset(64 * h + 16 * warp + 8 * (sq % 2) + lane % 8, j + sq / 2);
        uint32_t zs[4] = {};
        if constexpr (gelu) cuda::ldmatrix_x4<false>(zs, z_stage + offset);
        uint32_t ys[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          float v[2] = {dx[h][j + m / 2][2 * (m % 2)], dx[h][j + m / 2][2 * (m % 2) + 1]};
          ys[m] = gelu_pair<T, kGelu>(v, zs[m]);
        }
        cuda::stmatrix_x4<false>(staging + offset, ys);
      }
    }
    cuda::fence_proxy_async();
    named_sync(kBarWriteOut, 128);  // the tile is written and z's slice read
    if (leader) {
      tma_store(&maps.dx, cuda::smem_u32(staging), c0, n0);
      cuda::bulk_commit();
    }
    if (lane == 0) barrier_arrive(xring.empty(s));
  }

  // dW: each pair's accumulators, D's rows g and g + 8 of the warp's 16 (rows
  // of the pair's blocks), its columns 8j + 2t and 8j + 2t + 1.
  const int g = lane / 4, t = lane % 4;
  const int64_t range = task.range;
#pragma unroll
  for (int i = 0; i < kPairs; ++i) {
    const int pair = 1 - wg + 2 * i;
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int m = warp * 16 + g + 8 * hi, q = 2 * pair + m / kB, r = m % kB;
      if (q >= count) continue;
      const int64_t e = p.col_id[task.begin + q];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = 8 * j + 2 * t;
        const float v0 = acc[i][j][2 * hi], v1 = acc[i][j][2 * hi + 1];
        if (p.splits > 1) {
          *reinterpret_cast<float2*>(p.dw_partial + (range * p.nblocks + e) * kB * kB + r * kB + col) =
              make_float2(v0, v1);
        } else {
          *reinterpret_cast<uint32_t*>(p.dw + e * kB * kB + r * kB + col) = cuda::pack2<T>(v0, v1);
        }
      }
    }
  }
  // db: the flagged blocks' rows, their warps added in order.
  if (task.sums != 0) {
    named_sync(kBarConsumers, kConsumers);
    for (int base_q = 0; base_q < count; base_q += kConsumers / kB) {
      const int q = base_q + tid / kB, f = tid % kB;
      if (q >= count || ((task.sums >> q) & 1u) == 0) continue;
      const float* rows = sums + q * 4 * kB + f;
      const float total = ((rows[0] + rows[kB]) + rows[2 * kB]) + rows[3 * kB];
      const int64_t r = int64_t{p.col_row[task.begin + q]} * kB + f;
      if (p.splits > 1) {
        p.db_partial[range * p.out + r] = total;
      } else {
        p.db[r] = from_float<T>(total);
      }
    }
  }
  if (leader) cuda::bulk_wait<0>();  // shared memory stays until the stores have read it
#endif
}

template <typename T, int kPairs, GeluWriteOut kGelu>
void launch(const BsrLinearGradsArgs<T>& p, cudaStream_t stream) {
  using L = GradsLayout<kPairs, kGelu != GeluWriteOut::kNone>;
  const auto kernel = linear_grads_kernel<T, kPairs, kGelu>;
  static std::atomic<uint64_t> configured{0};
  cuda::allow_shared_memory(kernel, L::kSmemBytes, configured, kOp);
  const CUtensorMapDataType type = cuda::tensor_map_type_16bit<T>();
  constexpr CUtensorMapSwizzle kSwizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  GradsMaps maps;
  maps.dy = cuda::tensor_map_16bit(p.dy, p.out, p.n, p.out, kB, kStep, kSwizzle, type, kOp);
  maps.x = cuda::tensor_map_16bit(p.x, p.in, p.n, p.in, kB, kStep, kSwizzle, type, kOp);
  maps.z = p.z != nullptr ? cuda::tensor_map_16bit(p.z, p.in, p.n, p.in, kB, kStep, kSwizzle, type, kOp) : maps.x;
  maps.dx = cuda::tensor_map_16bit(p.dx, p.in, p.n, p.in, kB, kStep, kSwizzle, type, kOp);
  maps.values = cuda::tensor_map_16bit(p.values, kB, p.nblocks * kB, kB, kB, kB, kSwizzle, type, kOp);
  const int64_t tasks = (p.block_cols + (p.db != nullptr ? p.nempty : 0)) * p.splits;
  cuda::launch_overlapping(kernel, dim3(static_cast<unsigned>(tasks)), dim3(kThreads), L::kSmemBytes, stream, kOp, maps,
                           p);
}

template <typename T, GeluWriteOut kGelu>
void launch_pairs(const BsrLinearGradsArgs<T>& p, cudaStream_t stream) {
  if (p.most <= 4) return launch<T, 1, kGelu>(p, stream);
  if (p.most <= 8) return launch<T, 2, kGelu>(p, stream);
  if (p.most <= 16) return launch<T, 4, kGelu>(p, stream);
  launch<T, 6, kGelu>(p, stream);
}

}  // namespace

template <typename T>
void bsr_wgmma32_linear_grads(const BsrLinearGradsArgs<T>& p, cudaStream_t stream) {
  COPPICE_CHECK(p.most <= kLinearGradsMostBlocks && p.split_n % kStep == 0 && p.splits >= 1, kOp,
                ": internal: columns of ", p.most, " blocks, ranges of ", p.split_n, " tokens");
  COPPICE_CHECK(p.gelu == GeluWriteOut::kNone || (is_gelu_gradient(p.gelu) && p.z != nullptr), kOp,
                ": internal: a forward gelu form, or a gradient form without z");
  if (p.n <= 0 || p.block_cols <= 0) return;
  switch (p.gelu) {
    case GeluWriteOut::kGradient: return launch_pairs<T, GeluWriteOut::kGradient>(p, stream);
    case GeluWriteOut::kGradientTanh: return launch_pairs<T, GeluWriteOut::kGradientTanh>(p, stream);
    default: return launch_pairs<T, GeluWriteOut::kNone>(p, stream);
  }
}

template void bsr_wgmma32_linear_grads<__nv_bfloat16>(const BsrLinearGradsArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_wgmma32_linear_grads<__half>(const BsrLinearGradsArgs<__half>&, cudaStream_t);

}  // namespace coppice::sparse_cuda
