// 2:4 products on Hopper's sparse warpgroup MMA (nm24_wgmma.h).
//
// out [m, rows] = x [m, cols] @ S^T with S 2:4 along cols. The sparse operand
// of wgmma.sp is A, so S's rows are the instruction's M and x's rows its N. A
// thread block owns kTileR = 256 rows of S by kTileM = 128 rows of x and
// walks cols in steps of 64, with three warpgroups:
//   - one loads: a single thread issues TMA copies of each step's S values
//     (256 rows by 32 stored, 64-byte swizzle) and x (128 rows by 64,
//     128-byte swizzle) into a ring of kStages steps, each stage guarded by a
//     "full" mbarrier (transaction bytes) and an "empty" one (one arrival per
//     multiplying warp); it gives its registers to the others (setmaxnreg);
//   - two multiply: each owns 128 rows of S as two m64 slices and issues, per
//     step, four wgmma.mma_async.sp m64n128k32 (two slices by two k32) that
//     read both operands from shared memory through matrix descriptors
//     (swizzle modes as TMA wrote them), 2 x 64 f32 accumulators a thread.
// Each step's group is waited for before the next builds its metadata
// registers (see the loop), and the stage is then released to the loader.
//
// Metadata does not go through shared memory: the register each thread hands
// an instruction (PTX ISA, sparse wgmma metadata for 16-bit types: per warp
// the layout of mma.sp m16n8k32, which nm24_mma.cu describes, warp w holding
// rows 16w..16w+15 of the m64 slice) is read from global memory one step
// ahead, from a copy of S's metadata permuted once per pattern into the
// threads' order (wgmma_metadata_kernel).
//
// The write-out is nm24_mma.cu's (nm24_write_out.cuh): the accumulators go
// through shared memory transposed, and each thread stores 16-byte runs of
// out's rows with the bias and relu or a gelu form applied. Rows of S or x
// beyond the matrix arrive as zeros (TMA fills outside the tensor), padded
// metadata is valid, and their results are not stored.
//
// What bounds it (Nsight Compute, H200, 4096^3 bf16): the load/store data
// pipe, 82 % busy at 1.16x cuBLAS's dense rate with the tensor pipe at 56 %
// (1.20x since the write-out reads in 16 bytes: element by element it had
// taken, at K = 1024, about as much of the pipe as the main loop).
// Every byte the instructions read from shared memory and every byte TMA
// writes there passes through it (128 bytes a cycle an SM). A sparse m64
// instruction reads all of its B (x) for 2 x 64 dense-equivalent flops per
// byte, and a step here moves 912 lines of 128 bytes (x read four times, 512;
// S read once, 128; TMA writes, 256; metadata, 16) for 4.19 MFLOP: at most
// 4,600 flops a cycle an SM, 1,200 TFLOP/s at 1.98 GHz, 1.38x cuBLAS. A larger
// tile would lower the writes' share, but its accumulators do not fit in the
// registers of two warpgroups.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "sparse/cuda/epilogue.cuh"
#include "sparse/cuda/nm24_wgmma.h"
#include "sparse/cuda/nm24_write_out.cuh"
#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/mma_sync.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/tma.cuh"
#include "tensor/cuda/wgmma.cuh"

namespace coppice::sparse_cuda {
namespace {

using cuda::barrier_arrive;
using cuda::barrier_expect;
using cuda::sw128_desc;
using cuda::sw64_desc;  // S's stored values, 32 a row, as TMA wrote them
using cuda::tma_load;
using cuda::wgmma_commit;
using cuda::wgmma_fence;
using cuda::wgmma_wait;

constexpr int kSlices = 2;                  // m64 slices of S per consumer warpgroup
constexpr int kTileR = 2 * 64 * kSlices;    // rows of S per block: two consumer warpgroups
constexpr int kTileM = 128;                 // rows of x per block: the instructions' N
constexpr int kStep = 64;                   // dense columns of S per stage: two k32
constexpr int kConsumers = 256;             // two warpgroups multiply
constexpr int kThreads = kConsumers + 128;  // and one loads
using Registers = cuda::RegisterSplit<kThreads, 40, 232>;
constexpr int kSRowBytes = kStep;      // 32 stored values: a 64-byte swizzle row
constexpr int kXRowBytes = 2 * kStep;  // 64 columns of x: a 128-byte swizzle row
constexpr int kSBytes = kTileR * kSRowBytes;
constexpr int kXBytes = kTileM * kXRowBytes;
constexpr int kStageBytes = kSBytes + kXBytes;
constexpr int kStages = 6;
constexpr int kSmemBytes = cuda::StageRing<kStages, kStageBytes>::kSmemBytes;
constexpr int kPitchOut = kTileR + 4;       // f32 per row of the write-out tile
constexpr uint32_t kPadMeta = 0x44444444u;  // indices (0, 1) in every group

static_assert(kNm24WgmmaStepCols == kStep, "the header's step is the kernel's");
static_assert(kTileM * kPitchOut * sizeof(float) <= kStages * kStageBytes, "the write-out tile fits in the ring");
static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms aligned");

#define COPPICE_ACC64(d)                                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define COPPICE_WGMMA_SP(type)                                                                                       \
  "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32." type "." type                                                    \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                      \
  "%64, %65, %66, 0, 1, 1, 1, 0, 0;\n"

// d (64 x 128, f32) += A (64 x 32, 2:4: 64 x 16 stored; descriptor a) *
// B (32 x 128; descriptor b of x's 128 rows by 32), metadata e, selector 0.
template <typename T>
__device__ __forceinline__ void wgmma_sp(float (&d)[64], uint64_t a, uint64_t b, uint32_t e) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(COPPICE_WGMMA_SP("bf16") : COPPICE_ACC64(d) : "l"(a), "l"(b), "r"(e));
  } else {
    asm volatile(COPPICE_WGMMA_SP("f16") : COPPICE_ACC64(d) : "l"(a), "l"(b), "r"(e));
  }
}
#undef COPPICE_WGMMA_SP
#undef COPPICE_ACC64

// ---- metadata ---------------------------------------------------------------

// The metadata registers in the order the threads read them: per block of
// kTileR rows of S, step, consumer warpgroup and warp, sixteen uint4 (one per
// lane pair 4g + p and 4g + 2 + p, which read the same), each holding the
// registers of (slice 0, k32 0), (0, 1), (1, 0), (1, 1). A warp's load is then
// 256 contiguous bytes; from S's metadata rows it took eight 8-byte loads
// from as many rows, a fifth of the kernel's traffic through the load/store
// data pipe, which bounds it (Nsight Compute, H200).
constexpr int kMetaLanes = 16;
__host__ __device__ constexpr int64_t meta_uint4s(int64_t rows, int64_t cols) {
  return ((rows + kTileR - 1) / kTileR) * (cols / kStep) * (kConsumers / 32) * kMetaLanes;
}

// One thread per uint4: the words of rows g and g + 8 (word j of a row:
// columns 16 j .. 16 j + 15), low and high halves, padding rows past the end.
__global__ void wgmma_metadata_kernel(const uint16_t* __restrict__ meta, uint4* __restrict__ out, int64_t rows,
                                      int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= meta_uint4s(rows, cols)) return;
  const int slot = static_cast<int>(i % kMetaLanes), warp8 = static_cast<int>(i / kMetaLanes % 8);
  const int64_t steps = cols / kStep, step = i / (kMetaLanes * 8) % steps, block = i / (kMetaLanes * 8 * steps);
  const int g = slot / 2, p = slot % 2, wg = warp8 / 4, warp = warp8 % 4;
  const int64_t words = cols / 16;
  uint32_t e[4];
  for (int sl = 0; sl < kSlices; ++sl) {
    const int64_t lo = block * kTileR + wg * 64 * kSlices + sl * 64 + warp * 16 + g, hi = lo + 8;
    for (int ks = 0; ks < 2; ++ks) {
      const int64_t w = step * (kStep / 16) + 2 * ks + p;
      const uint32_t a = lo < rows ? meta[lo * words + w] : kPadMeta & 0xFFFF;
      const uint32_t b = hi < rows ? meta[hi * words + w] : kPadMeta & 0xFFFF;
      e[sl * 2 + ks] = a | (b << 16);
    }
  }
  out[i] = make_uint4(e[0], e[1], e[2], e[3]);
}

struct Maps {
  CUtensorMap s;  // S's values [rows, cols / 2]: boxes of 32 x kTileR, 64-byte swizzle
  CUtensorMap x;  // x [m, cols]: boxes of 64 x kTileM, 128-byte swizzle
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    nm24_wgmma_kernel(const __grid_constant__ Maps maps, const Nm24ProductArgs<T> p, const uint4* wgmma_meta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const auto ring = cuda::stage_ring<kStages, kStageBytes>(smem_raw, kConsumers / 32);
  const int tid = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTileR, m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int steps = static_cast<int>(p.cols / kStep);

  if (tid >= kConsumers) {
    // The loading warpgroup: one thread issues every copy.
    Registers::loader();
    if (tid == kConsumers) {
      for (int step = 0; step < steps; ++step) {
        ring.wait_empty(step);
        const uint32_t full = ring.full(step), st = ring.stage(step);
        barrier_expect(full, kStageBytes);
        tma_load(st, &maps.s, step * (kStep / 2), static_cast<int>(r0), full);
        tma_load(st + kSBytes, &maps.x, step * kStep, static_cast<int>(m0), full);
      }
    }
    return;
  }
  Registers::consumer();

  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4;
  // Consumer warpgroup wg owns the tile's rows wg * 64 kSlices .. + 64 kSlices.
  const int wg_row = wg * 64 * kSlices;
  const uint4* meta_in =
      wgmma_meta + ((blockIdx.x * static_cast<int64_t>(steps)) * 8 + wg * 4 + warp) * kMetaLanes + (g * 2 + lane % 2);
  uint4 meta = __ldg(meta_in);
  float acc[kSlices][64];
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (float& v : acc[sl]) v = 0.0f;

  for (int step = 0; step < steps; ++step) {
    const uint32_t st = ring.stage(step);
    const uint32_t e[kSlices][2] = {{meta.x, meta.y}, {meta.z, meta.w}};
    if (step + 1 < steps) {
      meta_in += 8 * kMetaLanes;
      meta = __ldg(meta_in);
    }
    ring.wait_full(step);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const uint64_t b = sw128_desc(st + kSBytes + ks * 64);
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl)
        wgmma_sp<T>(acc[sl], sw64_desc(st + (wg_row + sl * 64) * kSRowBytes + ks * 32), b, e[sl][ks]);
    }
    wgmma_commit();
    // The instruction reads its metadata registers asynchronously, and the
    // compiler, which knows only the accumulators as such, reuses them for
    // the next step's while a group is in flight (wrong products on the
    // H200): so each step's group is waited for before the next step builds
    // its registers, as CUTLASS's sparse mainloop does. The other warpgroup
    // keeps the tensor cores busy meanwhile (a version keeping one group in
    // flight, its registers pinned by hand, ran about 4 % faster, but the
    // pinning held only as long as the compiler's register choices did).
    wgmma_wait<0>();
    if (lane == 0) barrier_arrive(ring.empty(step));  // this warp is done with the stage
  }
  // Both consumer warpgroups are done with the ring (the loader has nothing
  // left in flight: every stage it filled was waited for).
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");

  // The tile, transposed into [x row][S row] f32: accumulators 4j and 4j + 1
  // are S row g of the warp's 16 and x rows 8j + 2t, 8j + 2t + 1; 4j + 2 and
  // 4j + 3 S row g + 8.
  float* tile = reinterpret_cast<float*>(ring.smem);
  const int t = lane % 4;
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl) {
    const int r = wg_row + sl * 64 + warp * 16 + g;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int m = 8 * j + 2 * t;
      tile[m * kPitchOut + r] = acc[sl][4 * j];
      tile[(m + 1) * kPitchOut + r] = acc[sl][4 * j + 1];
      tile[m * kPitchOut + r + 8] = acc[sl][4 * j + 2];
      tile[(m + 1) * kPitchOut + r + 8] = acc[sl][4 * j + 3];
    }
  }
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
  nm24_write_out<T, kTileM, kTileR, kPitchOut, kConsumers>(tile, p, m0, r0, tid);
#endif
}

}  // namespace

bool nm24_wgmma_runs(int64_t cols) {
  if (cols % kStep != 0) return false;
  return cuda::runs_sm90a(cuda::current_device("nm24 wgmma"), "nm24 wgmma");
}

template <typename T>
void nm24_product_wgmma(const Nm24ProductArgs<T>& args, const uint32_t* wgmma_meta, cudaStream_t stream) {
  if (args.m == 0 || args.rows == 0) return;
  static const bool configured = [] {
    COPPICE_CUDA_CHECK(
        cudaFuncSetAttribute(nm24_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
        "nm24 wgmma product");
    return true;
  }();
  (void)configured;
  const CUtensorMapDataType type = cuda::tensor_map_type_16bit<T>();
  Maps maps;
  constexpr std::string_view kOp = "nm24 wgmma product";
  maps.s = cuda::tensor_map_16bit(args.values, args.cols / 2, args.rows, args.cols / 2, kStep / 2, kTileR,
                                  CU_TENSOR_MAP_SWIZZLE_64B, type, kOp);
  maps.x = cuda::tensor_map_16bit(args.x, args.cols, args.m, args.cols, kStep, kTileM, CU_TENSOR_MAP_SWIZZLE_128B, type,
                                  kOp);
  const dim3 grid(static_cast<unsigned>((args.rows + kTileR - 1) / kTileR),
                  static_cast<unsigned>((args.m + kTileM - 1) / kTileM));
  nm24_wgmma_kernel<T><<<grid, kThreads, kSmemBytes, stream>>>(maps, args, reinterpret_cast<const uint4*>(wgmma_meta));
  cuda::check_launch("nm24 wgmma product");
}

template void nm24_product_wgmma<__nv_bfloat16>(const Nm24ProductArgs<__nv_bfloat16>&, const uint32_t*, cudaStream_t);
template void nm24_product_wgmma<__half>(const Nm24ProductArgs<__half>&, const uint32_t*, cudaStream_t);

int64_t nm24_wgmma_metadata_words(int64_t rows, int64_t cols) { return 4 * meta_uint4s(rows, cols); }

void nm24_wgmma_metadata(const uint16_t* meta, uint32_t* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = meta_uint4s(rows, cols);
  if (n == 0) return;
  wgmma_metadata_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(meta, reinterpret_cast<uint4*>(out),
                                                                                    rows, cols);
  cuda::check_launch("nm24 wgmma metadata");
}

}  // namespace coppice::sparse_cuda
