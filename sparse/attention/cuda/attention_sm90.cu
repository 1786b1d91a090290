// Attention's tiled kernels on Hopper's warpgroup MMA (attention_sm90.h),
// head size 64, bf16 and f16: FlashAttention-2's scheme as in attention.cu
// (forward with an online softmax; dk/dv by key tile and dq by query tile, so
// that nothing is summed with atomics), with every product on wgmma.
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
// (forward, dq) or keys (dk/dv) of one head. The operand fixed for its whole
// walk (q; k and v; q and dout) stays in shared memory and is read into
// registers as wgmma's A fragments (the same per-warp layout as mma.sync's
// A) at every step: held in registers across the loop, ptxas (CUDA 13.0)
// gave those registers to other values after the first product that read
// them, and every step after the first multiplied garbage (the tests' walks
// of two or more tiles caught it). p and ds are converted from the
// accumulators as FlashAttention-2 does, so every product is A from
// registers times a 64 x 64 B tile in shared memory. Tiles are staged
// by cp.async, double-buffered, in the 128-byte swizzle (wgmma.cuh): one
// layout serves q k^T (B = k, K-major) and p v (B = v, MN-major, read with
// the transpose flag) alike. The walks, the softmax and the masks are
// attention_tiles.cuh's, shared with the mma.sync kernels. Several thread
// blocks share an SM (41-51 KB of shared memory each), so one block's
// softmax overlaps another's products. Overlapping them inside a block as
// FlashAttention-3 does (the next tile's q k^T issued before this tile's
// exponentials, two score tiles in registers) measured slower at the GPT's
// shape (H200, [32, 16, 512, 64] causal bf16 forward: 0.138-0.155 ms
// against 0.116): 168-238 registers a thread let two or three blocks share
// an SM instead of four, and the walks are 1-8 tiles long.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "sparse/attention/cuda/attention_sm90.h"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/wgmma.cuh"

namespace coppice::cuda {
namespace {

constexpr int R = kSm90AttentionTile;  // tokens per tile
constexpr int D = kSm90AttentionHead;  // a tile row is 128 bytes, one swizzle row
constexpr int kThreads = kSm90AttentionThreads;
constexpr int kTileBytes = R * D * 2;
constexpr int kNT = 64 / 8;   // n8 fragments across a 64-wide result
constexpr int kKS = 64 / 16;  // k16 steps over 64
constexpr int kAlign = 1024;  // swizzle atoms start 1024-aligned

static_assert(R == 64 && D == 64 && kThreads == 128, "one warpgroup, 16 rows a warp, 128-byte rows");

// Dynamic shared memory from its first 1024-aligned byte (the size asks for the slack).
__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* raw) {
  return raw + ((kAlign - (smem_u32(raw) & (kAlign - 1))) & (kAlign - 1));
}

// Rows [row0, row0 + 64) of a head's [t, 64] rows (`ld` elements apart) into
// a swizzled tile, zeros past t.
template <typename T>
__device__ __forceinline__ void stage_tile(unsigned char* tile, const T* g, int64_t row0, int64_t t, int64_t ld) {
#pragma unroll
  for (int i = 0; i < R * 8 / kThreads; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads, r = c / 8, chunk = c % 8;
    const bool ok = row0 + r < t;
    copy16_async(tile + sw128_offset(r, chunk), g + (ok ? row0 + r : 0) * ld + chunk * 8, ok);
  }
}

// This warp's A fragments (16 rows by 64) of a swizzled tile, one per k16 step.
__device__ __forceinline__ void load_a(uint32_t (&a)[kKS][4], const unsigned char* tile, int warp, int lane) {
  const int r = warp * 16 + lane % 16;
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4<false>(a[ks], tile + sw128_offset(r, 2 * ks + lane / 16));
}

// Issues acc (64 x 64) = A * B, or += with kAccumulate: A the warps'
// fragments a (64 x 64), B from the swizzled tile at shared address b
// (kTransB false: the tile's rows are B's columns, as q k^T with b holding k;
// true: its rows are B's rows, as p v with b holding v). The caller pins the
// registers and fences before (issue) and commits, waits and pins after.
template <typename T, bool kTransB, bool kAccumulate>
__device__ __forceinline__ void product(float (&acc)[kNT][4], const uint32_t (&a)[kKS][4], const unsigned char* b) {
  const uint64_t desc = sw128_desc(smem_u32(b));
  auto step = [&](int ks) { return desc_advance(desc, kTransB ? ks * 16 * 128 : ks * 32); };
  wgmma_64x64_rs<T, kTransB, kAccumulate>(acc, a[0], step(0));
#pragma unroll
  for (int ks = 1; ks < kKS; ++ks) wgmma_64x64_rs<T, kTransB, true>(acc, a[ks], step(ks));
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

// The copies this thread issued have landed, are visible to wgmma, and every
// thread of the block is past its reads of the buffers the next copies fill.
__device__ __forceinline__ void copies_landed() {
  wait_copies<0>();
  fence_proxy_async();
  __syncthreads();
}

template <typename T>
__device__ __forceinline__ const T* operand(const void* base, const HeadStrides& s, int64_t head, int64_t heads) {
  return static_cast<const T*>(base) + head_offset(s, head, heads);
}

// ---- forward ------------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreads) forward_kernel(FlashArgs a) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* q_s = aligned_smem(smem_raw);
  unsigned char* k_s = q_s + kTileBytes;      // two buffers
  unsigned char* v_s = k_s + 2 * kTileBytes;  // two buffers
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const int64_t q0 = query_tile_start(t, R);
  const T* qh = operand<T>(a.q, a.sq, head, a.heads);
  const T* kh = operand<T>(a.k, a.sk, head, a.heads);
  const T* vh = operand<T>(a.v, a.sv, head, a.heads);

  StepWalk walk = key_walk(a, q0, R, R);
  int64_t k0 = walk.next();
  stage_tile(q_s, qh, q0, t, a.sq.token);
  if (k0 >= 0) {
    stage_tile(k_s, kh, k0, t, a.sk.token);
    stage_tile(v_s, vh, k0, t, a.sv.token);
  }
  commit_copies();
  copies_landed();

  float o[kNT][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float c2 = a.scale * kLog2e;
  const int64_t row_base = q0 + warp * 16 + lane / 4;
  int buf = 0;
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if (k_next >= 0) {
      stage_tile(k_s + (buf ^ 1) * kTileBytes, kh, k_next, t, a.sk.token);
      stage_tile(v_s + (buf ^ 1) * kTileBytes, vh, k_next, t, a.sv.token);
    }
    commit_copies();

    uint32_t qf[kKS][4];
    load_a(qf, q_s, warp, lane);  // every step: see the top of the file
    float s[kNT][4];
    issue(qf);
    product<T, false, false>(s, qf, k_s + buf * kTileBytes);
    complete(s);
    uint32_t pf[kKS][4];
    softmax_step<T>(pf, s, o, m, l, c2, (a.causal && k0 + R > q0) || k0 + R > t, a.causal, k0, row_base, t, lane);
    issue(pf, o);
    product<T, true, true>(o, pf, v_s + buf * kTileBytes);
    complete(o);

    copies_landed();
    buf ^= 1;
    k0 = k_next;
  }
  finish_softmax(o, m, l, a.lse + head * t, row_base, t, lane);
  store_rows<T, kNT>(static_cast<T*>(a.o) + head_offset(a.so, head, a.heads), o, q0 + warp * 16, t, a.so.token, 1.f,
                     lane);
}

// ---- backward: dk and dv of 64 keys, over the query steps that see them ---------------------------

// Three thread blocks an SM (168 registers a thread, 88 bytes of them
// spilled): forward + backward at [32, 16, 512, 64] took 0.460 ms against
// 0.481 with two blocks and no spill (H200).
template <typename T>
__global__ void __launch_bounds__(kThreads, 3) dkdv_kernel(FlashArgs a) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* k_s = aligned_smem(smem_raw);
  unsigned char* v_s = k_s + kTileBytes;
  unsigned char* q_s = v_s + kTileBytes;                            // two buffers
  unsigned char* do_s = q_s + 2 * kTileBytes;                       // two buffers
  float* lse2_s = reinterpret_cast<float*>(do_s + 2 * kTileBytes);  // two buffers of R
  float* delta_s = lse2_s + 2 * R;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * R;
  const T* qh = operand<T>(a.q, a.sq, head, a.heads);
  const T* doh = operand<T>(a.dout, a.so, head, a.heads);
  const float* lse = a.lse + head * t;
  const float* delta = a.delta + head * t;

  StepWalk walk = query_walk(a, k0, R);
  int64_t q0 = walk.next();
  stage_tile(k_s, operand<T>(a.k, a.sk, head, a.heads), k0, t, a.sk.token);
  stage_tile(v_s, operand<T>(a.v, a.sv, head, a.heads), k0, t, a.sv.token);
  if (q0 >= 0) {
    stage_tile(q_s, qh, q0, t, a.sq.token);
    stage_tile(do_s, doh, q0, t, a.so.token);
    stage_row_stats(lse2_s, delta_s, lse, delta, q0, R, t);
  }
  commit_copies();
  copies_landed();

  float dk[kNT][4], dv[kNT][4];
  zero(dk);
  zero(dv);
  const float c2 = a.scale * kLog2e;
  const int64_t key_base = k0 + warp * 16 + lane / 4;
  int buf = 0;
  while (q0 >= 0) {
    const int64_t q_next = walk.next();
    if (q_next >= 0) {
      stage_tile(q_s + (buf ^ 1) * kTileBytes, qh, q_next, t, a.sq.token);
      stage_tile(do_s + (buf ^ 1) * kTileBytes, doh, q_next, t, a.so.token);
      stage_row_stats(lse2_s + (buf ^ 1) * R, delta_s + (buf ^ 1) * R, lse, delta, q_next, R, t);
    }
    commit_copies();
    const unsigned char* qs = q_s + buf * kTileBytes;
    const unsigned char* dos = do_s + buf * kTileBytes;

    // s^T = k q^T and dp^T = v dout^T: rows this block's keys, columns the step's queries.
    uint32_t kf[kKS][4], vf[kKS][4];
    load_a(kf, k_s, warp, lane);
    load_a(vf, v_s, warp, lane);
    float p[kNT][4], ds[kNT][4];
    issue(kf, vf);
    product<T, false, false>(p, kf, qs);
    product<T, false, false>(ds, vf, dos);
    complete(p, ds);
    transposed_p_ds(p, ds, lse2_s + buf * R, delta_s + buf * R, c2, a.causal && q0 < k0 + R, key_base, q0, lane);
    // dv += p^T dout, dk += ds^T q
    uint32_t pf[kKS][4], sf[kKS][4];
    to_a<T, kNT>(pf, p);
    to_a<T, kNT>(sf, ds);
    issue(pf, sf, dv, dk);
    product<T, true, true>(dv, pf, dos);
    product<T, true, true>(dk, sf, qs);
    complete(dv, dk);

    copies_landed();
    buf ^= 1;
    q0 = q_next;
  }
  store_rows<T, kNT>(static_cast<T*>(a.dk) + head_offset(a.sdk, head, a.heads), dk, k0 + warp * 16, t, a.sdk.token,
                     a.scale, lane);
  store_rows<T, kNT>(static_cast<T*>(a.dv) + head_offset(a.sdv, head, a.heads), dv, k0 + warp * 16, t, a.sdv.token, 1.f,
                     lane);
}

// ---- backward: dq of 64 queries, over the key steps they see ----------------------------------------

// Three thread blocks an SM: at most 168 registers a thread.
template <typename T>
__global__ void __launch_bounds__(kThreads, 3) dq_kernel(FlashArgs a) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* q_s = aligned_smem(smem_raw);
  unsigned char* do_s = q_s + kTileBytes;
  unsigned char* k_s = do_s + kTileBytes;     // two buffers
  unsigned char* v_s = k_s + 2 * kTileBytes;  // two buffers
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const int64_t q0 = query_tile_start(t, R);
  const T* kh = operand<T>(a.k, a.sk, head, a.heads);
  const T* vh = operand<T>(a.v, a.sv, head, a.heads);

  StepWalk walk = key_walk(a, q0, R, R);
  int64_t k0 = walk.next();
  stage_tile(q_s, operand<T>(a.q, a.sq, head, a.heads), q0, t, a.sq.token);
  stage_tile(do_s, operand<T>(a.dout, a.so, head, a.heads), q0, t, a.so.token);
  if (k0 >= 0) {
    stage_tile(k_s, kh, k0, t, a.sk.token);
    stage_tile(v_s, vh, k0, t, a.sv.token);
  }
  commit_copies();
  copies_landed();
  const int64_t row_base = q0 + warp * 16 + lane / 4;
  float lse2[2], dl[2];
  row_stats(lse2, dl, a.lse + head * t, a.delta + head * t, row_base, t);
  float dq[kNT][4];
  zero(dq);
  const float c2 = a.scale * kLog2e;
  int buf = 0;
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if (k_next >= 0) {
      stage_tile(k_s + (buf ^ 1) * kTileBytes, kh, k_next, t, a.sk.token);
      stage_tile(v_s + (buf ^ 1) * kTileBytes, vh, k_next, t, a.sv.token);
    }
    commit_copies();
    const unsigned char* ks = k_s + buf * kTileBytes;

    uint32_t qf[kKS][4], dof[kKS][4];
    load_a(qf, q_s, warp, lane);
    load_a(dof, do_s, warp, lane);
    float s[kNT][4], ds[kNT][4];
    issue(qf, dof);
    product<T, false, false>(s, qf, ks);
    product<T, false, false>(ds, dof, v_s + buf * kTileBytes);
    complete(s, ds);
    p_ds(s, ds, lse2, dl, c2, (a.causal && k0 + R > q0) || k0 + R > t, a.causal, k0, row_base, t, lane);
    // dq += ds k
    uint32_t sf[kKS][4];
    to_a<T, kNT>(sf, ds);
    issue(sf, dq);
    product<T, true, true>(dq, sf, ks);
    complete(dq);

    copies_landed();
    buf ^= 1;
    k0 = k_next;
  }
  store_rows<T, kNT>(static_cast<T*>(a.dq) + head_offset(a.sdq, head, a.heads), dq, q0 + warp * 16, t, a.sdq.token,
                     a.scale, lane);
}

}  // namespace

template <typename T>
Sm90AttentionKernels sm90_attention_kernels() {
  Sm90AttentionKernels k;
  k.forward = forward_kernel<T>;
  k.dkdv = dkdv_kernel<T>;
  k.dq = dq_kernel<T>;
  k.forward_smem = kAlign + 5 * kTileBytes;
  k.dkdv_smem = kAlign + 6 * kTileBytes + 4 * R * sizeof(float);
  k.dq_smem = kAlign + 6 * kTileBytes;
  return k;
}

template Sm90AttentionKernels sm90_attention_kernels<__nv_bfloat16>();
template Sm90AttentionKernels sm90_attention_kernels<__half>();

}  // namespace coppice::cuda
