// Attention's tiled kernels on Hopper's warpgroup MMA (attention_sm90.h),
// head sizes 64 and 128, bf16 and f16: FlashAttention-2's scheme as in
// attention.cu (forward with an online softmax; dk/dv by key tile and dq by
// query tile, so that nothing is summed with atomics), with every product on
// wgmma.
//
// Why: in attention.cu's mma.sync kernels each warp multiplies its own 16
// rows, so each of the four warps reads the whole B tile from shared memory
// (ldmatrix) for every product; at head size 64 that traffic, not the tensor
// cores, sets their pace (4.8 ms of the GPT step's kernels on an H200, where
// cuDNN's wgmma kernels take 2.7). One m64n64k16 wgmma multiplies the
// warpgroup's 64 rows reading B from shared memory once, by descriptor,
// without passing it through registers.
//
// A thread block is one warpgroup (128 threads) and takes 64 queries
// (forward, dq) or keys (dk/dv) of one head. Tiles arrive by TMA through the
// operands' tensor maps (one thread issues a step's copies, every thread
// waits on the mbarrier they complete), double-buffered (but the forward's
// k and v at head size 128: forward_buffers), in the 128-byte swizzle
// (wgmma.cuh); a tile of 128-wide rows is two 64-wide column slices,
// each its own swizzled 64 x 64 tile. Each kernel's output tile leaves the
// same way: stmatrix into a tile its walk is done with, and one thread's TMA
// store (stage_tile, store_tiles). dk/dv and dq are launched to overlap the
// kernel before them (tensor/cuda/grid_dependency.cuh): their barriers, walk
// and first input tiles are under way before that kernel's last blocks end,
// and they wait for it only before reading what it writes. The
// score products (q k^T; k q^T and v dout^T; q k^T and dout v^T) take both
// operands from those tiles (K-major, k stepping through the slices), so
// the operands a walk keeps (q; k and v; q and dout) never pass through
// registers. p and ds are converted from the accumulators as
// FlashAttention-2 does, and the value products (p v; p^T dout and ds^T q;
// ds k) take them as A from registers times the tile read MN-major (the
// transpose flag), one m64n64k16 per 64 columns of the result.
//
// dq has two kernels. For short sequences dk/dv also stores each step's ds^T
// (rounded as its own product takes it) to global memory, a 64 x 64 tile a
// (key tile, query tile) pair its walk visits (ds_slot: a layout's kept
// pairs alone): stmatrix into a staging tile, one bulk copy out (tma.cuh's
// bulk_store) that runs during the next step; where its walks are short, at
// head size 64, it also forms the row deltas from out's tiles
// (kFormsDeltas), which attention.cu's row-delta kernel forms otherwise.
// dq then walks its key tiles multiplying each ds tile by k (both from
// shared memory), one product a step and no softmax: it is bound by L2,
// where forming ds again took three products a step. The order of dq's sums
// is fixed either way, so the bits repeat. Longer sequences (attention.cu
// decides) form ds again in dq_recompute_kernel, because the tiles' bytes
// grow with T^2. The walks, the softmax and the masks are
// attention_tiles.cuh's, shared with the mma.sync kernels. Several thread
// blocks share an SM, so one block's softmax overlaps another's products.
// Overlapping them inside a block as FlashAttention-3 does (the next tile's
// q k^T issued before this tile's exponentials, two score tiles in
// registers) measured slower at the GPT's shape (H200, [32, 16, 512, 64]
// causal bf16 forward: 0.138-0.155 ms against 0.116): 168-238 registers a
// thread let two or three blocks share an SM instead of four, and the walks
// are 1-8 tiles long.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string_view>

#include "sparse/attention/cuda/attention_sm90.h"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/tma.cuh"
#include "tensor/cuda/wgmma.cuh"

namespace coppice::cuda {
namespace {

constexpr int R = kSm90AttentionTile;  // tokens per tile
constexpr int kThreads = kSm90AttentionThreads;
constexpr int kSliceBytes = R * 128;  // 64 columns of a tile's rows: one 128-byte swizzle row each
constexpr int kNS = R / 8;            // n8 fragments across a score tile (64 tokens)
constexpr int kTokenSteps = R / 16;   // k16 steps over a tile's tokens
constexpr int kAlign = 1024;          // swizzle atoms start 1024-aligned

static_assert(R == 64 && kThreads == 128, "one warpgroup, 16 rows a warp");

template <int D>
constexpr int tile_bytes() {
  static_assert(D == 64 || D == 128, "head sizes 64 and 128");
  return R * D * 2;
}

// Dynamic shared memory from its first 1024-aligned byte (the size asks for the slack).
__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* raw) {
  return raw + ((kAlign - (smem_u32(raw) & (kAlign - 1))) & (kAlign - 1));
}

// Issues acc (64 x 64) = A B^T over D: A and B the 64 rows of the tiles at
// shared addresses a and b (K-major: their rows run along the sum), as q k^T
// with a holding q and b holding k.
template <typename T, int D>
__device__ __forceinline__ void scores(float (&acc)[kNS][4], const unsigned char* a, const unsigned char* b) {
  const uint64_t da = sw128_desc(smem_u32(a)), db = sw128_desc(smem_u32(b));
  auto at = [](int ks) { return (ks / 4) * kSliceBytes + (ks % 4) * 32; };  // k16 step ks: its slice, 32 bytes a step
  wgmma_64x64_ss<T, false, false, false>(acc, da, db);
#pragma unroll
  for (int ks = 1; ks < D / 16; ++ks) {
    wgmma_64x64_ss<T, false, false, true>(acc, desc_advance(da, at(ks)), desc_advance(db, at(ks)));
  }
}

// Issues acc (64 x D) += A B: A the warps' fragments a (64 x 64 tokens, from
// registers), B the tile at shared address b (64 tokens by D, read MN-major),
// as p v with b holding v; one m64n64k16 per 64 columns.
template <typename T, int D>
__device__ __forceinline__ void values(float (&acc)[D / 8][4], const uint32_t (&a)[kTokenSteps][4],
                                       const unsigned char* b) {
  const uint64_t desc = sw128_desc(smem_u32(b));
#pragma unroll
  for (int slice = 0; slice < D / 64; ++slice) {
    float(&part)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[slice * 8]);
#pragma unroll
    for (int ks = 0; ks < kTokenSteps; ++ks) {
      wgmma_64x64_rs<T, true, true>(part, a[ks], desc_advance(desc, slice * kSliceBytes + ks * 16 * 128));
    }
  }
}

// Where the ds tile of (key tile from k0, query tile from q0) of `head`
// lies: from a.ds, a.ds_head_tiles tiles a head for the heads from
// a.ds_first. Without a layout, by query tile (the triangle kt <= qt when
// causal); with one, by the kept block's entry in the key-block walk
// (`entry`: dk/dv's walk's own, dq's through col_entry; laid out by the
// query-block walk, dk/dv's lookup had cost its steps 3 % more instructions
// and 5-8 % more time, H200, with a layout or without), the block's
// (block / 64)^2 tiles in a row, so that the tiles take the layout's share
// of the memory. dk/dv writes each pair its walk visits, and dq's walk
// visits the same pairs (key_walk and query_walk agree).
__device__ __forceinline__ unsigned char* ds_slot(const FlashArgs& a, int64_t head, int64_t k0, int64_t q0,
                                                  int32_t entry) {
  int64_t pair;
  if (a.block > 0) {
    // The tile's place in its block in 32 bits (t < 2^31, as the tensor
    // maps' coordinates are): a 64-bit remainder by a runtime divisor is a
    // subroutine.
    const uint32_t per_block = static_cast<uint32_t>(a.block) / R;
    const uint32_t q_in = static_cast<uint32_t>(q0) / R % per_block, k_in = static_cast<uint32_t>(k0) / R % per_block;
    pair = (static_cast<int64_t>(entry) * per_block + q_in) * per_block + k_in;
  } else {
    const int64_t kt = k0 / R, qt = q0 / R;
    pair = a.causal ? qt * (qt + 1) / 2 + kt : qt * ((a.t + R - 1) / R) + kt;
  }
  return static_cast<unsigned char*>(a.ds) + ((head - a.ds_first) * a.ds_head_tiles + pair) * kSm90DsTileBytes;
}

// A warpgroup's ds^T fragments (to_a's layout: rows the block's 64 keys,
// k16 steps over the step's 64 queries) into a 128-byte-swizzled tile by
// stmatrix: row r holds key r's 64 values, as dq's product reads it.
__device__ __forceinline__ void stage_ds(unsigned char* tile, const uint32_t (&sf)[kTokenSteps][4], int warp,
                                         int lane) {
  const int matrix = lane / 8, row = warp * 16 + (matrix & 1) * 8 + lane % 8;
#pragma unroll
  for (int ks = 0; ks < kTokenSteps; ++ks) stmatrix_x4<false>(tile + sw128_offset(row, ks * 2 + matrix / 2), sf[ks]);
}

// Issues acc (64 x D) += ds k: A the ds tile at shared address ds (stage_ds's,
// read MN-major: its rows are the sum's keys), B the k tile at k (64 keys by
// D, MN-major); one m64n64k16 per 64 columns and k16 step.
template <typename T, int D>
__device__ __forceinline__ void ds_times_k(float (&acc)[D / 8][4], const unsigned char* ds, const unsigned char* k) {
  const uint64_t da = sw128_desc(smem_u32(ds)), db = sw128_desc(smem_u32(k));
#pragma unroll
  for (int slice = 0; slice < D / 64; ++slice) {
    float(&part)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[slice * 8]);
#pragma unroll
    for (int ks = 0; ks < kTokenSteps; ++ks) {
      wgmma_64x64_ss<T, true, true, true>(part, desc_advance(da, ks * 16 * 128),
                                          desc_advance(db, slice * kSliceBytes + ks * 16 * 128));
    }
  }
}

// Issue: the registers the products read are written, then the fence.
template <typename... Registers>
__device__ __forceinline__ void issue(Registers&... r) {
  (fence_registers(r), ...);
  wgmma_fence();
}

// The products issued since `issue` are done and their results readable.
template <typename... Registers>
__device__ __forceinline__ void complete(Registers&... r) {
  wgmma_commit();
  wgmma_wait<0>();
  (fence_registers(r), ...);
}

// ---- tiles by TMA ---------------------------------------------------------------------------------
//
// One thread issues a step's tile copies (cp.async.bulk.tensor through the
// operands' maps, Sm90Maps) and every thread waits on the mbarrier they
// complete. Each thread staging its share with cp.async had cost about 80
// instructions a warp for a step's two tiles (addresses, bounds, selects), a
// quarter of the forward's step, and its walk's first three tiles about 150
// more (Nsight Compute's SASS counts, docs/benchmarks.md).

// Head n's entry (its head within a batch entry, and the batch entry) in
// 32 bits: n, heads < 2^31.
struct HeadIndex {
  int head, batch;
};
__device__ __forceinline__ HeadIndex head_index(int64_t n, int64_t heads) {
  const uint32_t n32 = static_cast<uint32_t>(n), heads32 = static_cast<uint32_t>(heads);
  return {static_cast<int>(n32 % heads32), static_cast<int>(n32 / heads32)};
}
// Head h's coordinates in map m: a dimension mapped one entry long (of
// stride 0, or of one entry) takes coordinate 0.
__device__ __forceinline__ HeadIndex map_entry(const Sm90TileMap& m, HeadIndex h) {
  return {m.heads_dim == 1 ? 0 : h.head, m.batch_dim == 1 ? 0 : h.batch};
}

// Issues the copies of rows [row0, row0 + 64) of head `h` of an operand into
// a swizzled tile (a box per 64 columns: the tile's column slices), which
// complete `bar`'s transaction bytes; rows past t arrive as zeros.
template <int D>
__device__ __forceinline__ void load_tile(unsigned char* tile, const Sm90TileMap& m, HeadIndex h, int64_t row0,
                                          uint32_t bar) {
  const HeadIndex at = map_entry(m, h);
#pragma unroll
  for (int slice = 0; slice < D / 64; ++slice) {
    tma_load_4d(smem_u32(tile) + slice * kSliceBytes, &m.map, slice * 64, static_cast<int>(row0), at.head, at.batch,
                bar);
  }
}

// The copies of rows [row0, row0 + 64) of two operands a step takes
// together (k and v, or q and dout) into their tiles, completing one barrier.
template <int D>
__device__ __forceinline__ void load_tile_pair(unsigned char* tile_a, const Sm90TileMap& a, unsigned char* tile_b,
                                               const Sm90TileMap& b, HeadIndex h, int64_t row0, uint32_t bar) {
  barrier_expect(bar, 2 * tile_bytes<D>());
  load_tile<D>(tile_a, a, h, row0, bar);
  load_tile<D>(tile_b, b, h, row0, bar);
}

// The write-out: a warpgroup's 64 x D accumulators c, times `scale` and
// rounded to T (store_rows' arithmetic, so the same bits), staged by
// stmatrix into a free tile of D / 64 swizzled column slices (stage_ds's
// layout), where store_tiles' copy takes them. Plain stores had each
// thread write 4 bytes at a time, and a block's end waited for them to
// drain (Nsight Compute: 5-14 % of the warps' stall samples).
template <typename T, int D>
__device__ __forceinline__ void stage_tile(unsigned char* tile, float (&c)[D / 8][4], float scale, int warp, int lane) {
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) c[j][e] *= scale;
  }
  uint32_t f[D / 16][4];
  to_a<T, D / 8>(f, c);
#pragma unroll
  for (int slice = 0; slice < D / 64; ++slice) {
    stage_ds(tile + slice * kSliceBytes, *reinterpret_cast<const uint32_t(*)[kTokenSteps][4]>(&f[slice * kTokenSteps]),
             warp, lane);
  }
}
// An output's staged tile (stage_tile's) and the map it goes out through.
struct OutTile {
  const Sm90TileMap* map;
  const unsigned char* smem;
};
// After every thread's stage_tile: rows [row0, row0 + 64) of head `h` of
// each output, copied out of its tile by one thread, which waits until the
// copies (and any before them) have read their tiles, so that the block may
// end; TMA leaves the rows past t unwritten.
template <int D, typename... Out>
__device__ __forceinline__ void store_tiles(HeadIndex h, int64_t row0, const Out&... out) {
  fence_proxy_async();  // the stmatrix writes, before the copies read them
  __syncthreads();
  if (threadIdx.x == 0) {
    const auto store = [&](const OutTile& o) {
      const HeadIndex at = map_entry(*o.map, h);
#pragma unroll
      for (int slice = 0; slice < D / 64; ++slice) {
        tma_store_4d(&o.map->map, smem_u32(o.smem) + slice * kSliceBytes, slice * 64, static_cast<int>(row0), at.head,
                     at.batch);
      }
    };
    (store(out), ...);
    bulk_commit();
    bulk_wait_read<0>();
  }
}

// kCount mbarriers at `bars` (8 bytes apart), each awaiting one arrival (the
// issuing thread's, with the bytes it copies); every thread calls it.
template <int kCount>
__device__ __forceinline__ void init_barriers(uint32_t bars) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) barrier_init(bars + 8 * i, 1);
    barrier_init_fence();
  }
  __syncthreads();
}

// The double-buffered copies of a walk's steps: buffer b's barrier completes
// once each time the buffer is filled, and `phases` holds, per buffer, the
// parity of the fill a step waits for next.
struct StepBarriers {
  uint32_t bars;  // buffer 0's; buffer 1's 8 bytes on
  uint32_t phases = 0;
  __device__ __forceinline__ uint32_t bar(int buf) const { return bars + 8 * buf; }
  // Until buffer buf's next fill has landed.
  __device__ __forceinline__ void wait(int buf) {
    barrier_wait(bar(buf), (phases >> buf) & 1);
    phases ^= 1u << buf;
  }
};

// ---- forward ------------------------------------------------------------------------------------

// The forward's buffers for k and for v. Head size 128: one each, so that
// its tiles take 48 KB and four thread blocks share an SM (at most 128
// registers a thread); double-buffered, its 80 KB let two share one and its
// forward took 1.24x as long (H200, [16, 16, 1024, 128]: causal 0.208
// against 0.169 ms). Head size 64: two each (40 KB, five blocks, registers
// their bound); one each, or two with a barrier for each of k and v, measured
// 2-4 % slower there at T 2048.
template <int D>
constexpr int forward_buffers() {
  return D == 64 ? 2 : 1;
}
// Double-buffered, a step's k and v copies into the other buffer are issued
// as it starts (the step before read that buffer) and complete one barrier.
// Single-buffered, k and v have a barrier each: the next step's k is issued
// once every warp's q k^T is done with this one and its v once p v is, so
// that each runs under the other product and the softmax.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(const FlashArgs a, const __grid_constant__ Sm90Maps maps) {
  constexpr int kTile = tile_bytes<D>();
  constexpr bool kDouble = forward_buffers<D>() == 2;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* q_s = aligned_smem(smem_raw);
  unsigned char* k_s = q_s + kTile;                         // forward_buffers<D>() buffers
  unsigned char* v_s = k_s + forward_buffers<D>() * kTile;  // as many
  const uint32_t q_bar = smem_u32(v_s + forward_buffers<D>() * kTile);
  // Double-buffered: k and v of each buffer (two barriers); single: k's, then v's.
  StepBarriers kv{q_bar + 8};
  const uint32_t k_bar = q_bar + 8, v_bar = q_bar + 16;
  init_barriers<3>(q_bar);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool issuer = threadIdx.x == 0;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const HeadIndex hi = head_index(head, a.heads);
  const int64_t q0 = query_tile_start(t, R);
  auto load = [&](unsigned char* tile, const Sm90TileMap& m, int64_t row0, uint32_t bar) {
    barrier_expect(bar, kTile);
    load_tile<D>(tile, m, hi, row0, bar);
  };
  auto load_kv = [&](int b, int64_t k0) {  // double-buffered
    load_tile_pair<D>(k_s + b * kTile, maps.k, v_s + b * kTile, maps.v, hi, k0, kv.bar(b));
  };

  if (issuer) load(q_s, maps.q, q0, q_bar);  // q's copy runs under the walk's first reads of the layout
  StepWalk walk = key_walk(a, q0, R, R);
  int64_t k0 = walk.next();
  if (issuer && k0 >= 0) {
    if constexpr (kDouble) {
      load_kv(0, k0);
    } else {
      load(k_s, maps.k, k0, k_bar);
      load(v_s, maps.v, k0, v_bar);
    }
  }
  barrier_wait(q_bar, 0);  // (an empty walk's too: the copy lands before the block ends)

  float o[D / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float c2 = a.scale * kLog2e;
  const int64_t row_base = q0 + warp * 16 + lane / 4;
  int buf = 0;         // double-buffered: this step's buffer
  uint32_t phase = 0;  // single-buffered: the parity of k's and v's barriers this step
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if constexpr (kDouble) {
      if (issuer && k_next >= 0) load_kv(buf ^ 1, k_next);  // the step before read that buffer (the barrier below)
      kv.wait(buf);
    } else {
      barrier_wait(k_bar, phase);
    }
    float s[kNS][4];
    issue();
    scores<T, D>(s, q_s, k_s + buf * kTile);
    complete(s);
    if constexpr (!kDouble) {
      __syncthreads();  // every warp's q k^T is done with k
      if (issuer && k_next >= 0) load(k_s, maps.k, k_next, k_bar);
    }
    uint32_t pf[kTokenSteps][4];
    softmax_step<T>(pf, s, o, m, l, c2, (a.causal && k0 + R > q0) || k0 + R > t, a.causal, k0, row_base, t, lane);
    if constexpr (!kDouble) barrier_wait(v_bar, phase);
    issue(pf, o);
    values<T, D>(o, pf, v_s + buf * kTile);
    complete(o);

    __syncthreads();  // every warp's p v is done with v (double-buffered: the step with its buffer)
    if constexpr (kDouble) {
      buf ^= 1;
    } else {
      if (issuer && k_next >= 0) load(v_s, maps.v, k_next, v_bar);
      phase ^= 1;
    }
    k0 = k_next;
  }
  finish_softmax(o, m, l, a.lse + head * t, row_base, t, lane);
  stage_tile<T, D>(q_s, o, 1.f, warp, lane);  // q's tile is free: the last step's q k^T is done (the barrier above)
  store_tiles<D>(hi, q0, OutTile{&maps.o, q_s});
}

// ---- backward: dk and dv of 64 keys, over the query steps that see them ---------------------------

// Thread blocks an SM the backward kernels ask registers for. Head size 64:
// three (at most 168 registers a thread); with k and v read into registers
// for the score products, forward + backward at [32, 16, 512, 64] took 0.460
// ms against 0.481 with two blocks (H200). Head size 128: two (the shared
// memory of a third does not fit), so up to 255 registers for dk and dv's 128.
template <int D>
constexpr int backward_blocks() {
  return D == 64 ? 3 : 2;
}

// The row deltas of a step's 64 queries, delta = rowsum(dout * out), into
// delta_s: from the step's dout and out tiles (64-wide rows, swizzled), a
// row 8 lanes of 16 bytes, four rows a thread, in the row-delta kernel's
// arithmetic (row_delta), so the bits are that kernel's. Rows past t are
// zeros in both tiles, so their delta is 0 as that kernel leaves it.
template <typename T>
__device__ __forceinline__ void form_row_deltas(float* delta_s, const unsigned char* dout, const unsigned char* out) {
  constexpr int kGroup = 8;  // 16-byte chunks of a 128-byte row
  const int chunk = threadIdx.x % kGroup;
#pragma unroll
  for (int pass = 0; pass < R * kGroup / kThreads; ++pass) {
    const int row = pass * (kThreads / kGroup) + threadIdx.x / kGroup;
    const int at = sw128_offset(row, chunk);
    const float sum =
        row_delta<T, kGroup>(*reinterpret_cast<const uint4*>(dout + at), *reinterpret_cast<const uint4*>(out + at));
    if (chunk == 0) delta_s[row] = sum;
  }
}

// dk/dv reads the row deltas (a.delta) that attention.cu's row-delta
// kernel wrote before it, or, kFormsDeltas (head size 64), forms them: the
// forward's out arrives beside q and dout, a third tile of each buffer, and
// form_row_deltas runs while the step's score products do. Each query
// tile's deltas are then formed once for each key tile that sees it, from
// tiles that L2 mostly serves, where the row deltas' kernel reads dout and
// out from HBM once and is a launch of its own (H200, [32, 16, 512, 64],
// 75 % window: 17.6 us of the backward's 140), so attention.cu takes it for
// short walks alone (kFormDeltasMaxVisits). Head size 128 has no room for
// the third tiles: its 104 KB take two thread blocks an SM, and 136 KB one.
template <typename T, int D, bool kFormsDeltas>
__global__ void __launch_bounds__(kThreads, backward_blocks<D>())
    dkdv_kernel(const FlashArgs a, const __grid_constant__ Sm90Maps maps) {
  static_assert(!kFormsDeltas || D == 64, "head size 64 forms its row deltas");
  constexpr int kTile = tile_bytes<D>();
  extern __shared__ unsigned char smem_raw[];
  unsigned char* k_s = aligned_smem(smem_raw);
  unsigned char* v_s = k_s + kTile;
  unsigned char* q_s = v_s + kTile;                                   // two buffers
  unsigned char* do_s = q_s + 2 * kTile;                              // two buffers
  unsigned char* out_s = do_s + 2 * kTile;                            // kFormsDeltas: two buffers
  unsigned char* ds_s = out_s + (kFormsDeltas ? 2 * kTile : 0);       // the step's ds^T, on its way out
  float* lse2_s = reinterpret_cast<float*>(ds_s + kSm90DsTileBytes);  // two buffers of R
  float* delta_s = lse2_s + 2 * R;                                    // two buffers of R
  const uint32_t kv_bar = smem_u32(delta_s + 2 * R);
  StepBarriers qdo{kv_bar + 8};  // q and dout (and out) of each buffer
  init_barriers<3>(kv_bar);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool issuer = threadIdx.x == 0;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const HeadIndex hi = head_index(head, a.heads);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * R;
  const float* lse = a.lse + head * t;
  // Forming the deltas, the row stats are lse alone (null: attention_tiles.cuh).
  const float* delta = kFormsDeltas ? nullptr : a.delta + head * t;
  auto staged_delta_s = [&](int b) { return kFormsDeltas ? nullptr : delta_s + b * R; };
  auto load_qdo = [&](int b, int64_t q0) {
    if constexpr (kFormsDeltas) {
      barrier_expect(qdo.bar(b), 3 * kTile);
      load_tile<D>(q_s + b * kTile, maps.q, hi, q0, qdo.bar(b));
      load_tile<D>(do_s + b * kTile, maps.dout, hi, q0, qdo.bar(b));
      load_tile<D>(out_s + b * kTile, maps.o, hi, q0, qdo.bar(b));
    } else {
      load_tile_pair<D>(q_s + b * kTile, maps.q, do_s + b * kTile, maps.dout, hi, q0, qdo.bar(b));
    }
  };

  allow_dependent_launch();  // dq's prologue may run under this kernel's last blocks
  // k's and v's copies run under the walk's first reads of the layout.
  if (issuer) load_tile_pair<D>(k_s, maps.k, v_s, maps.v, hi, k0, kv_bar);
  StepWalk walk = query_walk(a, k0, R);
  int64_t q0 = walk.next();
  if (issuer && q0 >= 0) load_qdo(0, q0);
  // Launched to overlap the kernel before it (the row deltas', or with the
  // heads in slices the last slice's dq; forming its deltas, the first
  // slice is a plain launch): everything before the wait reads the
  // backward's inputs, complete before any of its kernels started, and
  // writes nothing global; delta (the stats below) and the ds slots after it.
  wait_for_prerequisite_grids();
  if (q0 >= 0) {
    stage_row_stats(lse2_s, staged_delta_s(0), lse, delta, q0, R, t);
    __syncthreads();  // the row values stored
  }
  barrier_wait(kv_bar, 0);  // (an empty walk's too: the copies land before the block ends)

  float dk[D / 8][4], dv[D / 8][4];
  zero(dk);
  zero(dv);
  const float c2 = a.scale * kLog2e;
  const int64_t key_base = k0 + warp * 16 + lane / 4;
  const bool keep_ds = a.ds != nullptr;
  int buf = 0;
  while (q0 >= 0) {
    const int32_t entry = walk.entry();  // q0's (with a layout), before the walk moves on
    const int64_t q_next = walk.next();
    RowStats next_stats;  // stored at the step's end, its loads' latency behind the products
    if (q_next >= 0) {
      if (issuer) load_qdo(buf ^ 1, q_next);  // the step before read that buffer (the barrier below)
      next_stats = load_row_stats(lse, delta, q_next, R, t);
    }
    qdo.wait(buf);
    const unsigned char* qs = q_s + buf * kTile;
    const unsigned char* dos = do_s + buf * kTile;

    // s^T = k q^T and dp^T = v dout^T: rows this block's keys, columns the step's queries.
    float p[kNS][4], ds[kNS][4];
    issue();
    scores<T, D>(p, k_s, qs);
    scores<T, D>(ds, v_s, dos);
    if constexpr (kFormsDeltas) form_row_deltas<T>(delta_s + buf * R, dos, out_s + buf * kTile);
    complete(p, ds);
    // ds^T goes to the stage (below) once the last step's copy out has read
    // it (issued a step ago, so seldom waited for); forming the deltas, the
    // barrier after that wait is also the one before they are read.
    if (keep_ds && threadIdx.x == 0) bulk_wait_read<0>();
    if (keep_ds || kFormsDeltas) __syncthreads();
    transposed_p_ds(p, ds, lse2_s + buf * R, delta_s + buf * R, c2, a.causal && q0 < k0 + R, key_base, q0, lane);
    // dv += p^T dout, dk += ds^T q
    uint32_t pf[kTokenSteps][4], sf[kTokenSteps][4];
    to_a<T, kNS>(pf, p);
    to_a<T, kNS>(sf, ds);
    if (keep_ds) stage_ds(ds_s, sf, warp, lane);  // ds^T, rounded as dk's product takes it, for dq
    issue(pf, sf, dv, dk);
    values<T, D>(dv, pf, dos);
    values<T, D>(dk, sf, qs);
    complete(dv, dk);

    if (q_next >= 0) store_row_stats(next_stats, lse2_s + (buf ^ 1) * R, staged_delta_s(buf ^ 1), R);
    fence_proxy_async();  // the stage's stmatrix writes, before the copy out reads them
    __syncthreads();      // and every warp is done with this buffer and its row values
    if (keep_ds && threadIdx.x == 0) {
      bulk_store(ds_slot(a, head, k0, q0, entry), smem_u32(ds_s), kSm90DsTileBytes);
      bulk_commit();
    }
    buf ^= 1;
    q0 = q_next;
  }
  // k's and v's tiles are free (the last step's products are done: the barrier above).
  stage_tile<T, D>(k_s, dk, a.scale, warp, lane);
  stage_tile<T, D>(v_s, dv, 1.f, warp, lane);
  store_tiles<D>(hi, k0, OutTile{&maps.dk, k_s}, OutTile{&maps.dv, v_s});  // (and the last ds tile's copy has read it)
}

// ---- backward: dq of 64 queries, from dk/dv's ds tiles ----------------------------------------------

// dq = scale sum_j ds_j k_j over the key steps the queries see, each ds_j the
// tile dk/dv wrote (ds_slot), so no score is formed twice: one product a
// step where recomputing p and ds took three and a softmax. What bounds it
// is reading the tiles (8 KB a step), so more thread blocks share an SM.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const FlashArgs a, const __grid_constant__ Sm90Maps maps) {
  constexpr int kTile = tile_bytes<D>();
  extern __shared__ unsigned char smem_raw[];
  unsigned char* ds_s = aligned_smem(smem_raw);      // two buffers
  unsigned char* k_s = ds_s + 2 * kSm90DsTileBytes;  // two buffers
  StepBarriers steps{smem_u32(k_s + 2 * kTile)};     // a ds tile and k of each buffer
  init_barriers<2>(steps.bars);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool issuer = threadIdx.x == 0;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const HeadIndex hi = head_index(head, a.heads);
  const int64_t q0 = query_tile_start(t, R);
  auto load_k = [&](int b, int64_t k0) {  // a step's copies complete once both have landed
    barrier_expect(steps.bar(b), kSm90DsTileBytes + kTile);
    load_tile<D>(k_s + b * kTile, maps.k, hi, k0, steps.bar(b));
  };

  allow_dependent_launch();  // with the heads in slices, the next slice's dk/dv overlaps this one's end
  StepWalk walk = key_walk(a, q0, R, R);
  // The ds tile of the step the walk gave last (the issuer's alone: with a
  // layout, its slot's entry is read from col_entry first).
  auto load_ds = [&](int b, int64_t k0) {
    const int32_t entry = a.block > 0 ? a.col_entry[walk.entry()] : 0;
    bulk_load(smem_u32(ds_s + b * kSm90DsTileBytes), ds_slot(a, head, k0, q0, entry), kSm90DsTileBytes, steps.bar(b));
  };
  int64_t k0 = walk.next();
  if (issuer && k0 >= 0) load_k(0, k0);
  // Launched to overlap dk/dv, whose ds tiles are read after this (k, an
  // input of the backward, was complete before dk/dv started).
  wait_for_prerequisite_grids();
  if (issuer && k0 >= 0) load_ds(0, k0);
  float dq[D / 8][4];
  zero(dq);
  int buf = 0;
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if (issuer && k_next >= 0) {  // the step before read that buffer (the barrier below)
      load_k(buf ^ 1, k_next);
      load_ds(buf ^ 1, k_next);
    }
    steps.wait(buf);
    issue(dq);
    ds_times_k<T, D>(dq, ds_s + buf * kSm90DsTileBytes, k_s + buf * kTile);
    complete(dq);

    __syncthreads();  // every warp's product is done with this buffer before the next step's copies refill it
    buf ^= 1;
    k0 = k_next;
  }
  stage_tile<T, D>(ds_s, dq, a.scale, warp, lane);  // the ds buffers (2 x 8 KB) are free: the barrier above
  store_tiles<D>(hi, q0, OutTile{&maps.dq, ds_s});
}

// ---- backward: dq of 64 queries, recomputing ds -------------------------------------------------------

// For longer sequences (attention.cu's kDsTilesMaxT), whose ds tiles would
// take bytes quadratic in t: p and ds formed again from q, k, v and dout,
// three products a step, beside dk/dv; the backward's memory stays linear in t.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, backward_blocks<D>())
    dq_recompute_kernel(const FlashArgs a, const __grid_constant__ Sm90Maps maps) {
  constexpr int kTile = tile_bytes<D>();
  extern __shared__ unsigned char smem_raw[];
  unsigned char* q_s = aligned_smem(smem_raw);
  unsigned char* do_s = q_s + kTile;
  unsigned char* k_s = do_s + kTile;     // two buffers
  unsigned char* v_s = k_s + 2 * kTile;  // two buffers
  const uint32_t qdo_bar = smem_u32(v_s + 2 * kTile);
  StepBarriers kv{qdo_bar + 8};  // k and v of each buffer
  init_barriers<3>(qdo_bar);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool issuer = threadIdx.x == 0;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const HeadIndex hi = head_index(head, a.heads);
  const int64_t q0 = query_tile_start(t, R);
  auto load_kv = [&](int b, int64_t k0) {
    load_tile_pair<D>(k_s + b * kTile, maps.k, v_s + b * kTile, maps.v, hi, k0, kv.bar(b));
  };

  // q's and dout's copies run under the walk's first reads of the layout.
  if (issuer) load_tile_pair<D>(q_s, maps.q, do_s, maps.dout, hi, q0, qdo_bar);
  StepWalk walk = key_walk(a, q0, R, R);
  int64_t k0 = walk.next();
  if (issuer && k0 >= 0) load_kv(0, k0);
  const int64_t row_base = q0 + warp * 16 + lane / 4;
  float lse2[2], dl[2];
  row_stats(lse2, dl, a.lse + head * t, a.delta + head * t, row_base, t);
  barrier_wait(qdo_bar, 0);  // (an empty walk's too: the copies land before the block ends)
  float dq[D / 8][4];
  zero(dq);
  const float c2 = a.scale * kLog2e;
  int buf = 0;
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if (issuer && k_next >= 0) load_kv(buf ^ 1, k_next);  // the step before read that buffer (the barrier below)
    kv.wait(buf);
    const unsigned char* ks = k_s + buf * kTile;

    float s[kNS][4], ds[kNS][4];
    issue();
    scores<T, D>(s, q_s, ks);
    scores<T, D>(ds, do_s, v_s + buf * kTile);
    complete(s, ds);
    p_ds(s, ds, lse2, dl, c2, (a.causal && k0 + R > q0) || k0 + R > t, a.causal, k0, row_base, t, lane);
    // dq += ds k
    uint32_t sf[kTokenSteps][4];
    to_a<T, kNS>(sf, ds);
    issue(sf, dq);
    values<T, D>(dq, sf, ks);
    complete(dq);

    __syncthreads();  // every warp's products are done with this buffer before the next step's copies refill it
    buf ^= 1;
    k0 = k_next;
  }
  stage_tile<T, D>(q_s, dq, a.scale, warp, lane);  // q's tile is free: the barrier above
  store_tiles<D>(hi, q0, OutTile{&maps.dq, q_s});
}

}  // namespace

template <typename T, int D>
Sm90AttentionKernels sm90_attention_kernels() {
  constexpr size_t kTile = tile_bytes<D>();
  Sm90AttentionKernels k;
  k.forward = forward_kernel<T, D>;
  k.dkdv = dkdv_kernel<T, D, false>;
  if constexpr (D == 64) k.dkdv_forming_deltas = dkdv_kernel<T, D, true>;
  k.dq = dq_kernel<T, D>;
  k.dq_recompute = dq_recompute_kernel<T, D>;
  constexpr size_t kBarrier = 8;                                                    // an mbarrier
  k.forward_smem = kAlign + (1 + 2 * forward_buffers<D>()) * kTile + 3 * kBarrier;  // q, k's and v's buffers
  k.dkdv_smem = kAlign + 6 * kTile + kSm90DsTileBytes + 4 * R * sizeof(float) + 3 * kBarrier;
  k.dkdv_forming_deltas_smem = k.dkdv_smem + 2 * kTile;  // out's two buffers
  k.dq_smem = kAlign + 2 * (kSm90DsTileBytes + kTile) + 2 * kBarrier;
  k.dq_recompute_smem = kAlign + 6 * kTile + 3 * kBarrier;
  return k;
}

template <typename T>
Sm90TileMap sm90_tile_map(const void* data, const HeadStrides& s, int64_t n, int64_t heads, int64_t t, int d,
                          std::string_view op) {
  // TMA's strides are bytes, multiples of 16 (the tiled kernels' operands
  // are 16-byte aligned, attention.cu's aligned16), and a dimension of one
  // entry takes any: its coordinate is always 0.
  Sm90TileMap m;
  m.heads_dim = heads > 1 && s.head != 0 ? static_cast<int32_t>(heads) : 1;
  m.batch_dim = n / heads > 1 && s.batch != 0 ? static_cast<int32_t>(n / heads) : 1;
  const auto bytes = [](int64_t elems) { return static_cast<cuuint64_t>(elems) * 2; };
  const cuuint64_t token = t > 1 ? bytes(s.token) : 16;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(t),
                              static_cast<cuuint64_t>(m.heads_dim), static_cast<cuuint64_t>(m.batch_dim)};
  const cuuint64_t strides[3] = {token, m.heads_dim > 1 ? bytes(s.head) : token,
                                 m.batch_dim > 1 ? bytes(s.batch) : token};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(R), 1, 1};
  m.map = tensor_map_16bit<4>(data, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, tensor_map_type_16bit<T>(), op);
  return m;
}

template Sm90AttentionKernels sm90_attention_kernels<__nv_bfloat16, 64>();
template Sm90AttentionKernels sm90_attention_kernels<__half, 64>();
template Sm90AttentionKernels sm90_attention_kernels<__nv_bfloat16, 128>();
template Sm90AttentionKernels sm90_attention_kernels<__half, 128>();
template Sm90TileMap sm90_tile_map<__nv_bfloat16>(const void*, const HeadStrides&, int64_t, int64_t, int64_t, int,
                                                  std::string_view);
template Sm90TileMap sm90_tile_map<__half>(const void*, const HeadStrides&, int64_t, int64_t, int64_t, int,
                                           std::string_view);

}  // namespace coppice::cuda
