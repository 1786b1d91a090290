// 2:4 products on sparse tensor cores through mma.sp (nm24_mma.h); the
// kernels that build the operand they read are nm24_pack.cu's.
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
// rows with the bias and relu or a gelu form applied (epilogue.cuh). Rows of
// S or x beyond the matrix are staged as zeros (with valid metadata), and
// their results are not stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/nm24_mma.h"
#include "sparse/cuda/nm24_write_out.cuh"
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
  __device__ static int steps(const Nm24ProductArgs<T>& p, int64_t) { return static_cast<int>(p.cols / kStep); }

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

  // The next step into stage `st` (steps are taken in order: `s` is implied).
  __device__ __forceinline__ void stage(Stage<T>& st, int tid, int /*s*/) {
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

// BSR-of-2:4's loader: the thread block's rows are one block row of S
// (kTileR = kBsrNm24BlockRows), and step s loads its s-th stored block
// (values [128, 32] and metadata [128, 4] of that block, and the 64 columns
// of x the block's column index names). The runs and the swizzle are
// Loader's; only where a step reads differs.
template <typename T>
struct BlockLoader {
  __device__ static int steps(const Nm24ProductArgs<T>& p, int64_t block_row) {
    return p.block_row_ptr[block_row + 1] - p.block_row_ptr[block_row];
  }

  const T* a;  // block 0's run of this thread
  const T* x;  // column 0's run of this thread
  const uint16_t* meta;
  const int32_t* block_cols;  // from the block row's first block
  int64_t x_stride;           // 16 rows of x
  uint32_t x_valid = 0;
  int a_dst, x_dst;

  __device__ BlockLoader(const Nm24ProductArgs<T>& p, int64_t r0, int64_t m0, int tid) {
    const int64_t x_row = m0 + tid / 8, first = p.block_row_ptr[r0 / kTileR];
    a = p.values + first * (kTileR * kPitchA) + (tid / 4) * kPitchA + (tid % 4) * 8;
    x = p.x + x_row * p.cols + (tid % 8) * 8;
    meta = p.meta + (first * kTileR + tid) * kWords;
    block_cols = p.block_cols + first;
    x_stride = 16 * p.cols;
#pragma unroll
    for (int i = 0; i < 8; ++i) x_valid |= (x_row + 16 * i < p.m ? 1u : 0u) << i;
    a_dst = (tid / 4) * kPitchA + ((tid % 4) ^ ((tid / 8) % 4)) * 8;
    x_dst = (tid / 8) * kPitchX + ((tid % 8) ^ ((tid / 8) % 8)) * 8;
  }

  // Step s (the block row's s-th stored block) into stage `st`. Every row of
  // a block exists (rows is a multiple of the block's).
  __device__ __forceinline__ void stage(Stage<T>& st, int tid, int s) {
    const T* src = a + static_cast<int64_t>(s) * (kTileR * kPitchA);
#pragma unroll
    for (int i = 0; i < 4; ++i, src += 32 * kPitchA) copy16_async(&st.a[a_dst + i * 32 * kPitchA], src, true);
    src = x + static_cast<int64_t>(__ldg(block_cols + s)) * kStep;
#pragma unroll
    for (int i = 0; i < 8; ++i, src += x_stride)
      copy16_async(&st.x[x_dst + i * 16 * kPitchX], src, (x_valid >> i) & 1u);
    copy8_async(&st.meta[tid * kWords], meta + static_cast<int64_t>(s) * (kTileR * kWords));
  }
};

template <typename T, template <typename> class Load>
__global__ void __launch_bounds__(kThreads, 2) nm24_product_kernel(const Nm24ProductArgs<T> p) {
  extern __shared__ __align__(16) unsigned char smem[];
  Stage<T>* stages = reinterpret_cast<Stage<T>*>(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wr = (warp / 2) * kWarpR, wm = (warp % 2) * kWarpM;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTileR, m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int steps = Load<T>::steps(p, blockIdx.x);
  Load<T> load(p, r0, m0, tid);

  float acc[kWarpR / 16][kWarpM / 8][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load.stage(stages[s], tid, s);
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
    if (step + kStages - 1 < steps) load.stage(stages[write_stage], tid, step + kStages - 1);
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
  nm24_write_out<T, kTileM, kTileR, kPitchOut, kThreads>(tile, p, m0, r0, tid);
}

template <typename T, template <typename> class Load>
void launch(const Nm24ProductArgs<T>& args, cudaStream_t stream, const char* what) {
  if (args.m == 0 || args.rows == 0) return;
  static const bool configured = [what] {
    COPPICE_CUDA_CHECK(cudaFuncSetAttribute(nm24_product_kernel<T, Load>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kSmemBytes)),
                       what);
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((args.rows + kTileR - 1) / kTileR),
                  static_cast<unsigned>((args.m + kTileM - 1) / kTileM));
  nm24_product_kernel<T, Load><<<grid, kThreads, kSmemBytes, stream>>>(args);
  cuda::check_launch(what);
}

}  // namespace

static_assert(kBsrNm24BlockRows == kTileR, "a BSR-of-2:4 block row is a thread block's rows");

template <typename T>
void nm24_product(const Nm24ProductArgs<T>& args, cudaStream_t stream) {
  launch<T, Loader>(args, stream, "nm24 product");
}

template <typename T>
void bsr_nm24_product(const Nm24ProductArgs<T>& args, cudaStream_t stream) {
  launch<T, BlockLoader>(args, stream, "bsr-of-2:4 product");
}

template void nm24_product<__nv_bfloat16>(const Nm24ProductArgs<__nv_bfloat16>&, cudaStream_t);
template void nm24_product<__half>(const Nm24ProductArgs<__half>&, cudaStream_t);
template void bsr_nm24_product<__nv_bfloat16>(const Nm24ProductArgs<__nv_bfloat16>&, cudaStream_t);
template void bsr_nm24_product<__half>(const Nm24ProductArgs<__half>&, cudaStream_t);

}  // namespace coppice::sparse_cuda
