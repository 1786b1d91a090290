// Attention on CUDA (sparse/attention/attention.h), twins of cpu/attention.cc.
//
// bf16/f16 with head size 64 or 128 (and a block layout, if any, in blocks of
// a multiple of 64 tokens) run tiled kernels in the manner of
// FlashAttention-2, on mma.sync m16n8k16 tensor-core instructions with f32
// accumulation and ldmatrix fragments:
//
// - forward: a thread block takes 64 queries (a warp 16 of them, q held in
//   registers) and walks the key tiles they see, 64 keys at a time, with the
//   next tile's k and v copied (cp.async) while this one multiplies; an
//   online softmax in base 2 keeps each row's running max and sum, so no
//   [T, T] score matrix exists anywhere. Out and the row log-sum-exp are
//   written once.
// - backward: D = rowsum(dout * out) first (one warp per row), then two
//   kernels, so that no gradient is summed with atomics (the same bits on
//   every run): one thread block per 64 keys walks the query tiles that see
//   them and forms dk and dv; one per 64 queries walks the key tiles and
//   forms dq. Both recompute p = exp(s - lse) from the saved lse.
//
// Which tiles a walk visits comes from the mask alone: with `causal` the
// tiles on or below the diagonal, with a layout the kept blocks (by query
// block for the forward and dq, by key block for dk/dv), and elements are
// masked only on the diagonal tile and past T.
//
// On devices of compute capability 9.0 the same three kernels run on wgmma
// instead (attention_sm90.cu), unless the pin
// attention=mma_sync asks for these (sparse/route_choices.h); the pieces both share (walks,
// softmax, masks, stores) are attention_tiles.cuh's.
//
// Every other dtype, head size or layout block runs the CPU twin's
// arithmetic: a thread block per query (forward, dq) or per key (dk, dv),
// its scores in shared memory; slow, but the same on every device, and what
// gradcheck-sized problems and f32 jobs need.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sparse/attention/attention.h"
#include "sparse/attention/cuda/attention_sm90.h"
#include "sparse/attention/cuda/attention_tiles.cuh"
#include "sparse/route_choices.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/side_stream.h"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/warp.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

// fn(lo, hi) for each of the walk's ranges, in order.
template <typename Fn>
__device__ void for_each_range(RangeWalk walk, Fn&& fn) {
  int64_t lo, hi;
  while (walk.next(lo, hi)) fn(lo, hi);
}

// Shapes of the tiled kernels: head size D, rows staged with a pitch of D + 8
// elements (the eight rows an ldmatrix reads fall on distinct banks).
template <typename T, int D>
struct Tiles {
  static constexpr int kPitch = D + 8;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRows = 64;                 // queries (forward, dq) or keys (dk/dv) per thread block
  static constexpr int kStep = D <= 64 ? 64 : 32;  // tokens per step of the backward walks
  static constexpr int kKSteps = D / 16;           // k16 steps over the head
  static constexpr int kDTiles = D / 8;            // n8 tiles over the head
};

// Rows [row0, row0 + R) of a head's [t, D] rows, `ld` elements apart, into
// shared memory (zeros past t).
template <typename T, int D, int R, int kThreads>
__device__ __forceinline__ void stage_rows(T* sm, const T* g, int64_t row0, int64_t t, int64_t ld) {
  constexpr int kChunksPerRow = D / 8;
  for (int c = threadIdx.x; c < R * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool ok = row0 + r < t;
    copy16_async(sm + r * (D + 8) + col, g + (ok ? row0 + r : 0) * ld + col, ok);
  }
}

// a[ks] = the A fragments of 16 staged rows (from `rows`), k16 step ks.
template <int KS, int P, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[KS][4], const T* rows, int lane) {
  const T* p = rows + (lane % 16) * P + (lane / 16) * 8;
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) ldmatrix_x4<false>(a[ks], p + ks * 16);
}

// acc[NT] (16 x 8NT) += A (16 x 16KS) B, where B[k][n] = bs[n][k] (B's rows
// staged n-major, e.g. keys for q k^T).
template <typename T, int KS, int NT, int P>
__device__ __forceinline__ void mma_nk(float (&acc)[NT][4], const uint32_t (&a)[KS][4], const T* bs, int lane) {
  const T* p = bs + ((lane / 16) * 8 + lane % 8) * P + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4<false>(b, p + np * 16 * P + ks * 16);
      mma_16816<T>(acc[2 * np], a[ks], b[0], b[1]);
      mma_16816<T>(acc[2 * np + 1], a[ks], b[2], b[3]);
    }
  }
}

// acc[NT] += A B, where B[k][n] = bs[k][n] (B staged k-major, e.g. v for p v).
template <typename T, int KS, int NT, int P>
__device__ __forceinline__ void mma_kn(float (&acc)[NT][4], const uint32_t (&a)[KS][4], const T* bs, int lane) {
  const T* p = bs + (((lane / 8) % 2) * 8 + lane % 8) * P + (lane / 16) * 8;
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4<true>(b, p + ks * 16 * P + np * 16);
      mma_16816<T>(acc[2 * np], a[ks], b[0], b[1]);
      mma_16816<T>(acc[2 * np + 1], a[ks], b[2], b[3]);
    }
  }
}

// ---- forward ------------------------------------------------------------------------------------

template <typename T, int D>
__global__ void __launch_bounds__(128) flash_forward_kernel(FlashArgs a) {
  using S = Tiles<T, D>;
  constexpr int P = S::kPitch, R = S::kRows, NTK = R / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + R * P;      // two buffers
  T* v_s = k_s + 2 * R * P;  // two buffers
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const int64_t q0 = query_tile_start(t, R);
  const T* qh = static_cast<const T*>(a.q) + head_offset(a.sq, head, a.heads);
  const T* kh = static_cast<const T*>(a.k) + head_offset(a.sk, head, a.heads);
  const T* vh = static_cast<const T*>(a.v) + head_offset(a.sv, head, a.heads);

  StepWalk walk = key_walk(a, q0, R, R);
  int64_t k0 = walk.next();

  stage_rows<T, D, R, S::kThreads>(q_s, qh, q0, t, a.sq.token);
  if (k0 >= 0) {
    stage_rows<T, D, R, S::kThreads>(k_s, kh, k0, t, a.sk.token);
    stage_rows<T, D, R, S::kThreads>(v_s, vh, k0, t, a.sv.token);
  }
  commit_copies();
  wait_copies<0>();
  __syncthreads();
  uint32_t qf[S::kKSteps][4];
  load_a<S::kKSteps, P>(qf, q_s + warp * 16 * P, lane);

  float o[S::kDTiles][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float c2 = a.scale * kLog2e;
  const int64_t row_base = q0 + warp * 16 + lane / 4;
  int buf = 0;
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if (k_next >= 0) {
      stage_rows<T, D, R, S::kThreads>(k_s + (buf ^ 1) * R * P, kh, k_next, t, a.sk.token);
      stage_rows<T, D, R, S::kThreads>(v_s + (buf ^ 1) * R * P, vh, k_next, t, a.sv.token);
    }
    commit_copies();
    const T* ks = k_s + buf * R * P;
    const T* vs = v_s + buf * R * P;

    float s[NTK][4];
    zero(s);
    mma_nk<T, S::kKSteps, NTK, P>(s, qf, ks, lane);
    uint32_t pf[NTK / 2][4];
    softmax_step<T>(pf, s, o, m, l, c2, (a.causal && k0 + R > q0) || k0 + R > t, a.causal, k0, row_base, t, lane);
    mma_kn<T, NTK / 2, S::kDTiles, P>(o, pf, vs, lane);

    wait_copies<0>();
    __syncthreads();
    buf ^= 1;
    k0 = k_next;
  }

  finish_softmax(o, m, l, a.lse + head * t, row_base, t, lane);
  store_rows<T, S::kDTiles>(static_cast<T*>(a.o) + head_offset(a.so, head, a.heads), o, q0 + warp * 16, t, a.so.token,
                            1.f, lane);
}

// ---- backward -----------------------------------------------------------------------------------

// delta[n, i] = sum(dout[n, i] * out[n, i]) in f32 for the tiled path (16-bit,
// d 64 or 128, rows 16-byte aligned; the row kernels form their own, and so
// does the wgmma dk/dv for short walks, kFormDeltasMaxVisits): a
// group of d / 8 lanes per row, 16 bytes each, so a warp reads whole rows in
// 128-bit loads; the warp-a-row kernel read 2 bytes a lane and took about
// three times what the bytes need (0.5 ms of the GPT step on an H200). A
// thread block takes delta_rows<T, D>() rows of one head (blockIdx.y + n_offset), each
// thread kDeltaPasses of them, all loaded before any is summed. One row at a
// time, with a flat row index divided by t for its head, the kernel had kept
// 68 % of DRAM's rate and as much of the SMs' busy; this way it issues half
// the instructions (H200, [32, 16, 512, 64]: 21.3 -> 18.9 us; docs/
// benchmarks.md, "The row deltas in four passes"). Every lane of a warp takes
// part in the shuffles; rows past the end add nothing. The sums are the
// same, in the same order, as before.
constexpr int kDeltaThreads = 256, kDeltaPasses = 4;

// Rows a thread block takes: a row is D / (16 / sizeof(T)) lanes of 16 bytes.
template <typename T, int D>
constexpr int delta_rows() {
  return kDeltaThreads / (D / static_cast<int>(16 / sizeof(T))) * kDeltaPasses;
}

template <typename T, int D>
__global__ void __launch_bounds__(kDeltaThreads) attention_delta_kernel(FlashArgs f, float* delta) {
  constexpr int kN = 16 / sizeof(T), kGroup = D / kN, kRowsAPass = delta_rows<T, D>() / kDeltaPasses;
  static_assert(D % kN == 0 && 32 % kGroup == 0, "a row's packs must tile a warp");
  allow_dependent_launch();  // dk/dv's prologue may run under these rows (it reads no delta before it waits)
  const T* dout = static_cast<const T*>(f.dout);
  const T* out = static_cast<const T*>(f.out);
  const HeadStrides& s = f.so;
  const int64_t t = f.t;
  const int sub = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t n = blockIdx.y + f.n_offset;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * delta_rows<T, D>() + threadIdx.x / kGroup;
  const int64_t at = head_offset(s, n, f.heads) + row0 * s.token + sub * kN;
  uint4 a[kDeltaPasses], b[kDeltaPasses];
#pragma unroll
  for (int i = 0; i < kDeltaPasses; ++i) {
    const bool in = row0 + i * kRowsAPass < t;
    a[i] = in ? *reinterpret_cast<const uint4*>(dout + at + i * kRowsAPass * s.token) : uint4{};
    b[i] = in ? *reinterpret_cast<const uint4*>(out + at + i * kRowsAPass * s.token) : uint4{};
  }
#pragma unroll
  for (int i = 0; i < kDeltaPasses; ++i) {
    const float sum = row_delta<T, kGroup>(a[i], b[i]);
    const int64_t row = row0 + i * kRowsAPass;
    if (row < t && sub == 0) delta[n * t + row] = sum;
  }
}

// dk and dv of 64 keys: walks the query steps that see them.
template <typename T, int D>
__global__ void __launch_bounds__(128) flash_dkdv_kernel(FlashArgs a) {
  using S = Tiles<T, D>;
  constexpr int P = S::kPitch, R = S::kRows, QS = S::kStep, NTQ = QS / 8;
  static_assert(QS <= S::kThreads, "stage_row_stats takes a step's rows one a thread");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* k_s = reinterpret_cast<T*>(smem_raw);
  T* v_s = k_s + R * P;
  T* q_s = v_s + R * P;                                         // two buffers of QS rows
  T* do_s = q_s + 2 * QS * P;                                   // two buffers
  float* lse2_s = reinterpret_cast<float*>(do_s + 2 * QS * P);  // two buffers of QS
  float* delta_s = lse2_s + 2 * QS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * R;
  const T* qh = static_cast<const T*>(a.q) + head_offset(a.sq, head, a.heads);
  const T* doh = static_cast<const T*>(a.dout) + head_offset(a.so, head, a.heads);
  const float* lse = a.lse + head * t;
  const float* delta = a.delta + head * t;

  StepWalk walk = query_walk(a, k0, QS);
  int64_t q0 = walk.next();
  stage_rows<T, D, R, S::kThreads>(k_s, static_cast<const T*>(a.k) + head_offset(a.sk, head, a.heads), k0, t,
                                   a.sk.token);
  stage_rows<T, D, R, S::kThreads>(v_s, static_cast<const T*>(a.v) + head_offset(a.sv, head, a.heads), k0, t,
                                   a.sv.token);
  if (q0 >= 0) {
    stage_rows<T, D, QS, S::kThreads>(q_s, qh, q0, t, a.sq.token);
    stage_rows<T, D, QS, S::kThreads>(do_s, doh, q0, t, a.so.token);
    stage_row_stats(lse2_s, delta_s, lse, delta, q0, QS, t);
  }
  commit_copies();
  wait_copies<0>();
  __syncthreads();

  float dk[S::kDTiles][4], dv[S::kDTiles][4];
  zero(dk);
  zero(dv);
  const float c2 = a.scale * kLog2e;
  const int64_t key_base = k0 + warp * 16 + lane / 4;
  const T* kw = k_s + warp * 16 * P;
  const T* vw = v_s + warp * 16 * P;
  int buf = 0;
  while (q0 >= 0) {
    const int64_t q_next = walk.next();
    if (q_next >= 0) {
      stage_rows<T, D, QS, S::kThreads>(q_s + (buf ^ 1) * QS * P, qh, q_next, t, a.sq.token);
      stage_rows<T, D, QS, S::kThreads>(do_s + (buf ^ 1) * QS * P, doh, q_next, t, a.so.token);
      stage_row_stats(lse2_s + (buf ^ 1) * QS, delta_s + (buf ^ 1) * QS, lse, delta, q_next, QS, t);
    }
    commit_copies();
    const T* qs = q_s + buf * QS * P;
    const T* dos = do_s + buf * QS * P;
    const float* l2 = lse2_s + buf * QS;
    const float* dl = delta_s + buf * QS;

    // s^T = k q^T, rows: this warp's 16 keys, columns: QS queries.
    float p[NTQ][4];
    zero(p);
    {
      uint32_t kf[S::kKSteps][4];
      load_a<S::kKSteps, P>(kf, kw, lane);
      mma_nk<T, S::kKSteps, NTQ, P>(p, kf, qs, lane);
    }
    // dp^T = v dout^T
    float ds[NTQ][4];
    zero(ds);
    {
      uint32_t vf[S::kKSteps][4];
      load_a<S::kKSteps, P>(vf, vw, lane);
      mma_nk<T, S::kKSteps, NTQ, P>(ds, vf, dos, lane);
    }
    transposed_p_ds(p, ds, l2, dl, c2, a.causal && q0 < k0 + R, key_base, q0, lane);
    // dv += p^T dout
    {
      uint32_t pf[NTQ / 2][4];
      to_a<T, NTQ>(pf, p);
      mma_kn<T, NTQ / 2, S::kDTiles, P>(dv, pf, dos, lane);
    }
    // dk += ds^T q
    {
      uint32_t sf[NTQ / 2][4];
      to_a<T, NTQ>(sf, ds);
      mma_kn<T, NTQ / 2, S::kDTiles, P>(dk, sf, qs, lane);
    }

    wait_copies<0>();
    __syncthreads();
    buf ^= 1;
    q0 = q_next;
  }
  store_rows<T, S::kDTiles>(static_cast<T*>(a.dk) + head_offset(a.sdk, head, a.heads), dk, k0 + warp * 16, t,
                            a.sdk.token, a.scale, lane);
  store_rows<T, S::kDTiles>(static_cast<T*>(a.dv) + head_offset(a.sdv, head, a.heads), dv, k0 + warp * 16, t,
                            a.sdv.token, 1.f, lane);
}

// dq of 64 queries: walks the key steps they see.
template <typename T, int D>
__global__ void __launch_bounds__(128) flash_dq_kernel(FlashArgs a) {
  using S = Tiles<T, D>;
  constexpr int P = S::kPitch, R = S::kRows, KS = S::kStep, NTK = KS / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* do_s = q_s + R * P;
  T* k_s = do_s + R * P;      // two buffers of KS rows
  T* v_s = k_s + 2 * KS * P;  // two buffers
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = a.t, head = blockIdx.y + a.n_offset;
  const int64_t q0 = query_tile_start(t, R);
  const T* kh = static_cast<const T*>(a.k) + head_offset(a.sk, head, a.heads);
  const T* vh = static_cast<const T*>(a.v) + head_offset(a.sv, head, a.heads);

  StepWalk walk = key_walk(a, q0, R, KS);
  int64_t k0 = walk.next();
  stage_rows<T, D, R, S::kThreads>(q_s, static_cast<const T*>(a.q) + head_offset(a.sq, head, a.heads), q0, t,
                                   a.sq.token);
  stage_rows<T, D, R, S::kThreads>(do_s, static_cast<const T*>(a.dout) + head_offset(a.so, head, a.heads), q0, t,
                                   a.so.token);
  if (k0 >= 0) {
    stage_rows<T, D, KS, S::kThreads>(k_s, kh, k0, t, a.sk.token);
    stage_rows<T, D, KS, S::kThreads>(v_s, vh, k0, t, a.sv.token);
  }
  commit_copies();
  wait_copies<0>();
  __syncthreads();

  uint32_t qf[S::kKSteps][4], dof[S::kKSteps][4];
  load_a<S::kKSteps, P>(qf, q_s + warp * 16 * P, lane);
  load_a<S::kKSteps, P>(dof, do_s + warp * 16 * P, lane);
  const int64_t row_base = q0 + warp * 16 + lane / 4;
  float lse2[2], dl[2];
  row_stats(lse2, dl, a.lse + head * t, a.delta + head * t, row_base, t);
  float dq[S::kDTiles][4];
  zero(dq);
  const float c2 = a.scale * kLog2e;
  int buf = 0;
  while (k0 >= 0) {
    const int64_t k_next = walk.next();
    if (k_next >= 0) {
      stage_rows<T, D, KS, S::kThreads>(k_s + (buf ^ 1) * KS * P, kh, k_next, t, a.sk.token);
      stage_rows<T, D, KS, S::kThreads>(v_s + (buf ^ 1) * KS * P, vh, k_next, t, a.sv.token);
    }
    commit_copies();
    const T* ks = k_s + buf * KS * P;
    const T* vs = v_s + buf * KS * P;

    float p[NTK][4], ds[NTK][4];
    zero(p);
    zero(ds);
    mma_nk<T, S::kKSteps, NTK, P>(p, qf, ks, lane);
    mma_nk<T, S::kKSteps, NTK, P>(ds, dof, vs, lane);
    p_ds(p, ds, lse2, dl, c2, (a.causal && k0 + KS > q0) || k0 + KS > t, a.causal, k0, row_base, t, lane);
    uint32_t sf[NTK / 2][4];
    to_a<T, NTK>(sf, ds);
    mma_kn<T, NTK / 2, S::kDTiles, P>(dq, sf, ks, lane);

    wait_copies<0>();
    __syncthreads();
    buf ^= 1;
    k0 = k_next;
  }
  store_rows<T, S::kDTiles>(static_cast<T*>(a.dq) + head_offset(a.sdq, head, a.heads), dq, q0 + warp * 16, t,
                            a.sdq.token, a.scale, lane);
}

// ---- the CPU twin's arithmetic, for every other case ----------------------------------------

constexpr int kRowThreads = 128;

template <typename C>
__device__ C block_reduce(C v, C* scratch, bool is_max) {
  for (int o = 16; o > 0; o /= 2) {
    const C w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? (w > v ? w : v) : v + w;
  }
  __syncthreads();  // scratch may still be read from a previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kRowThreads / 32; ++w) v = is_max ? (scratch[w] > v ? scratch[w] : v) : v + scratch[w];
  return v;
}

template <typename C, typename T>
__device__ C dot_row(const T* a, const T* b, int64_t d) {
  C s = 0;
  for (int64_t c = 0; c < d; ++c) s += convert<C>(a[c]) * convert<C>(b[c]);
  return s;
}

// The row kernels' operands: pointers and strides as FlashArgs (typed).
template <typename T, typename L>
struct RowArgs {
  const T *q, *k, *v, *out, *dout;
  T *o, *dq, *dk, *dv;
  HeadStrides sq, sk, sv, so, sdq, sdk, sdv;
  L* lse;
  int64_t t = 0, d = 0, block = 0, heads = 1;
  double scale = 1.0;
  bool causal = false;
  const int32_t *row_ptr, *col_idx, *col_ptr, *row_idx;

  __device__ const T* row(const T* base, const HeadStrides& s, int64_t n, int64_t i) const {
    return base + head_offset(s, n, heads) + i * s.token;
  }
  __device__ T* row(T* base, const HeadStrides& s, int64_t n, int64_t i) const {
    return base + head_offset(s, n, heads) + i * s.token;
  }
};

template <typename T, typename C, typename L>
__global__ void __launch_bounds__(kRowThreads) rows_forward_kernel(RowArgs<T, L> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* s = reinterpret_cast<C*>(smem_raw);
  __shared__ C scratch[kRowThreads / 32];
  const int64_t i = blockIdx.x, n = blockIdx.y, t = a.t, d = a.d;
  const T* qi = a.row(a.q, a.sq, n, i);
  const RangeWalk keys(a.row_ptr, a.col_idx, a.block > 0 ? i / a.block : 0, a.block, 0, a.causal ? i + 1 : t);
  C m = -INFINITY;
  for_each_range(keys, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo + threadIdx.x; j < hi; j += kRowThreads) {
      s[j] = C(a.scale) * dot_row<C>(qi, a.row(a.k, a.sk, n, j), d);
      m = s[j] > m ? s[j] : m;
    }
  });
  m = block_reduce(m, scratch, true);
  C l = 0;
  for_each_range(keys, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo + threadIdx.x; j < hi; j += kRowThreads) {
      s[j] = exp(s[j] - m);
      l += s[j];
    }
  });
  l = block_reduce(l, scratch, false);  // its first __syncthreads also publishes s
  T* oi = a.row(a.o, a.so, n, i);
  for (int64_t c = threadIdx.x; c < d; c += kRowThreads) {
    C acc = 0;
    for_each_range(keys, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) acc += s[j] * convert<C>(a.row(a.v, a.sv, n, j)[c]);
    });
    oi[c] = convert<T>(l > C(0) ? acc / l : C(0));
  }
  if (threadIdx.x == 0) a.lse[n * t + i] = L(l > C(0) ? m + log(l) : C(-INFINITY));
}

// dq of query i: ds_j = p_j (dout_i . v_j - delta_i), dq = scale sum_j ds_j k_j.
template <typename T, typename C, typename L>
__global__ void __launch_bounds__(kRowThreads) rows_dq_kernel(RowArgs<T, L> a, const C* delta) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* ds = reinterpret_cast<C*>(smem_raw);
  const int64_t i = blockIdx.x, n = blockIdx.y, t = a.t, d = a.d;
  const T *qi = a.row(a.q, a.sq, n, i), *di = a.row(a.dout, a.so, n, i);
  const C li = C(a.lse[n * t + i]);
  const C dli = delta[n * t + i];
  const bool seen = li > C(-INFINITY);
  const RangeWalk keys(a.row_ptr, a.col_idx, a.block > 0 ? i / a.block : 0, a.block, 0, a.causal ? i + 1 : t);
  for_each_range(keys, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo + threadIdx.x; j < hi; j += kRowThreads) {
      const C p = seen ? exp(C(a.scale) * dot_row<C>(qi, a.row(a.k, a.sk, n, j), d) - li) : C(0);
      ds[j] = p * (dot_row<C>(di, a.row(a.v, a.sv, n, j), d) - dli);
    }
  });
  __syncthreads();
  T* dqi = a.row(a.dq, a.sdq, n, i);
  for (int64_t c = threadIdx.x; c < d; c += kRowThreads) {
    C acc = 0;
    for_each_range(keys, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) acc += ds[j] * convert<C>(a.row(a.k, a.sk, n, j)[c]);
    });
    dqi[c] = convert<T>(C(a.scale) * acc);
  }
}

// dk and dv of key j, over the queries that see it.
template <typename T, typename C, typename L>
__global__ void __launch_bounds__(kRowThreads) rows_dkdv_kernel(RowArgs<T, L> a, const C* delta) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t j = blockIdx.x, n = blockIdx.y, t = a.t, d = a.d;
  C* p = reinterpret_cast<C*>(smem_raw);
  C* ds = p + t;
  const T *kj = a.row(a.k, a.sk, n, j), *vj = a.row(a.v, a.sv, n, j);
  const RangeWalk queries(a.col_ptr, a.row_idx, a.block > 0 ? j / a.block : 0, a.block, a.causal ? j : 0, t);
  for_each_range(queries, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo + threadIdx.x; i < hi; i += kRowThreads) {
      const C li = C(a.lse[n * t + i]);
      const C pi = li > C(-INFINITY) ? exp(C(a.scale) * dot_row<C>(a.row(a.q, a.sq, n, i), kj, d) - li) : C(0);
      p[i] = pi;
      ds[i] = pi * (dot_row<C>(a.row(a.dout, a.so, n, i), vj, d) - delta[n * t + i]);
    }
  });
  __syncthreads();
  T *dkj = a.row(a.dk, a.sdk, n, j), *dvj = a.row(a.dv, a.sdv, n, j);
  for (int64_t c = threadIdx.x; c < d; c += kRowThreads) {
    C gk = 0, gv = 0;
    for_each_range(queries, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        gv += p[i] * convert<C>(a.row(a.dout, a.so, n, i)[c]);
        gk += ds[i] * convert<C>(a.row(a.q, a.sq, n, i)[c]);
      }
    });
    dkj[c] = convert<T>(C(a.scale) * gk);
    dvj[c] = convert<T>(gv);
  }
}

// delta in C for the row kernels (any d).
template <typename T, typename C, typename L>
__global__ void rows_delta_kernel(RowArgs<T, L> a, C* delta, int64_t rows) {
  COPPICE_KERNEL_LOOP(r, rows) {
    const int64_t n = r / a.t, i = r % a.t;
    delta[r] = dot_row<C>(a.row(a.dout, a.so, n, i), a.row(a.out, a.so, n, i), a.d);
  }
}

// ---- host side ----------------------------------------------------------------------------------

// At most this many (batch, head) pairs per launch (the grid's y limit).
constexpr int64_t kMaxHeadsPerLaunch = 65535;

// A [N, T, d] operand (one head per batch entry) or a [B, T, H, d] view, its
// last stride 1 (the frontends see to it).
HeadStrides strides_of(const Tensor& x) {
  const Shape& s = x.strides();
  if (x.dim() == 3) return {s[0], 0, s[1]};
  return {s[0], s[2], s[1]};
}

struct Problem {
  int64_t n = 0, t = 0, d = 0, heads = 1, block = 0;
  int64_t layout_blocks = 0;  // the blocks a layout keeps
  double scale = 1.0;
  bool causal = false;
  const int32_t *row_ptr = nullptr, *col_idx = nullptr, *col_ptr = nullptr, *row_idx = nullptr, *col_entry = nullptr;
};

Problem problem_of(const std::vector<Tensor>& in, size_t layout_at, const Attrs& attrs, std::string_view op) {
  Problem p;
  const Tensor& q = in[0];
  for (size_t i = 0; i < layout_at; ++i) {
    check_cuda_tensor(in[i], op, "an operand");
    COPPICE_CHECK(in[i].dim() < 3 || in[i].strides().back() == 1, op, ": operands need unit stride along d");
  }
  p.heads = q.dim() == 4 ? q.size(2) : 1;
  p.n = q.size(0) * p.heads;
  p.t = q.size(1);
  p.d = q.size(q.dim() - 1);
  p.scale = attrs.get_double("scale");
  p.causal = attrs.get_bool("causal");
  p.block = attrs.get_int("block");
  if (p.block > 0) {
    p.row_ptr = in[layout_at].data<int32_t>();
    p.col_idx = in[layout_at + 1].data<int32_t>();
    p.col_ptr = in[layout_at + 2].data<int32_t>();
    p.row_idx = in[layout_at + 3].data<int32_t>();
    p.col_entry = in[layout_at + 4].data<int32_t>();
    p.layout_blocks = in[layout_at + 1].numel();
  }
  return p;
}

// 16-byte aligned, and every stride a whole number of 16-byte runs.
bool aligned16(const std::vector<const Tensor*>& ts) {
  for (const Tensor* t : ts) {
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
    const HeadStrides s = strides_of(*t);
    const int64_t run = 16 / dtype_size(t->dtype());
    if (s.batch % run != 0 || s.head % run != 0 || s.token % run != 0) return false;
  }
  return true;
}

// The tiled kernels take this problem: bf16/f16, head size 64 or 128, layout
// blocks of whole 64-token tiles, 16-byte aligned operands.
bool tiled(DType dtype, const Problem& p, const std::vector<const Tensor*>& operands) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && (p.d == 64 || p.d == 128) && p.block % 64 == 0 &&
         aligned16(operands);
}

FlashArgs flash_args(const Problem& p) {
  FlashArgs a;
  a.t = p.t;
  a.block = p.block;
  a.heads = p.heads;
  a.scale = static_cast<float>(p.scale);
  a.causal = p.causal;
  a.row_ptr = p.row_ptr;
  a.col_idx = p.col_idx;
  a.col_ptr = p.col_ptr;
  a.row_idx = p.row_idx;
  a.col_entry = p.col_entry;
  return a;
}

// How a kernel starts against the one before it in its stream: once that one
// has ended (a plain launch), or overlapping its end (launch_overlapping: the
// kernel keeps grid_dependency.cuh's contract, which it states where it waits).
enum class Start { kAfter, kOverlapping };

// Launches kernel over (tiles, heads first.. first + heads) in slices of
// kMaxHeadsPerLaunch heads, with `more` after the FlashArgs (the wgmma
// kernels' tensor maps, the row deltas' output).
template <typename Kernel, typename... More>
void launch_by_heads(Kernel kernel, FlashArgs a, int64_t tiles, int64_t first, int64_t heads, size_t smem, int threads,
                     Start start, cudaStream_t stream, std::string_view op, const More&... more) {
  static_assert(std::is_pointer_v<Kernel>);
  COPPICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                     op);
  for (int64_t h0 = first; h0 < first + heads; h0 += kMaxHeadsPerLaunch) {
    a.n_offset = h0;
    const int64_t hn = std::min(kMaxHeadsPerLaunch, first + heads - h0);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(hn));
    if (start == Start::kOverlapping) {
      launch_overlapping(kernel, grid, dim3(threads), smem, stream, op, a, more...);
    } else {
      kernel<<<grid, threads, smem, stream>>>(a, more...);
      check_launch(op);
    }
  }
}

// delta for every head (out and dout from `a`), delta_rows<T, D>() rows a thread block.
template <typename T, int D>
void launch_delta(const FlashArgs& a, const Problem& p, float* delta, cudaStream_t stream, std::string_view op) {
  launch_by_heads(attention_delta_kernel<T, D>, a, (p.t + delta_rows<T, D>() - 1) / delta_rows<T, D>(), 0, p.n, 0,
                  kDeltaThreads, Start::kAfter, stream, op, delta);
}

// Whether the tiled kernels run on attention_sm90.cu's wgmma ones (every head
// size the tiled kernels take): a device of compute capability 9.0 (they are
// built for sm_90a alone), operands TMA can map (sm90_mappable), and no pin
// attention=mma_sync (sparse/route_choices.h).
bool on_wgmma(int device, const FlashArgs& a, bool backward) {
  const bool mappable = sm90_mappable(a.sq, a.t) && sm90_mappable(a.sk, a.t) && sm90_mappable(a.sv, a.t) &&
                        (!backward || sm90_mappable(a.so, a.t));
  return mappable && route_pin("attention") != "mma_sync" && runs_sm90a(device, "attention");
}

// The wgmma kernels' tensor maps: q, k, v and the forward's o, or q, k, v,
// dout and the backward's dq, dk and dv.
template <typename CT, int D>
Sm90Maps sm90_maps(const FlashArgs& a, const Problem& p, bool backward, std::string_view op) {
  auto map = [&](const void* data, const HeadStrides& s) {
    return sm90_tile_map<CT>(data, s, p.n, p.heads, p.t, D, op);
  };
  Sm90Maps m;
  m.q = map(a.q, a.sq);
  m.k = map(a.k, a.sk);
  m.v = map(a.v, a.sv);
  if (backward) {
    m.o = map(a.out, a.so);
    m.dout = map(a.dout, a.so);
    m.dq = map(a.dq, a.sdq);
    m.dk = map(a.dk, a.sdk);
    m.dv = map(a.dv, a.sdv);
  } else {
    m.o = map(a.o, a.so);
  }
  return m;
}

template <typename CT, int D>
void flash_forward(const FlashArgs& a, const Problem& p, int device, cudaStream_t stream) {
  using S = Tiles<CT, D>;
  if (on_wgmma(device, a, false)) {
    const Sm90AttentionKernels k = sm90_attention_kernels<CT, D>();
    launch_by_heads(k.forward, a, (p.t + kSm90AttentionTile - 1) / kSm90AttentionTile, 0, p.n, k.forward_smem,
                    kSm90AttentionThreads, Start::kAfter, stream, op::kAttentionForward,
                    sm90_maps<CT, D>(a, p, false, op::kAttentionForward));
    return;
  }
  const size_t smem = size_t{5} * S::kRows * S::kPitch * sizeof(CT);
  const int64_t tiles = (p.t + S::kRows - 1) / S::kRows;
  launch_by_heads(flash_forward_kernel<CT, D>, a, tiles, 0, p.n, smem, S::kThreads, Start::kAfter, stream,
                  op::kAttentionForward);
}

// The wgmma backward's dq, two ways. Up to T = kDsTilesMaxT (or pinned
// attention_dq=tiles), dk/dv writes ds as a 16-bit tile for every (key tile,
// query tile) pair a head keeps (ds_head_tiles: 288 KB a head at T 512,
// causal) and dq multiplies those by k: one product a step instead of three
// and a softmax, over slices of the heads whose tiles take at most
// kDsTilesBudget bytes, dk/dv then dq, slice after slice. Past it (or pinned
// attention_dq=recompute) dq forms ds again, beside dk/dv on a side stream,
// which keeps memory linear in T. The tiles' bytes grow with T^2 where the
// products they save grow the same way, so what decides is the walks'
// fixed cost, which the short walks of short sequences pay most. H200, bench
// attention, bf16, causal, forward + backward against forming ds again: T 512
// d 64 0.366 -> 0.342 ms, T 1024 d 128 1.079 -> 0.988, T 2048 d 64 0.99 ->
// 1.11 (1.1 GB of tiles written and read a call).
constexpr int64_t kDsTilesMaxT = 1024;
constexpr int64_t kDsTilesBudget = int64_t{256} << 20;

// The (key tile, query tile) pairs of a head its walks may visit, a ds tile
// each (attention_sm90.cu's ds_slot): a layout's kept blocks in tiles (a
// causal layout's diagonal blocks whole), so that a 75 % sparse layout's
// tiles take a quarter of a dense one's; else the triangle kt <= qt when
// causal, or every pair. With a layout the tiles had been laid out for
// every pair too, and their bytes had split the non-causal layouts at
// [16, 16, 1024, 128] into two slices of heads (H200, bench attention bf16,
// forward + backward: the 75 % window 0.4438 / 0.4559 -> 0.4259 / 0.4302 ms,
// block_sparse 0.4033 / 0.4077 -> 0.3841 / 0.3800).
int64_t ds_head_tiles(const Problem& p) {
  const int64_t tiles = (p.t + kSm90AttentionTile - 1) / kSm90AttentionTile;
  const int64_t per_block = p.block / kSm90AttentionTile;
  if (p.block > 0) return p.layout_blocks * per_block * per_block;
  return p.causal ? tiles * (tiles + 1) / 2 : tiles * tiles;
}

// On the route of ds tiles, dk/dv at head size 64 forms the row deltas
// itself where a query tile's walk is short: on average at most
// kFormDeltasMaxVisits key tiles for each query tile (ds_head_tiles). Each
// visit forms that query tile's deltas again (out's 8 KB tile from L2 and
// about 200 instructions a warp), where the row-delta kernel reads dout and
// out from HBM once and is a launch of its own. H200, bench attention bf16,
// [32, 16, 512, 64] forward + backward, formed against the row-delta
// kernel's: the 75 % window (2 visits) 0.1849 -> 0.1747 ms, block_sparse
// (2.25) 0.1878 -> 0.1825; formed everywhere, causal (4.5) 0.2529 -> 0.2612
// and full (8) 0.384 -> 0.420.
constexpr double kFormDeltasMaxVisits = 2.5;

// The backward of the tiled kernels (a.lse set; dq, dk and dv written).
// The row deltas are launch_delta's, in a tensor of their own, except
// where the wgmma dk/dv forms them (kFormDeltasMaxVisits).
template <typename CT, int D>
void flash_backward(FlashArgs a, const Problem& p, int device, cudaStream_t stream) {
  using S = Tiles<CT, D>;
  constexpr std::string_view op = op::kAttentionBackward;
  Tensor delta;
  auto row_deltas = [&] {
    delta = Tensor::empty({p.n, p.t}, TensorOptions(DType::kF32, Device::cuda(device)));
    a.delta = delta.data<float>();
    launch_delta<CT, D>(a, p, delta.data<float>(), stream, op);
  };
  if (on_wgmma(device, a, true)) {
    const Sm90AttentionKernels k = sm90_attention_kernels<CT, D>();
    const Sm90Maps maps = sm90_maps<CT, D>(a, p, true, op);
    const int64_t tiles = (p.t + kSm90AttentionTile - 1) / kSm90AttentionTile;
    const int64_t head_tiles = ds_head_tiles(p), head_bytes = head_tiles * kSm90DsTileBytes;
    const std::optional<std::string> pin = route_pin("attention_dq");
    const bool ds_tiles = head_bytes <= kDsTilesBudget && (pin ? *pin == "tiles" : p.t <= kDsTilesMaxT);
    const bool forming_deltas = ds_tiles && k.dkdv_forming_deltas != nullptr &&
                                static_cast<double>(head_tiles) <= kFormDeltasMaxVisits * static_cast<double>(tiles);
    if (!forming_deltas) row_deltas();
    if (!ds_tiles) {
      SideBranch side(device, stream, op);
      launch_by_heads(k.dkdv, a, tiles, 0, p.n, k.dkdv_smem, kSm90AttentionThreads, Start::kOverlapping, stream, op,
                      maps);
      launch_by_heads(k.dq_recompute, a, tiles, 0, p.n, k.dq_recompute_smem, kSm90AttentionThreads, Start::kAfter,
                      side.stream(), op, maps);
      side.join();
      return;
    }
    const int64_t slice = head_bytes == 0 ? p.n : std::min(p.n, kDsTilesBudget / head_bytes);  // (a layout of none)
    Tensor ds = Tensor::empty({slice * head_bytes}, TensorOptions(DType::kU8, Device::cuda(device)));
    FlashArgs b = a;
    b.ds = ds.data_ptr();
    b.ds_head_tiles = head_tiles;
    const auto dkdv = forming_deltas ? k.dkdv_forming_deltas : k.dkdv;
    const size_t dkdv_smem = forming_deltas ? k.dkdv_forming_deltas_smem : k.dkdv_smem;
    for (int64_t h0 = 0; h0 < p.n; h0 += slice) {
      const int64_t hn = std::min(slice, p.n - h0);
      b.ds_first = h0;
      // dk/dv overlaps the row deltas' kernel or the last slice's dq; the
      // first one forming its deltas follows whatever wrote dout, after it.
      const Start start = h0 == 0 && forming_deltas ? Start::kAfter : Start::kOverlapping;
      launch_by_heads(dkdv, b, tiles, h0, hn, dkdv_smem, kSm90AttentionThreads, start, stream, op, maps);
      launch_by_heads(k.dq, b, tiles, h0, hn, k.dq_smem, kSm90AttentionThreads, Start::kOverlapping, stream, op, maps);
    }
    return;
  }
  row_deltas();
  const int64_t tiles = (p.t + S::kRows - 1) / S::kRows;
  const size_t tiles_smem = (size_t{2} * S::kRows + size_t{4} * S::kStep) * S::kPitch * sizeof(CT);
  launch_by_heads(flash_dkdv_kernel<CT, D>, a, tiles, 0, p.n, tiles_smem + size_t{4} * S::kStep * sizeof(float),
                  S::kThreads, Start::kAfter, stream, op);
  launch_by_heads(flash_dq_kernel<CT, D>, a, tiles, 0, p.n, tiles_smem, S::kThreads, Start::kAfter, stream, op);
}

// Shared memory of the row kernels: `arrays` score rows of t values of C.
template <typename C>
size_t row_smem(const Problem& p, int arrays, std::string_view op) {
  const size_t bytes = static_cast<size_t>(arrays) * static_cast<size_t>(p.t) * sizeof(C);
  constexpr size_t kLimit = 96 * 1024;
  COPPICE_CHECK(bytes <= kLimit, op, ": T = ", p.t, " is too long for the ", dtype_name(dtype_of<C>()),
                " kernel of head size ", p.d, " (it keeps ", arrays,
                " rows of T scores in 96 KB of shared memory); "
                "bf16 or f16 with head size 64 or 128 has no such limit");
  return bytes;
}

template <typename T, typename L>
RowArgs<T, L> row_args(const Problem& p, const FlashArgs& f) {
  RowArgs<T, L> a{static_cast<const T*>(f.q),   static_cast<const T*>(f.k),    static_cast<const T*>(f.v),
                  static_cast<const T*>(f.out), static_cast<const T*>(f.dout), static_cast<T*>(f.o),
                  static_cast<T*>(f.dq),        static_cast<T*>(f.dk),         static_cast<T*>(f.dv)};
  a.sq = f.sq;
  a.sk = f.sk;
  a.sv = f.sv;
  a.so = f.so;
  a.sdq = f.sdq;
  a.sdk = f.sdk;
  a.sdv = f.sdv;
  a.t = p.t;
  a.d = p.d;
  a.block = p.block;
  a.heads = p.heads;
  a.scale = p.scale;
  a.causal = p.causal;
  a.row_ptr = p.row_ptr;
  a.col_idx = p.col_idx;
  a.col_ptr = p.col_ptr;
  a.row_idx = p.row_idx;
  return a;
}

template <typename Kernel, typename... Args>
void launch_rows(Kernel kernel, const Problem& p, size_t smem, cudaStream_t stream, std::string_view op, Args... args) {
  COPPICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                     op);
  COPPICE_CHECK(p.n <= kMaxHeadsPerLaunch, op, ": at most ", kMaxHeadsPerLaunch, " (batch x heads) for head size ", p.d,
                ", got ", p.n);
  kernel<<<dim3(static_cast<unsigned>(p.t), static_cast<unsigned>(p.n)), kRowThreads, smem, stream>>>(args...);
  check_launch(op);
}

// inputs: q, k, v, then the block pattern's walks (or none).
std::vector<Tensor> attention_forward(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kAttentionForward;
  check_inputs(in, 3 + kAttentionWalks, op);
  const Problem p = problem_of(in, 3, attrs, op);
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  Tensor out = Tensor::empty(q.shape(), q.options());
  Tensor lse =
      Tensor::empty({p.n, p.t}, TensorOptions(q.dtype() == DType::kF64 ? DType::kF64 : DType::kF32, q.device()));
  if (p.n == 0) return {out, lse};
  DeviceGuard guard(q.device().index);
  cudaStream_t stream = current_stream(q.device().index);
  FlashArgs a = flash_args(p);
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.o = out.data_ptr();
  a.sq = strides_of(q);
  a.sk = strides_of(k);
  a.sv = strides_of(v);
  a.so = strides_of(out);
  if (tiled(q.dtype(), p, {&q, &k, &v, &out})) {
    a.lse = lse.data<float>();
    auto run = [&](auto tag) {
      using CT = typename decltype(tag)::type;
      if (p.d == 64) {
        flash_forward<CT, 64>(a, p, q.device().index, stream);
      } else {
        flash_forward<CT, 128>(a, p, q.device().index, stream);
      }
    };
    if (q.dtype() == DType::kBF16) {
      run(TypeTag<__nv_bfloat16>{});
    } else {
      run(TypeTag<__half>{});
    }
    return {out, lse};
  }
  dispatch_floating(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    RowArgs<T, L> r = row_args<T, L>(p, a);
    r.lse = lse.data<L>();
    launch_rows(rows_forward_kernel<T, C, L>, p, row_smem<C>(p, 1, op), stream, op, r);
  });
  return {out, lse};
}

// inputs: q, k, v, out, lse, dout, dq, dk, dv (written in place: the
// frontend chooses their layout), then the block pattern's walks.
std::vector<Tensor> attention_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kAttentionBackward;
  check_inputs(in, 9 + kAttentionWalks, op);
  const Problem p = problem_of(in, 9, attrs, op);
  const Tensor &q = in[0], &k = in[1], &v = in[2], &out = in[3], &lse = in[4], &dout = in[5];
  const Tensor &dq = in[6], &dk = in[7], &dv = in[8];
  if (p.n == 0) return {dq, dk, dv};
  COPPICE_CHECK(out.strides() == dout.strides(), op, ": out and dout must be laid out alike");
  DeviceGuard guard(q.device().index);
  cudaStream_t stream = current_stream(q.device().index);
  const int64_t rows = p.n * p.t;
  FlashArgs a = flash_args(p);
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.out = out.data_ptr();
  a.dout = dout.data_ptr();
  a.dq = dq.data_ptr();
  a.dk = dk.data_ptr();
  a.dv = dv.data_ptr();
  a.sq = strides_of(q);
  a.sk = strides_of(k);
  a.sv = strides_of(v);
  a.so = strides_of(out);
  a.sdq = strides_of(dq);
  a.sdk = strides_of(dk);
  a.sdv = strides_of(dv);
  if (tiled(q.dtype(), p, {&q, &k, &v, &out, &dout, &dq, &dk, &dv})) {
    a.lse = const_cast<float*>(lse.data<float>());
    auto run = [&](auto tag) {
      using CT = typename decltype(tag)::type;
      if (p.d == 64) {
        flash_backward<CT, 64>(a, p, q.device().index, stream);
      } else {
        flash_backward<CT, 128>(a, p, q.device().index, stream);
      }
    };
    if (q.dtype() == DType::kBF16) {
      run(TypeTag<__nv_bfloat16>{});
    } else {
      run(TypeTag<__half>{});
    }
    return {dq, dk, dv};
  }
  dispatch_floating(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    Tensor delta = Tensor::empty({p.n, p.t}, TensorOptions(dtype_of<C>(), q.device()));
    RowArgs<T, L> r = row_args<T, L>(p, a);
    r.lse = const_cast<L*>(lse.data<L>());
    rows_delta_kernel<T, C, L><<<grid_for(rows), kThreads, 0, stream>>>(r, delta.data<C>(), rows);
    check_launch(op);
    const C* dl = delta.data<C>();
    launch_rows(rows_dq_kernel<T, C, L>, p, row_smem<C>(p, 1, op), stream, op, r, dl);
    launch_rows(rows_dkdv_kernel<T, C, L>, p, row_smem<C>(p, 2, op), stream, op, r, dl);
  });
  return {dq, dk, dv};
}

const KernelRegistrar kForward(op::kAttentionForward, DeviceType::kCuda, attention_kernel_formats(3, false),
                               attention_forward);
const KernelRegistrar kForwardLayout(op::kAttentionForward, DeviceType::kCuda, attention_kernel_formats(3, true),
                                     attention_forward);
const KernelRegistrar kBackward(op::kAttentionBackward, DeviceType::kCuda, attention_kernel_formats(9, false),
                                attention_backward);
const KernelRegistrar kBackwardLayout(op::kAttentionBackward, DeviceType::kCuda, attention_kernel_formats(9, true),
                                      attention_backward);

}  // namespace
}  // namespace coppice::cuda
