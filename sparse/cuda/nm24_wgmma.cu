// 2:4 products on Hopper's sparse warpgroup MMA (nm24_wgmma.h).
//
// out [m, rows] = x [m, cols] @ S^T with S 2:4 along cols. The sparse operand
// of wgmma.sp is A, so S's rows are the instruction's M and x's rows its N. A
// thread block of two warpgroups owns kTileR = 128 rows of S (an m64 slice per
// warpgroup) by kTileM = 128 rows of x, and walks cols in steps of 128: per
// step and warpgroup, four wgmma.mma_async.sp m64n128k32 read S's stored
// values (64 rows by 16 per instruction) and x (128 rows by 32) from shared
// memory through matrix descriptors, the accumulators (64 f32 a thread) stay
// in registers.
//
// Shared memory: kStages steps in a ring, each step S's 128 rows of 64 stored
// values (128 bytes) and x's 128 rows of 128 columns as two 64-column halves
// (128 bytes a row each), all in the 128-byte swizzle the descriptors name
// (layout type 1): 16-byte chunk c of a row r sits at c ^ (r % 8), eight rows
// to a 1024-byte atom (the descriptors' stride), every atom 1024-aligned.
// The instruction's k32 slice is an offset into the rows (32 bytes of S's
// stored values, 64 of x), the hardware applying the swizzle to the address.
// All 256 threads copy with cp.async, each a fixed set of 16-byte chunks
// whose swizzled place is worked out once; kStages - 2 steps load while one
// is multiplied and the one before may still be read by wgmma (each
// warpgroup waits for all but its last group before the block's barrier).
// cp.async writes through the generic proxy and wgmma reads through the async
// one, hence the proxy fence before the barrier.
//
// Metadata does not go through shared memory: the register each thread hands
// an instruction (PTX ISA, sparse wgmma metadata for 16-bit types; the
// per-warp layout of mma.sp m16n8k32, which nm24_mma.cu describes, warp w of
// the warpgroup holding rows 16w..16w+15 of the m64 slice) comes straight
// from S's metadata rows: a thread reads its two rows' eight words of the
// step as two 16-byte loads, one step ahead.
//
// The write-out is nm24_mma.cu's: the accumulators go through shared memory
// transposed, and each thread stores 16-byte runs of out's rows with the bias
// and relu applied. Rows of S or x beyond the matrix are staged as zeros (with
// valid metadata), and their results are not stored.
#include "sparse/cuda/nm24_wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <type_traits>

#include "sparse/cuda/tile_values.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/mma_sync.cuh"

namespace coppice::sparse_cuda {
namespace {

using cuda::smem_u32;

constexpr int kSlices = 2;                   // m64 slices of S per consumer warpgroup
constexpr int kTileR = 2 * 64 * kSlices;     // rows of S per block: two consumer warpgroups
constexpr int kTileM = 128;                  // rows of x per block: the instructions' N
constexpr int kStep = 64;                    // dense columns of S per stage: two k32
constexpr int kConsumers = 256;              // two warpgroups multiply
constexpr int kThreads = kConsumers + 128;   // and one loads
constexpr int kSRowBytes = kStep;            // 32 stored values: a 64-byte swizzle row
constexpr int kXRowBytes = 2 * kStep;        // 64 columns of x: a 128-byte swizzle row
constexpr int kSBytes = kTileR * kSRowBytes;
constexpr int kXBytes = kTileM * kXRowBytes;
constexpr int kStageBytes = kSBytes + kXBytes;
constexpr int kStages = 6;
constexpr int kBarrierBytes = 2 * kStages * 8;                          // full and empty, per stage
constexpr int kSmemBytes = kStages * kStageBytes + 1024 + kBarrierBytes;  // + room to align to 1024
constexpr int kPitchOut = kTileR + 4;                                   // f32 per row of the write-out tile
constexpr uint32_t kPadMeta = 0x44444444u;                              // indices (0, 1) in every group

static_assert(kNm24WgmmaStepCols == kStep, "the header's step is the kernel's");
static_assert(kTileM * kPitchOut * sizeof(float) <= kStages * kStageBytes, "the write-out tile fits in the ring");
static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms aligned");

// A K-major operand in shared memory as the descriptors name it: the 128-byte
// swizzle (layout type 1, 1024 bytes between groups of eight rows) for x, the
// 64-byte one (type 2, 512 bytes) for S's stored values, as TMA wrote them.
// No leading offset: an instruction's k slice stays within a row.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ uint64_t sw64_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(512 >> 4) << 32) | (2ull << 62);
}

#define COPPICE_ACC64(d)                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define COPPICE_WGMMA_SP(type)                                                                                        \
  "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32." type "." type                                                  \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                       \
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

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// A step's metadata registers: two k32 slices for each m64 slice.
using MetaRegs = uint32_t[kSlices][2];

// Waits until at most kPending groups are in flight, keeping `e` alive until
// then. The instruction reads its metadata register asynchronously, like its
// accumulators, but the compiler knows only the accumulators: without this,
// it would reuse the registers of a group still in flight for the next
// step's metadata (wrong products, seen on the H200). A step's metadata
// therefore lives in one of two register sets, passed here as the set of the
// group being waited for.
template <int kPending>
__device__ __forceinline__ void wgmma_wait(const MetaRegs& e) {
  static_assert(kSlices == 2, "one register per slice and k32 below");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending), "r"(e[0][0]), "r"(e[0][1]), "r"(e[1][0]),
               "r"(e[1][1])
               : "memory");
}

// ---- mbarriers and TMA ----------------------------------------------------

__device__ __forceinline__ void barrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void barrier_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nretry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra retry;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// A 2-D box of `map` at (inner, outer) into shared memory, completing `bar`'s
// transaction bytes.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int inner, int outer, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// ---- metadata ---------------------------------------------------------------

// A thread's metadata rows (g and g + 8 of its warp's 16) in one m64 slice
// for one step: the four words of each, columns 16 j .. 16 j + 15 in word j.
struct MetaRows {
  uint2 lo, hi;
};

struct MetaReader {
  const uint16_t* lo;  // this step's words of row g
  int64_t words;       // per row of S
  bool lo_valid, hi_valid;

  __device__ MetaRows load() const {
    const uint2 pad = make_uint2(kPadMeta, kPadMeta);
    return {lo_valid ? __ldg(reinterpret_cast<const uint2*>(lo)) : pad,
            hi_valid ? __ldg(reinterpret_cast<const uint2*>(lo + 8 * words)) : pad};
  }
};

// The register of k32 slice `ks` (words 2 ks and 2 ks + 1): lane 4g + p takes
// word 2 ks + p of row g in its low half and of row g + 8 in its high half.
__device__ __forceinline__ uint32_t meta_register(const MetaRows& m, int ks, int p) {
  const uint32_t lo = ks == 0 ? m.lo.x : m.lo.y;
  const uint32_t hi = ks == 0 ? m.hi.x : m.hi.y;
  return __byte_perm(lo, hi, p == 0 ? 0x5410 : 0x7632);
}

struct Maps {
  CUtensorMap s;  // S's values [rows, cols / 2]: boxes of 32 x kTileR, 64-byte swizzle
  CUtensorMap x;  // x [m, cols]: boxes of 64 x kTileM, 128-byte swizzle
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    nm24_wgmma_kernel(const __grid_constant__ Maps maps, const Nm24ProductArgs<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const uint32_t base = smem_u32(smem);
  const uint32_t full = base + kStages * kStageBytes, empty = full + kStages * 8;
  const int tid = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTileR, m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int steps = static_cast<int>(p.cols / kStep);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full + 8 * s, 1);
      barrier_init(empty + 8 * s, kConsumers / 32);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid >= kConsumers) {
    // The loading warpgroup: one thread issues every copy.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid == kConsumers) {
      for (int step = 0; step < steps; ++step) {
        const int s = step % kStages;
        barrier_wait(empty + 8 * s, ((step / kStages) & 1) ^ 1);
        barrier_expect(full + 8 * s, kStageBytes);
        const uint32_t st = base + s * kStageBytes;
        tma_load(st, &maps.s, step * (kStep / 2), static_cast<int>(r0), full + 8 * s);
        tma_load(st + kSBytes, &maps.x, step * kStep, static_cast<int>(m0), full + 8 * s);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");

  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, pair = lane % 2;
  // Consumer warpgroup wg owns the tile's rows wg * 64 kSlices .. + 64 kSlices.
  const int wg_row = wg * 64 * kSlices;
  MetaReader meta_in[kSlices];
  MetaRows meta[kSlices];
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl) {
    const int64_t row = r0 + wg_row + sl * 64 + warp * 16 + g;
    meta_in[sl] = {p.meta + row * (p.cols / 16), p.cols / 16, row < p.rows, row + 8 < p.rows};
    meta[sl] = meta_in[sl].load();
  }
  float acc[kSlices][64];
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (float& v : acc[sl]) v = 0.0f;

  auto run_step = [&](int step, MetaRegs& e, const MetaRegs& e_last) {
    const int s = step % kStages;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) e[sl][ks] = meta_register(meta[sl], ks, pair);
    if (step + 1 < steps) {
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl) {
        meta_in[sl].lo += kStep / 16;
        meta[sl] = meta_in[sl].load();
      }
    }
    barrier_wait(full + 8 * s, (step / kStages) & 1);
    const uint32_t st = base + s * kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const uint64_t b = sw128_desc(st + kSBytes + ks * 64);
#pragma unroll
      for (int sl = 0; sl < kSlices; ++sl) {
        const uint64_t a = sw64_desc(st + (wg_row + sl * 64) * kSRowBytes + ks * 32);
        wgmma_sp<T>(acc[sl], a, b, e[sl][ks]);
      }
    }
    wgmma_commit();
    wgmma_wait<1>(e_last);  // the last step's group is done: its stage and metadata registers are free
    if (step > 0 && lane == 0) barrier_arrive(empty + 8 * ((step - 1) % kStages));
  };
  MetaRegs e_even, e_odd;
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl) e_odd[sl][0] = e_odd[sl][1] = kPadMeta;
  for (int step = 0; step < steps; step += 2) {
    run_step(step, e_even, e_odd);
    if (step + 1 < steps) run_step(step + 1, e_odd, e_even);
  }
  wgmma_wait<0>(e_even);
  wgmma_wait<0>(e_odd);
  // Both consumer warpgroups are done with the ring (the loader has nothing
  // left in flight: every stage it filled was waited for).
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");

  // The tile, transposed into [x row][S row] f32: accumulators 4j and 4j + 1
  // are S row g of the warp's 16 and x rows 8j + 2t, 8j + 2t + 1; 4j + 2 and
  // 4j + 3 S row g + 8.
  float* tile = reinterpret_cast<float*>(smem);
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
  // Runs of 8 along out's rows: bias and relu, rounded once, 16-byte stores
  // where the run is whole and aligned.
  constexpr int kRuns = kTileR / 8;
  const bool vec_rows = p.rows % 8 == 0;
  for (int c = tid; c < kTileM * kRuns; c += kConsumers) {
    const int m = c / kRuns, rr = (c % kRuns) * 8;
    if (m0 + m >= p.m || r0 + rr >= p.rows) continue;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = tile[m * kPitchOut + rr + j];
      if (p.bias != nullptr && r0 + rr + j < p.rows) v[j] += to_float(p.bias[r0 + rr + j]);
      if (p.relu) v[j] = fmaxf(v[j], 0.0f);
    }
    T* dst = p.out + (m0 + m) * p.rows + r0 + rr;
    if (vec_rows && r0 + rr + 8 <= p.rows) {
      alignas(16) T run[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) run[j] = from_float<T>(v[j]);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(run);
    } else {
      for (int j = 0; j < 8 && r0 + rr + j < p.rows; ++j) dst[j] = from_float<T>(v[j]);
    }
  }
#endif
}

// cuTensorMapEncodeTiled, from the driver the runtime loaded (the library
// does not link libcuda itself).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    COPPICE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found),
                       "nm24 wgmma product");
    if (found != cudaDriverEntryPointSuccess || f == nullptr) {
      COPPICE_CUDA_CHECK(cudaErrorNotSupported, "nm24 wgmma product: cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A row-major [outer, inner] matrix of 16-bit elements in boxes of
// box_inner x box_outer, zeros outside.
CUtensorMap tensor_map(const void* data, int64_t inner, int64_t outer, int box_inner, int box_outer,
                       CUtensorMapSwizzle swizzle, CUtensorMapDataType type) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(inner) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner), static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) COPPICE_CUDA_CHECK(cudaErrorInvalidValue, "nm24 wgmma product: cuTensorMapEncodeTiled");
  return map;
}

}  // namespace

bool nm24_wgmma_runs(int64_t cols) {
  if (cols % kNm24WgmmaStepCols != 0) return false;
  int device = 0;
  COPPICE_CUDA_CHECK(cudaGetDevice(&device), "nm24 wgmma");
  int major = 0, minor = 0;
  COPPICE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "nm24 wgmma");
  COPPICE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "nm24 wgmma");
  return major == 9 && minor == 0;
}

template <typename T>
void nm24_product_wgmma(const Nm24ProductArgs<T>& args, cudaStream_t stream) {
  if (args.m == 0 || args.rows == 0) return;
  static const bool configured = [] {
    COPPICE_CUDA_CHECK(
        cudaFuncSetAttribute(nm24_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
        "nm24 wgmma product");
    return true;
  }();
  (void)configured;
  const CUtensorMapDataType type =
      std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  Maps maps;
  maps.s = tensor_map(args.values, args.cols / 2, args.rows, kStep / 2, kTileR, CU_TENSOR_MAP_SWIZZLE_64B, type);
  maps.x = tensor_map(args.x, args.cols, args.m, kStep, kTileM, CU_TENSOR_MAP_SWIZZLE_128B, type);
  const dim3 grid(static_cast<unsigned>((args.rows + kTileR - 1) / kTileR),
                  static_cast<unsigned>((args.m + kTileM - 1) / kTileM));
  nm24_wgmma_kernel<T><<<grid, kThreads, kSmemBytes, stream>>>(maps, args);
  cuda::check_launch("nm24 wgmma product");
}

template void nm24_product_wgmma<__nv_bfloat16>(const Nm24ProductArgs<__nv_bfloat16>&, cudaStream_t);
template void nm24_product_wgmma<__half>(const Nm24ProductArgs<__half>&, cudaStream_t);

}  // namespace coppice::sparse_cuda
