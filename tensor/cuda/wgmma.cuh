// The PTX building blocks of Hopper's warpgroup MMA (wgmma.mma_async,
// sm_90a only: include this from sources built for sm_90a alone), shared by
// sparse/attention/cuda/attention_sm90.cu, sparse/cuda/nm24_wgmma.cu,
// sparse/cuda/bsr_wgmma.cu and sparse/cuda/bsr_wgmma32.cu. Device code only.
//
// Operands in shared memory are described by matrix descriptors; most tiles
// here use the 128-byte swizzle (tiles of 32-wide rows the 64-byte one,
// sw64_offset below): rows of 128 bytes (64 16-bit values), the
// 16-byte chunk c of row r stored at chunk c ^ (r % 8), eight rows (1024
// bytes, aligned to 1024) to a swizzle atom. The same bytes serve as a
// "K-major" operand (the instruction's k along the row: advance the
// descriptor by 32 bytes a k16 step) and as an "MN-major" one (k down the
// rows, the instruction's n or m along them, read with the transpose flag:
// advance by 16 rows, 2048 bytes, a k16 step), for n or m of 64.
//
// A fragments in registers: write them in the loop iteration whose products
// read them. Fragments loaded once before a loop and read by a product in
// every iteration came back corrupted from the second on (ptxas, CUDA 13.0,
// gave their registers to other values after the first product).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace coppice::cuda {

// Where 16-byte chunk `chunk` of row `row` lies in a 128-byte-swizzled tile.
__device__ __forceinline__ int sw128_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// The descriptor of a 128-byte-swizzled operand at shared address `addr`
// (layout type 1; 1024 bytes from one group of eight rows to the next; no
// leading offset: with 64-wide rows an instruction never crosses a swizzle
// atom along them).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

// The 64-byte swizzle, for tiles whose rows are 32 16-bit values (a 32x32
// block, or a [tokens, 32] slice of x): 16-byte chunk c of row r at chunk
// c ^ ((r / 2) % 4), eight rows (512 bytes, aligned to 512) to an atom, as
// TMA's CU_TENSOR_MAP_SWIZZLE_64B writes them. As with the 128-byte one, a
// K-major operand advances 32 bytes a k16 step and an MN-major one 16 rows
// (1024 bytes), for n or m of 32.
__device__ __forceinline__ int sw64_offset(int row, int chunk) { return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4); }

// The descriptor of a 64-byte-swizzled operand at shared address `addr`
// (layout type 2; 512 bytes from one group of eight rows to the next). An
// operand of 32-wide rows needs no leading offset; an MN-major one of m 64
// is two 32-wide tiles side by side, `leading` bytes apart (the canonical
// layout's stride from one swizzle width along M to the next).
__device__ __forceinline__ uint64_t sw64_desc(uint32_t addr, uint32_t leading = 0) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(leading >> 4) << 16) |
         (static_cast<uint64_t>(512 >> 4) << 32) | (2ull << 62);
}

// The descriptor `bytes` further on (a multiple of 16): the start address is its low field.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, int bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Registers among a thread block of kThreads (__launch_bounds__(kThreads,
// 1)) whose last warpgroup loads (one thread issues TMA copies) and whose
// others multiply: the loader gives registers back (loader(), setmaxnreg.dec
// to kLoaderRegs) and the multipliers take them (consumer(), .inc to
// kConsumerRegs). setmaxnreg moves registers only within the thread block,
// out of what it got at launch (an equal share of the SM's 65536, in steps
// of 8): an increase past what the loader gave back waits forever (a
// 640-thread block asking 112 for its consumers against the loader's 64
// hung), so the split is checked here when the kernel is built.
template <int kThreads, int kLoaderRegs, int kConsumerRegs>
struct RegisterSplit {
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kThreads % 128 == 0 && kLoaderRegs % 8 == 0 && kConsumerRegs % 8 == 0 && kLoaderRegs >= 24 &&
                    kConsumerRegs <= 256,
                "setmaxnreg takes multiples of 8 in [24, 256], a warpgroup at a time");
  static_assert(kLoaderRegs <= kLaunchRegs && kConsumerRegs >= kLaunchRegs, "the loader gives, the consumers take");
  static_assert(128 * kLoaderRegs + (kThreads - 128) * kConsumerRegs <= kThreads * kLaunchRegs,
                "the consumers take more registers than the loader gives back");
  __device__ static __forceinline__ void loader() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kLoaderRegs));
  }
  __device__ static __forceinline__ void consumer() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  }
};

// Shared memory written by the threads (st.shared, cp.async) made visible to
// the async proxy that wgmma reads through; each writer fences, then the
// threads meet at a barrier before the instructions issue.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pins registers in place: the compiler may not move their writes past this
// point (nor reads before it). wgmma reads its accumulator and A registers
// asynchronously, so every write to them must be issued before wgmma_fence;
// a plain assignment just above the fence can otherwise sink below it and
// the instruction reads the registers' old values. Call on the accumulators
// and A fragments before wgmma_fence, and on the accumulators after
// wgmma_wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(r[i][e])::"memory");
  }
}
template <int P, int N>
__device__ __forceinline__ void fence_registers(float (&r)[P][N][4]) {
#pragma unroll
  for (int p = 0; p < P; ++p) fence_registers(r[p]);
}
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
  }
}

#define COPPICE_WGMMA_ACC32(m, d)                                                                                 \
  m(d[0][0]), m(d[0][1]), m(d[0][2]), m(d[0][3]), m(d[1][0]), m(d[1][1]), m(d[1][2]), m(d[1][3]), m(d[2][0]),     \
      m(d[2][1]), m(d[2][2]), m(d[2][3]), m(d[3][0]), m(d[3][1]), m(d[3][2]), m(d[3][3]), m(d[4][0]), m(d[4][1]), \
      m(d[4][2]), m(d[4][3]), m(d[5][0]), m(d[5][1]), m(d[5][2]), m(d[5][3]), m(d[6][0]), m(d[6][1]), m(d[6][2]), \
      m(d[6][3]), m(d[7][0]), m(d[7][1]), m(d[7][2]), m(d[7][3])
#define COPPICE_WGMMA_RS_64(type, scale_d)                                                                           \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." type "." type                                                        \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, " scale_d ", 1, 1, %37;\n"
#define COPPICE_WGMMA_READ_WRITE(x) "+f"(x)
#define COPPICE_WGMMA_WRITE(x) "=f"(x)

// d (64 x 64, f32; per warp its 16 rows as eight 16 x 8 fragments, the
// layout of mma.sync's accumulators) = A * B, or d += A * B with
// kAccumulate; A (64 x 16) from registers, per warp its 16 rows as mma.sync
// m16n8k16's A fragment; B (16 x 64) at descriptor b, kTransB when b is
// MN-major (n along its rows). T is __nv_bfloat16 or __half. Without
// kAccumulate d is only written, so nothing need clear it first.
template <typename T, bool kTransB, bool kAccumulate>
__device__ __forceinline__ void wgmma_64x64_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (kBf16 && kAccumulate) {
    asm volatile(COPPICE_WGMMA_RS_64("bf16", "1")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_READ_WRITE, d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB ? 1 : 0));
  } else if constexpr (kBf16) {
    asm volatile(COPPICE_WGMMA_RS_64("bf16", "0")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_WRITE, d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB ? 1 : 0));
  } else if constexpr (kAccumulate) {
    asm volatile(COPPICE_WGMMA_RS_64("f16", "1")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_READ_WRITE, d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB ? 1 : 0));
  } else {
    asm volatile(COPPICE_WGMMA_RS_64("f16", "0")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_WRITE, d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB ? 1 : 0));
  }
}
#define COPPICE_WGMMA_ACC64(m, d)                                                                                \
  COPPICE_WGMMA_ACC32(m, d), m(d[8][0]), m(d[8][1]), m(d[8][2]), m(d[8][3]), m(d[9][0]), m(d[9][1]), m(d[9][2]), \
      m(d[9][3]), m(d[10][0]), m(d[10][1]), m(d[10][2]), m(d[10][3]), m(d[11][0]), m(d[11][1]), m(d[11][2]),     \
      m(d[11][3]), m(d[12][0]), m(d[12][1]), m(d[12][2]), m(d[12][3]), m(d[13][0]), m(d[13][1]), m(d[13][2]),    \
      m(d[13][3]), m(d[14][0]), m(d[14][1]), m(d[14][2]), m(d[14][3]), m(d[15][0]), m(d[15][1]), m(d[15][2]),    \
      m(d[15][3])
#define COPPICE_WGMMA_SS_128(type)                                                                                   \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." type "." type                                                       \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                      \
  "%64, %65, 1, 1, 1, %66, 0;\n"
#define COPPICE_WGMMA_SS_64(type, scale_d)                                                                           \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." type "." type                                                        \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, " scale_d ", 1, 1, %34, %35;\n"

// d (64 x 128, f32; per warp its 16 rows, accumulators j the mma.sync
// fragment of columns 8j..8j+7) += A (64 x 16, descriptor a; kTransA: stored
// MN-major) * B (16 x 128, descriptor b of 128 K-major rows), both from
// shared memory.
template <typename T, bool kTransA>
__device__ __forceinline__ void wgmma_64x128_ss(float (&d)[16][4], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(COPPICE_WGMMA_SS_128("bf16")
                 : COPPICE_WGMMA_ACC64(COPPICE_WGMMA_READ_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0));
  } else {
    asm volatile(COPPICE_WGMMA_SS_128("f16")
                 : COPPICE_WGMMA_ACC64(COPPICE_WGMMA_READ_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0));
  }
}

// d (64 x 64, f32, the layout above) = A (64 x 16) * B (16 x 64), or d +=
// with kAccumulate, both from shared memory: descriptors a and b, kTransA /
// kTransB when that operand is stored MN-major (k down its tile's rows),
// K-major otherwise (k along them).
template <typename T, bool kTransA, bool kTransB, bool kAccumulate>
__device__ __forceinline__ void wgmma_64x64_ss(float (&d)[8][4], uint64_t a, uint64_t b) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (kBf16 && kAccumulate) {
    asm volatile(COPPICE_WGMMA_SS_64("bf16", "1")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_READ_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0), "n"(kTransB ? 1 : 0));
  } else if constexpr (kBf16) {
    asm volatile(COPPICE_WGMMA_SS_64("bf16", "0")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0), "n"(kTransB ? 1 : 0));
  } else if constexpr (kAccumulate) {
    asm volatile(COPPICE_WGMMA_SS_64("f16", "1")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_READ_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0), "n"(kTransB ? 1 : 0));
  } else {
    asm volatile(COPPICE_WGMMA_SS_64("f16", "0")
                 : COPPICE_WGMMA_ACC32(COPPICE_WGMMA_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0), "n"(kTransB ? 1 : 0));
  }
}
#define COPPICE_WGMMA_ACC16(m, d)                                                                             \
  m(d[0][0]), m(d[0][1]), m(d[0][2]), m(d[0][3]), m(d[1][0]), m(d[1][1]), m(d[1][2]), m(d[1][3]), m(d[2][0]), \
      m(d[2][1]), m(d[2][2]), m(d[2][3]), m(d[3][0]), m(d[3][1]), m(d[3][2]), m(d[3][3])
#define COPPICE_WGMMA_SS_32(type)                             \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." type "." type \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, 1, 1, 1, %18, %19;\n"

// d (64 x 32, f32, the layout above: accumulators j columns 8j..8j+7) += A
// (64 x 16, descriptor a) * B (16 x 32, descriptor b), both from shared
// memory in the 64-byte swizzle; kTransA / kTransB when that operand is
// stored MN-major, K-major otherwise.
template <typename T, bool kTransA, bool kTransB>
__device__ __forceinline__ void wgmma_64x32_ss(float (&d)[4][4], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(COPPICE_WGMMA_SS_32("bf16")
                 : COPPICE_WGMMA_ACC16(COPPICE_WGMMA_READ_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0), "n"(kTransB ? 1 : 0));
  } else {
    asm volatile(COPPICE_WGMMA_SS_32("f16")
                 : COPPICE_WGMMA_ACC16(COPPICE_WGMMA_READ_WRITE, d)
                 : "l"(a), "l"(b), "n"(kTransA ? 1 : 0), "n"(kTransB ? 1 : 0));
  }
}
#undef COPPICE_WGMMA_SS_32
#undef COPPICE_WGMMA_ACC16
#undef COPPICE_WGMMA_SS_64
#undef COPPICE_WGMMA_SS_128
#undef COPPICE_WGMMA_ACC64
#undef COPPICE_WGMMA_WRITE
#undef COPPICE_WGMMA_READ_WRITE
#undef COPPICE_WGMMA_RS_64
#undef COPPICE_WGMMA_ACC32

}  // namespace coppice::cuda
