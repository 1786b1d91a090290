// 2:4 products on sparse tensor cores through mma.sp (nm24_mma.h), and the
// kernels that build the operand they read.
//
// The product, out [m, rows] = x [m, cols] @ S^T with S 2:4 along cols. The
// sparse operand of mma.sp is A, so S's rows are the instruction's M and x's
// rows its N: a thread block owns kTileR rows of S by kTileM rows of x and
// walks cols in steps of 64 (32 stored values and four metadata words per row
// of S), three steps in flight through a cp.async ring. Four warps each hold
// a 64 x 64 tile of the result (4 x 8 instructions of m16n8k32, 128 f32
// accumulators per thread). Per k32 step a warp loads its A fragments (the
// 16 x 16 stored values of 16 rows, which is the dense m16n8k16 A fragment,
// by ldmatrix), its B fragments (8 rows of x by 32 columns per ldmatrix.x4:
// registers b0..b3 hold columns 0-7, 8-15, 16-23, 24-31 of the lane's row)
// and one metadata register per m16 tile.
//
// The metadata register (PTX ISA, "Sparse matrix storage" and the metadata
// figure of m16n8k32 with 16-bit types): with sparsity selector 0, lanes 4g
// and 4g + 1 of each quad supply it; lane 4g + p holds, in its low 16 bits, the
// word of row g and columns 16p..16p+15 of the k32 step, and in its high 16
// bits the word of row g + 8, same columns. Lanes 4g + 2 and 4g + 3 load the
// same words; the instruction ignores them. tools/device/experiments/
// mma_sp_rate.cu checks this layout against the other candidate on a GPU.
//
// What it can reach: on Hopper mma.sp peaks at 1.08x cuBLAS's dense bf16 rate
// (sparse wgmma, not written here, at 1.78x), so spmm.cc times this kernel
// against cuBLAS on the decompressed weight and keeps the faster (on the
// H200, cuBLAS: docs/benchmarks.md, issue 19); on sm_80 mma.sp is the faster
// tensor-core path.
//
// The write-out goes through shared memory, transposed (the accumulators hold
// rows of S by rows of x), so that each thread stores 16-byte runs of out's
// rows with the bias and relu applied. Rows of S or x beyond the matrix are
// staged as zeros (with valid metadata), and their results are not stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "sparse/cuda/gelu_write_out.cuh"
#include "sparse/cuda/nm24_mma.h"
#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/mma_sync.cuh"

namespace coppice::sparse_cuda {
namespace {

using cuda::commit_copies;
using cuda::copy16_async;
using cuda::smem_u32;
using cuda::wait_copies;

constexpr int kTileR = 128;    // rows of S per thread block
constexpr int kTileM = 128;    // rows of x per thread block
constexpr int kStep = 64;      // columns of S (dense) per pipeline step
constexpr int kStages = 3;     // steps in flight
constexpr int kThreads = 128;  // four warps, 2 x 2 over the tile
constexpr int kWarpR = 64, kWarpM = 64;
// Staged rows are unpadded, their 16-byte chunks XOR-swizzled: chunk c of a
// row of x (128 bytes) sits at c ^ (row % 8), chunk c of a row of S's values
// (64 bytes, two rows per 128-byte line) at c ^ (row / 2 % 4). An ldmatrix's
// eight rows then fall on distinct banks, and each warp's cp.async writes
// whole 128-byte lines. Rows padded to 80 and 144 bytes instead cost the
// writes 3.75x and 2.6x their ideal wavefronts, about half the kernel's
// shared-memory traffic (Nsight Compute source counters, H200).
constexpr int kPitchA = kStep / 2;     // stored values per staged row of S (64 bytes)
constexpr int kPitchX = kStep;         // elements per staged row of x (128 bytes)
constexpr int kWords = kStep / 16;     // metadata words per row and step
constexpr int kPitchOut = kTileR + 4;  // f32 per row of the write-out tile
// The metadata of a padding row: indices (0, 1) in every group, valid for the
// instruction; its values are zero.
constexpr uint64_t kPadMeta = 0x4444444444444444ull;

static_assert(kNm24StepCols == kStep, "the header's step is the kernel's");

template <typename T>
struct Stage {
  T a[kTileR * kPitchA];
  T x[kTileM * kPitchX];
  uint16_t meta[kTileR * kWords];
};

constexpr size_t kSmemBytes = kStages * sizeof(Stage<__half>);
static_assert(kTileM * kPitchOut * sizeof(float) <= kSmemBytes, "the write-out tile fits in the ring");

// c (16x8, f32) += a (16x32, 2:4: 16x16 stored) * b (32x8), metadata e.
template <typename T>
__device__ __forceinline__ void mma_sp_16832(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                             uint32_t e) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  } else {
    asm volatile(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
}

// ldmatrix .x4 (not transposed) at a shared-memory address.
__device__ __forceinline__ void ldmatrix_x4_at(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// A 16-bit word of shared memory, zero-extended.
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr) : "memory");
  return v;
}

// 8 bytes from global to shared memory, asynchronously (cp.async.cg takes
// only 16; .ca takes 4, 8 and 16).
__device__ __forceinline__ void copy8_async(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(src));
}

// What one thread copies at every step, worked out once: its first run of S
// (row tid / 4 + 32 i, run tid % 4 of 8 stored values; i < 4), of x (row
// tid / 8 + 16 i, run tid % 8; i < 8) and its row of metadata words (row
// tid), as pointers that advance by one step's columns per call; which of
// those rows lie inside the matrices. A row outside is copied with size 0
// (cp.async then reads nothing and writes zeros), so its address need not be
// valid. Working out 64-bit addresses and their selects per copy took 160
// instructions a step, more than the step's 64 mma.sp (SASS, H200).
template <typename T>
struct Loader {
  const T* a;
  const T* x;
  const uint16_t* meta;
  int64_t row_stride;  // 32 rows of S's values, or 16 rows of x: both 16 cols elements
  uint32_t a_valid = 0, x_valid = 0;
  bool meta_valid;
  int a_dst, x_dst;  // element offsets of the first runs in a stage

  __device__ Loader(const Nm24ProductArgs<T>& p, int64_t r0, int64_t m0, int tid) {
    const int64_t a_row = r0 + tid / 4, x_row = m0 + tid / 8;
    a = p.values + a_row * (p.cols / 2) + (tid % 4) * 8;
    x = p.x + x_row * p.cols + (tid % 8) * 8;
    meta = p.meta + (r0 + tid) * (p.cols / 16);
    row_stride = 16 * p.cols;
#pragma unroll
    for (int i = 0; i < 4; ++i) a_valid |= (a_row + 32 * i < p.rows ? 1u : 0u) << i;
#pragma unroll
    for (int i = 0; i < 8; ++i) x_valid |= (x_row + 16 * i < p.m ? 1u : 0u) << i;
    meta_valid = r0 + tid < p.rows;
    // Rows tid / 4 + 32 i share (row / 2) % 4, rows tid / 8 + 16 i share row % 8.
    a_dst = (tid / 4) * kPitchA + ((tid % 4) ^ ((tid / 8) % 4)) * 8;
    x_dst = (tid / 8) * kPitchX + ((tid % 8) ^ ((tid / 8) % 8)) * 8;
  }

  // The next step into stage `st`.
  __device__ __forceinline__ void stage(Stage<T>& st, int tid) {
    const T* src = a;
#pragma unroll
    for (int i = 0; i < 4; ++i, src += row_stride)
      copy16_async(&st.a[a_dst + i * 32 * kPitchA], src, (a_valid >> i) & 1u);
    src = x;
#pragma unroll
    for (int i = 0; i < 8; ++i, src += row_stride)
      copy16_async(&st.x[x_dst + i * 16 * kPitchX], src, (x_valid >> i) & 1u);
    uint16_t* dst = &st.meta[tid * kWords];
    if (meta_valid) {
      copy8_async(dst, meta);
    } else {
      *reinterpret_cast<uint64_t*>(dst) = kPadMeta;
    }
    a += kStep / 2;
    x += kStep;
    meta += kWords;
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 2) nm24_product_kernel(const Nm24ProductArgs<T> p) {
  extern __shared__ __align__(16) unsigned char smem[];
  Stage<T>* stages = reinterpret_cast<Stage<T>*>(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wr = (warp / 2) * kWarpR, wm = (warp % 2) * kWarpM;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTileR, m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int steps = static_cast<int>(p.cols / kStep);
  Loader<T> load(p, r0, m0, tid);

  float acc[kWarpR / 16][kWarpM / 8][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load.stage(stages[s], tid);
    commit_copies();
  }
  // Shared-memory addresses as 32-bit offsets worked out once per lane: the
  // loop adds only constants and the stage's base (per-fragment generic
  // addresses and their conversion cost more instructions than the mma.sp).
  const int q = lane / 8, i8 = lane % 8, g = lane / 4, pair = lane % 2;
  // The swizzle's terms: a lane's A rows have (row / 2) % 4 = (i8 / 2) % 4,
  // its x rows row % 8 = i8, whatever the tile.
  const uint32_t a_lane = smem_u32(&stages[0].a[(wr + (q % 2) * 8 + i8) * kPitchA]);
  const uint32_t x_lane = smem_u32(&stages[0].x[(wm + i8) * kPitchX]);
  const uint32_t a_chunk[2] = {((0 + q / 2) ^ ((i8 / 2) % 4)) * 16u, ((2 + q / 2) ^ ((i8 / 2) % 4)) * 16u};
  const uint32_t x_chunk[2] = {((0 + q) ^ i8) * 16u, ((4 + q) ^ i8) * 16u};
  const uint32_t meta_lane = smem_u32(&stages[0].meta[(wr + g) * kWords + pair]);
  constexpr uint32_t kStageBytes = sizeof(Stage<T>);
  int read_stage = 0, write_stage = kStages - 1;
  for (int step = 0; step < steps; ++step) {
    wait_copies<kStages - 2>();
    __syncthreads();
    if (step + kStages - 1 < steps) load.stage(stages[write_stage], tid);
    commit_copies();
    write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
    const uint32_t stage_off = read_stage * kStageBytes;
    read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
    // Fragments load well ahead of their instructions (a warp issues in
    // order, and ldmatrix takes some 30 cycles): x's n8 tiles two tiles
    // ahead through a ring of three, the second k32 half's A fragments and
    // metadata halfway through the first.
    uint32_t af[2][kWarpR / 16][4], e[2][kWarpR / 16], bf[3][4];
    auto load_a = [&](int ks) {
#pragma unroll
      for (int mi = 0; mi < kWarpR / 16; ++mi) {
        ldmatrix_x4_at(af[ks][mi], a_lane + stage_off + mi * 16 * kPitchA * sizeof(T) + a_chunk[ks]);
        const uint32_t m = meta_lane + stage_off + (mi * 16 * kWords + ks * 2) * 2;
        e[ks][mi] = lds_u16(m) | (lds_u16(m + 8 * kWords * 2) << 16);
      }
    };
    auto load_b = [&](int ks, int ni) {
      ldmatrix_x4_at(bf[ni % 3], x_lane + stage_off + ni * 8 * kPitchX * sizeof(T) + x_chunk[ks]);
    };
    load_a(0);
#pragma unroll
    for (int ks = 0; ks < kStep / 32; ++ks) {
      load_b(ks, 0);
      load_b(ks, 1);
#pragma unroll
      for (int ni = 0; ni < kWarpM / 8; ++ni) {
        if (ni + 2 < kWarpM / 8) load_b(ks, ni + 2);
        if (ks == 0 && ni == kWarpM / 16) load_a(1);
#pragma unroll
        for (int mi = 0; mi < kWarpR / 16; ++mi) mma_sp_16832<T>(acc[mi][ni], af[ks][mi], bf[ni % 3], e[ks][mi]);
      }
    }
  }
  wait_copies<0>();
  __syncthreads();

  // The tile, transposed into [x row][S row] f32: accumulator c0/c1 are S row
  // g and x rows 2t, 2t + 1; c2/c3 S row g + 8.
  float* tile = reinterpret_cast<float*>(smem);
  const int t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kWarpR / 16; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kWarpM / 8; ++ni) {
      const int r = wr + mi * 16 + g, m = wm + ni * 8 + 2 * t;
      tile[m * kPitchOut + r] = acc[mi][ni][0];
      tile[(m + 1) * kPitchOut + r] = acc[mi][ni][1];
      tile[m * kPitchOut + r + 8] = acc[mi][ni][2];
      tile[(m + 1) * kPitchOut + r + 8] = acc[mi][ni][3];
    }
  }
  __syncthreads();
  // Runs of 8 along out's rows: bias and relu or a gelu form, rounded once, 16-byte stores
  // where the run is whole and aligned.
  const bool vec_rows = p.rows % 8 == 0;
  for (int c = tid; c < kTileM * (kTileR / 8); c += kThreads) {
    const int m = c / (kTileR / 8), r = (c % (kTileR / 8)) * 8;
    if (m0 + m >= p.m || r0 + r >= p.rows) continue;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = tile[m * kPitchOut + r + j];
      if (p.bias != nullptr && r0 + r + j < p.rows) v[j] += to_float(p.bias[r0 + r + j]);
      if (p.relu) v[j] = fmaxf(v[j], 0.0f);
    }
    T* dst = p.out + (m0 + m) * p.rows + r0 + r;
    const bool whole = vec_rows && r0 + r + 8 <= p.rows;
    if (p.gelu != GeluWriteOut::kNone) {
      gelu_run<T, 8>(p.gelu, p.aux + (dst - p.out), 1, whole, v,
                     static_cast<int>(p.rows - r0 - r < 8 ? p.rows - r0 - r : 8));
    }
    if (whole) {
      alignas(16) T run[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) run[j] = from_float<T>(v[j]);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(run);
    } else {
      for (int j = 0; j < 8 && r0 + r + j < p.rows; ++j) dst[j] = from_float<T>(v[j]);
    }
  }
}

// ---- building the operand -------------------------------------------------

// The 4-bit field of one group: its two in-group indices, first in the low bits.
__device__ __forceinline__ uint32_t field(uint32_t first, uint32_t second) { return first | (second << 2); }

// One thread per metadata word (row, 16 columns): four groups' index pairs.
__global__ void metadata_kernel(const uint8_t* __restrict__ indices, uint16_t* __restrict__ meta, int64_t words) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= words) return;
  // A row holds a whole number of words, so word w's groups are 4w..4w+3 and
  // its index bytes 8w..8w+7.
  const uint2 bytes = *reinterpret_cast<const uint2*>(indices + 8 * w);
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t pair = ((j < 2 ? bytes.x : bytes.y) >> (16 * (j % 2))) & 0xFFFF;
    word |= field(pair & 3, (pair >> 8) & 3) << (4 * j);
  }
  meta[w] = static_cast<uint16_t>(word);
}

// Whether S stores column `col` (0..3 within its group) in the group of row
// `row` that holds it, and at which slot: -1 if not.
__device__ __forceinline__ int slot_of(const uint8_t* __restrict__ indices, int64_t half_cols, int64_t row,
                                       int64_t col) {
  const int64_t base = row * half_cols + (col / 4) * 2;
  const int in_group = static_cast<int>(col % 4);
  if (indices[base] == in_group) return 0;
  if (indices[base + 1] == in_group) return 1;
  return -1;
}

// One thread per (column of S, four rows): flags a count above two.
__global__ void check_transposable_kernel(const uint8_t* __restrict__ indices, int64_t rows, int64_t cols, int* flag) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= (rows / 4) * cols) return;
  const int64_t col = i % cols, row0 = (i / cols) * 4;
  int count = 0;
  for (int r = 0; r < 4; ++r) count += slot_of(indices, cols / 2, row0 + r, col) >= 0;
  if (count > 2) atomicExch(flag, 1);
}

// S^T's hardware form, a tile of 64 x 64 of S a block: the tile's stored
// values and indices are read in rows (coalesced) into a dense tile with a
// stored flag per position, then each thread writes one row of S^T over 16
// of the tile's rows (8 stored values, 16 bytes, and one metadata word).
// Reading S's indices column-wise instead, a thread per (column, 16 rows),
// took 0.18 ms for a 4096 x 4096 weight, more than the product it feeds
// (H200).
constexpr int kPackTile = 64;

template <typename T>
__global__ void __launch_bounds__(256)
    pack_transposed_kernel(const T* __restrict__ values, const uint8_t* __restrict__ indices, T* __restrict__ values_t,
                           uint16_t* __restrict__ meta_t, int64_t rows, int64_t cols) {
  __shared__ T tile[kPackTile][kPackTile + 2];
  __shared__ uint8_t stored[kPackTile][kPackTile + 4];
  const int tid = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kPackTile, c0 = static_cast<int64_t>(blockIdx.x) * kPackTile;
  const int64_t half_cols = cols / 2;
  for (int k = tid; k < kPackTile * kPackTile; k += 256) {
    tile[k / kPackTile][k % kPackTile] = from_float<T>(0.0f);
    stored[k / kPackTile][k % kPackTile] = 0;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPackTile * kPackTile / 2 / 256; ++i) {  // the tile's stored slots, row by row
    const int k = tid + 256 * i, r = k / (kPackTile / 2), slot = k % (kPackTile / 2);
    const int64_t at = (r0 + r) * half_cols + c0 / 2 + slot;
    const int col = (slot / 2) * 4 + indices[at];
    tile[r][col] = values[at];
    stored[r][col] = 1;
  }
  __syncthreads();
  // Thread (c, chunk): row c0 + c of S^T, its stored values of S's rows
  // r0 + 16 chunk .. + 15. A 4x4 tile of a 2:4 pattern stores 8 entries; with
  // at most 2 per column (nm24_check_transposable) every column holds
  // exactly 2. (Named registers, not arrays indexed by a count: those went
  // to local memory.)
  const int c = tid / 4, chunk = tid % 4;
  alignas(16) T out[8];
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int first = -1, second = -1;
    T v0 = from_float<T>(0.0f), v1 = from_float<T>(0.0f);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = chunk * 16 + 4 * j + r;
      if (stored[row][c] == 0) continue;
      if (first < 0) {
        first = r;
        v0 = tile[row][c];
      } else if (second < 0) {
        second = r;
        v1 = tile[row][c];
      }
    }
    if (first < 0) first = 0;
    if (second < 0) second = first == 1 ? 2 : 1;
    out[2 * j] = v0;
    out[2 * j + 1] = v1;
    word |= field(first, second) << (4 * j);
  }
  *reinterpret_cast<uint4*>(values_t + (c0 + c) * (rows / 2) + r0 / 2 + chunk * 8) =
      *reinterpret_cast<const uint4*>(out);
  meta_t[(c0 + c) * (rows / 16) + r0 / 16 + chunk] = static_cast<uint16_t>(word);
}

// |v| for ranking, NaN above everything (nm_compress's order).
template <typename T>
__device__ __forceinline__ float magnitude(T v, bool& nan) {
  const float f = to_float(v);
  nan = isnan(f);
  return fabsf(f);
}

// One thread per group of four: the two largest |x| by rank (ties to the
// lower index), written in increasing column order.
template <typename T>
__global__ void select_kernel(const T* __restrict__ dense, T* __restrict__ values, uint8_t* __restrict__ indices,
                              uint16_t* __restrict__ meta, int64_t groups) {
  const int64_t gi = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Lanes past the end stay to the shuffles below (every lane takes part).
  const bool valid = gi < groups;
  T x[4];
  float mag[4];
  bool nan[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    x[j] = valid ? dense[gi * 4 + j] : from_float<T>(0.0f);
    mag[j] = magnitude(x[j], nan[j]);
  }
  int kept[2], n = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int beaten_by = 0;
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      if (o == j) continue;
      const bool o_first = nan[o] != nan[j] ? nan[o] : (nan[o] || mag[o] == mag[j]) ? o < j : mag[o] > mag[j];
      beaten_by += o_first;
    }
    if (beaten_by < 2 && n < 2) kept[n++] = j;
  }
  if (valid) {
    values[gi * 2] = x[kept[0]];
    values[gi * 2 + 1] = x[kept[1]];
    indices[gi * 2] = static_cast<uint8_t>(kept[0]);
    indices[gi * 2 + 1] = static_cast<uint8_t>(kept[1]);
  }
  if (meta == nullptr) return;
  // The four groups of a metadata word sit in consecutive lanes (a row holds
  // whole words): lane 4w + j contributes group j's field.
  const uint32_t mine = field(kept[0], kept[1]) << (4 * (gi % 4));
  uint32_t word = mine;
  word |= __shfl_down_sync(0xFFFFFFFF, mine, 1, 4);
  word |= __shfl_down_sync(0xFFFFFFFF, mine, 2, 4);
  word |= __shfl_down_sync(0xFFFFFFFF, mine, 3, 4);
  if (valid && gi % 4 == 0) meta[gi / 4] = static_cast<uint16_t>(word);
}

// One thread per 4 x 4 tile: the transposable 2:4 mask of
// sparse/nm_transposable.h, computed as its CPU twin computes it (the same
// patterns in the same order, the same scores summed in f64 in the same
// order, ties to the earlier pattern), so the two agree bit for bit.
struct TileScore {
  int nans = 0, infs = 0;
  double finite = 0.0;
  __device__ void add(double v) {
    if (isnan(v)) {
      ++nans;
    } else if (isinf(v)) {
      ++infs;
    } else {
      finite += fabs(v);
    }
  }
  __device__ void add(const TileScore& s) {
    nans += s.nans;
    infs += s.infs;
    finite += s.finite;
  }
  __device__ bool beats(const TileScore& s) const {
    if (nans != s.nans) return nans > s.nans;
    if (infs != s.infs) return infs > s.infs;
    return finite > s.finite;
  }
};

template <typename T>
__device__ __forceinline__ double as_double(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<double>(to_float(v));
  }
}

// The two-of-four choices of a tile row in lexicographic order: {0,1},
// {0,2}, {0,3}, {1,2}, {1,3}, {2,3}.
__host__ __device__ constexpr uint32_t pair_bits(int c) {
  return (0x3 | (0x5 << 4) | (0x9 << 8) | (0x6 << 12) | (0xA << 16) | (0xC << 20)) >> (4 * c) & 0xF;
}

// The 90 transposable 2:4 tile patterns (one choice per row) in the CPU
// twin's order: depth first over rows, each row's choices in order, every
// column taking two.
struct TilePatterns {
  int choice[90][4] = {};
};
__host__ __device__ constexpr TilePatterns tile_patterns() {
  TilePatterns p;
  int k = 0;
  for (int c0 = 0; c0 < 6; ++c0)
    for (int c1 = 0; c1 < 6; ++c1)
      for (int c2 = 0; c2 < 6; ++c2)
        for (int c3 = 0; c3 < 6; ++c3) {
          bool fits = true;
          for (int j = 0; j < 4; ++j) {
            const int count = (pair_bits(c0) >> j & 1) + (pair_bits(c1) >> j & 1) + (pair_bits(c2) >> j & 1) +
                              (pair_bits(c3) >> j & 1);
            fits = fits && count == 2;
          }
          if (fits && k < 90) {
            p.choice[k][0] = c0, p.choice[k][1] = c1, p.choice[k][2] = c2, p.choice[k][3] = c3;
            ++k;
          }
        }
  return p;
}

// The patterns unrolled at compile time, so that the row scores stay in
// registers (a loop over choices indexed them from local memory and took
// 0.35 s a step for two 4096-wide layers, H200).
template <typename T>
__global__ void transposable_mask_kernel(const T* __restrict__ w, bool* __restrict__ mask, int64_t rows, int64_t cols) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t tile_cols = cols / 4;
  if (t >= rows / 4 * tile_cols) return;
  const int64_t origin = (t / tile_cols) * 4 * cols + (t % tile_cols) * 4;
  TileScore row_scores[4][6];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    double v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = as_double(w[origin + r * cols + j]);
#pragma unroll
    for (int c = 0; c < 6; ++c) {
      constexpr int kFirst[6] = {0, 0, 0, 1, 1, 2}, kSecond[6] = {1, 2, 3, 2, 3, 3};
      TileScore s;
      s.add(v[kFirst[c]]);
      s.add(v[kSecond[c]]);
      row_scores[r][c] = s;
    }
  }
  constexpr TilePatterns kPatterns = tile_patterns();
  int best = 0;
  TileScore best_score;
#pragma unroll
  for (int k = 0; k < 90; ++k) {
    TileScore s;
#pragma unroll
    for (int r = 0; r < 4; ++r) s.add(row_scores[r][kPatterns.choice[k][r]]);
    if (k == 0 || s.beats(best_score)) {  // strictly better: ties keep the earlier pattern
      best = k;
      best_score = s;
    }
  }
  uint32_t keep = 0;  // the winner's four row choices, 4 bits a row
#pragma unroll
  for (int k = 0; k < 90; ++k) {
    if (k == best) {
#pragma unroll
      for (int r = 0; r < 4; ++r) keep |= pair_bits(kPatterns.choice[k][r]) << (4 * r);
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j) mask[origin + r * cols + j] = ((keep >> (4 * r + j)) & 1u) != 0;
}

// One thread per group of four: the entries `mask` keeps, then explicit
// zeros at the lowest free positions up to two (nm_compress with a mask, as
// its host loop does it); a group keeping more than two lowers *bad_group to
// its index.
template <typename T>
__global__ void masked_select_kernel(const T* __restrict__ dense, const bool* __restrict__ mask, T* __restrict__ values,
                                     uint8_t* __restrict__ indices, int64_t groups, unsigned long long* bad_group) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  bool keep[4];
  int count = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    keep[j] = mask[g * 4 + j];
    count += keep[j];
  }
  if (count > 2) {
    atomicMin(bad_group, static_cast<unsigned long long>(g));
    return;
  }
  int fill = 2 - count, s = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (s == 2) break;
    if (keep[j] || fill > 0) {
      if (!keep[j]) --fill;
      values[g * 2 + s] = keep[j] ? dense[g * 4 + j] : from_float<T>(0.0f);
      indices[g * 2 + s] = static_cast<uint8_t>(j);
      ++s;
    }
  }
}

template <typename T>
__global__ void gather_kernel(const T* __restrict__ product, const uint8_t* __restrict__ indices,
                              T* __restrict__ values, int64_t slots, int n, int m) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= slots) return;
  values[s] = product[(s / n) * m + indices[s]];
}

template <typename T>
__global__ void scatter_kernel(const T* __restrict__ values, const uint8_t* __restrict__ indices, T* __restrict__ dense,
                               int64_t slots, int n, int m) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= slots) return;
  dense[(s / n) * m + indices[s]] = values[s];
}

unsigned blocks_for(int64_t threads, int per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

}  // namespace

template <typename T>
void nm24_product(const Nm24ProductArgs<T>& args, cudaStream_t stream) {
  if (args.m == 0 || args.rows == 0) return;
  static const bool configured = [] {
    COPPICE_CUDA_CHECK(cudaFuncSetAttribute(nm24_product_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kSmemBytes)),
                       "nm24 product");
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((args.rows + kTileR - 1) / kTileR),
                  static_cast<unsigned>((args.m + kTileM - 1) / kTileM));
  nm24_product_kernel<T><<<grid, kThreads, kSmemBytes, stream>>>(args);
  cuda::check_launch("nm24 product");
}

void nm24_metadata(const uint8_t* indices, uint16_t* meta, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t words = rows * (cols / 16);
  if (words == 0) return;
  metadata_kernel<<<blocks_for(words, 256), 256, 0, stream>>>(indices, meta, words);
  cuda::check_launch("nm24 metadata");
}

void nm24_check_transposable(const uint8_t* indices, int64_t rows, int64_t cols, int* flag, cudaStream_t stream) {
  const int64_t threads = (rows / 4) * cols;
  if (threads == 0) return;
  check_transposable_kernel<<<blocks_for(threads, 256), 256, 0, stream>>>(indices, rows, cols, flag);
  cuda::check_launch("nm24 transposable check");
}

template <typename T>
void nm24_pack_transposed(const T* values, const uint8_t* indices, T* values_t, uint16_t* meta_t, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>(cols / kPackTile), static_cast<unsigned>(rows / kPackTile));
  pack_transposed_kernel<T><<<grid, 256, 0, stream>>>(values, indices, values_t, meta_t, rows, cols);
  cuda::check_launch("nm24 transposed pack");
}

template <typename T>
void nm24_select(const T* dense, T* values, uint8_t* indices, uint16_t* meta, int64_t rows, int64_t cols,
                 cudaStream_t stream) {
  const int64_t groups = rows * (cols / 4);
  if (groups == 0) return;
  // Blocks of 256 threads hold whole metadata words (4 groups each).
  select_kernel<T><<<blocks_for(groups, 256), 256, 0, stream>>>(dense, values, indices, meta, groups);
  cuda::check_launch("nm24 selection");
}

template <typename T>
void nm24_transposable_mask(const T* w, bool* mask, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t tiles = (rows / 4) * (cols / 4);
  if (tiles == 0) return;
  transposable_mask_kernel<T><<<blocks_for(tiles, 128), 128, 0, stream>>>(w, mask, rows, cols);
  cuda::check_launch("nm24 transposable mask");
}

template <typename T>
void nm24_select_masked(const T* dense, const bool* mask, T* values, uint8_t* indices, int64_t rows, int64_t cols,
                        unsigned long long* bad_group, cudaStream_t stream) {
  const int64_t groups = rows * (cols / 4);
  if (groups == 0) return;
  masked_select_kernel<T><<<blocks_for(groups, 256), 256, 0, stream>>>(dense, mask, values, indices, groups, bad_group);
  cuda::check_launch("nm24 masked selection");
}

template <typename T>
void nm_gather(const T* product, const uint8_t* indices, T* values, int64_t rows, int64_t cols, int n, int m,
               cudaStream_t stream) {
  const int64_t slots = rows * (cols / m) * n;
  if (slots == 0) return;
  gather_kernel<T><<<blocks_for(slots, 256), 256, 0, stream>>>(product, indices, values, slots, n, m);
  cuda::check_launch("nm gather");
}

template <typename T>
void nm_scatter(const T* values, const uint8_t* indices, T* dense, int64_t rows, int64_t cols, int n, int m,
                cudaStream_t stream) {
  if (rows * cols == 0) return;
  COPPICE_CUDA_CHECK(cudaMemsetAsync(dense, 0, static_cast<size_t>(rows * cols) * sizeof(T), stream), "nm scatter");
  const int64_t slots = rows * (cols / m) * n;
  scatter_kernel<T><<<blocks_for(slots, 256), 256, 0, stream>>>(values, indices, dense, slots, n, m);
  cuda::check_launch("nm scatter");
}

template void nm24_product<__nv_bfloat16>(const Nm24ProductArgs<__nv_bfloat16>&, cudaStream_t);
template void nm24_product<__half>(const Nm24ProductArgs<__half>&, cudaStream_t);
template void nm24_pack_transposed<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, uint16_t*,
                                                  int64_t, int64_t, cudaStream_t);
template void nm24_pack_transposed<__half>(const __half*, const uint8_t*, __half*, uint16_t*, int64_t, int64_t,
                                           cudaStream_t);
template void nm24_select<float>(const float*, float*, uint8_t*, uint16_t*, int64_t, int64_t, cudaStream_t);
template void nm24_select<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, uint8_t*, uint16_t*, int64_t, int64_t,
                                         cudaStream_t);
template void nm24_select<__half>(const __half*, __half*, uint8_t*, uint16_t*, int64_t, int64_t, cudaStream_t);
template void nm_gather<float>(const float*, const uint8_t*, float*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_gather<double>(const double*, const uint8_t*, double*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_gather<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int64_t, int64_t, int, int,
                                       cudaStream_t);
template void nm_gather<__half>(const __half*, const uint8_t*, __half*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_scatter<float>(const float*, const uint8_t*, float*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_scatter<double>(const double*, const uint8_t*, double*, int64_t, int64_t, int, int, cudaStream_t);
template void nm_scatter<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int64_t, int64_t, int,
                                        int, cudaStream_t);
template void nm_scatter<__half>(const __half*, const uint8_t*, __half*, int64_t, int64_t, int, int, cudaStream_t);

template void nm24_transposable_mask<float>(const float*, bool*, int64_t, int64_t, cudaStream_t);
template void nm24_transposable_mask<double>(const double*, bool*, int64_t, int64_t, cudaStream_t);
template void nm24_transposable_mask<__nv_bfloat16>(const __nv_bfloat16*, bool*, int64_t, int64_t, cudaStream_t);
template void nm24_transposable_mask<__half>(const __half*, bool*, int64_t, int64_t, cudaStream_t);

template void nm24_select_masked<float>(const float*, const bool*, float*, uint8_t*, int64_t, int64_t,
                                        unsigned long long*, cudaStream_t);
template void nm24_select_masked<double>(const double*, const bool*, double*, uint8_t*, int64_t, int64_t,
                                         unsigned long long*, cudaStream_t);
template void nm24_select_masked<__nv_bfloat16>(const __nv_bfloat16*, const bool*, __nv_bfloat16*, uint8_t*, int64_t,
                                                int64_t, unsigned long long*, cudaStream_t);
template void nm24_select_masked<__half>(const __half*, const bool*, __half*, uint8_t*, int64_t, int64_t,
                                         unsigned long long*, cudaStream_t);

}  // namespace coppice::sparse_cuda
