// What sparse mma.sync can reach on this GPU, and which metadata register
// layout it reads: the bound behind the 2:4 kernels of sparse/cuda/nm24_mma.cu.
// A measurement, not a product kernel: nothing in Coppice calls it.
//
// 1. Layout: one warp multiplies a random 2:4 A [16, 32] by B [32, 8] with
//    mma.sp m16n8k32 (bf16), the metadata register assembled two ways, and
//    compares with the product on the host:
//      "chunk": lane 4g + p holds the words of rows g (low 16 bits) and g + 8
//               (high) for columns 16p..16p+15 (what nm24_mma.cu assumes);
//      "row":   lane 4g holds row g's two words, lane 4g + 1 row g + 8's.
// 2. Rates: every SM runs warps that issue independent chains of dense
//    mma.sync m16n8k16 or sparse mma.sp m16n8k32 (bf16 in, f32 out) from
//    registers, no memory traffic, at 32 warps per SM and at the 8 that
//    nm24_mma.cu's kernel keeps resident; and warpgroups that issue dense
//    wgmma m64n128k16 or sparse wgmma m64n128k32 from shared memory
//    (garbage operands: only the rate counts). TFLOP/s counted as
//    dense-equivalent work (2 m n k, k the dense width), beside cuBLAS's
//    dense bf16 GEMM of 4096^3 in the same run.
//
// Build (here, no GPU needed) and run (lent GPU, carry [".devbin_exp"]):
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a \
//     -o .devbin_exp/mma_sp_rate tools/device/experiments/mma_sp_rate.cu -lcublas
//   .devbin_exp/mma_sp_rate
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

__device__ __forceinline__ void mma_sp(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[4], uint32_t e) {
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}

__device__ __forceinline__ void mma_dense(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// values [16][16] (stored), meta [16][2] words, b [8][32] (column n's 32 k).
__global__ void layout_kernel(const __nv_bfloat16* values, const uint16_t* meta, const __nv_bfloat16* b, int mode,
                              float* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto v2 = [&](int r, int c) {
    return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&values[r * 16 + c])) |
           (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&values[r * 16 + c + 1])) << 16);
  };
  uint32_t a[4] = {v2(g, 2 * t), v2(g + 8, 2 * t), v2(g, 2 * t + 8), v2(g + 8, 2 * t + 8)};
  auto b2 = [&](int k) {
    return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&b[g * 32 + k])) |
           (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&b[g * 32 + k + 1])) << 16);
  };
  uint32_t bb[4] = {b2(2 * t), b2(2 * t + 8), b2(2 * t + 16), b2(2 * t + 24)};
  uint32_t e;
  const int p = lane % 2;
  if (mode == 0) {
    e = meta[g * 2 + p] | (static_cast<uint32_t>(meta[(g + 8) * 2 + p]) << 16);
  } else {
    const int row = p == 0 ? g : g + 8;
    e = meta[row * 2] | (static_cast<uint32_t>(meta[row * 2 + 1]) << 16);
  }
  float c[4] = {0, 0, 0, 0};
  mma_sp(c, a, bb, e);
  out[g * 8 + 2 * t] = c[0];
  out[g * 8 + 2 * t + 1] = c[1];
  out[(g + 8) * 8 + 2 * t] = c[2];
  out[(g + 8) * 8 + 2 * t + 1] = c[3];
}

__device__ __forceinline__ void wgmma_sp_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
      "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, %66, 0, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(e));
}
__device__ __forceinline__ void wgmma_dense_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
      "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
      "%57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db));
}

// A shared-memory matrix descriptor without swizzling (the rate probe's
// operands are garbage; only the address must be valid).
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{256 >> 4} << 32);
}

template <bool kSparse>
__global__ void wgmma_rate_kernel(int iters, float* sink) {
  __shared__ __align__(1024) __nv_bfloat16 operands[64 * 32 + 128 * 32];
  for (int i = threadIdx.x; i < 64 * 32 + 128 * 32; i += blockDim.x) operands[i] = __float2bfloat16(0.0f);
  __syncthreads();
  const uint64_t da = smem_desc(operands), db = smem_desc(operands + 64 * 32);
  float d[64];
  for (float& v : d) v = 0.0f;
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if constexpr (kSparse) {
        wgmma_sp_m64n128k32(d, da, db, 0x44444444u);
      } else {
        wgmma_dense_m64n128k16(d, da, db);
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  float s = 0;
  for (float v : d) s += v;
  if (s == 12345.0f) sink[threadIdx.x] = s;
}

template <bool kSparse>
double wgmma_tflops(int sms) {
  float* sink;
  CHECK(cudaMalloc(&sink, 1024 * sizeof(float)));
  const int iters = 2048, blocks = sms * 2;
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  wgmma_rate_kernel<kSparse><<<blocks, 128>>>(iters, sink);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(t0));
  wgmma_rate_kernel<kSparse><<<blocks, 128>>>(iters, sink);
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  CHECK(cudaFree(sink));
  const double flops = double(blocks) * iters * 8 * 2.0 * 64 * 128 * (kSparse ? 32 : 16);
  return flops / (ms * 1e-3) / 1e12;
}

constexpr int kChains = 8;

template <bool kSparse>
__global__ void rate_kernel(int iters, float* sink) {
  uint32_t a[4], b[4];
  for (int i = 0; i < 4; ++i) {
    a[i] = 0x3F803F80u ^ threadIdx.x;
    b[i] = 0x3F803F80u ^ (threadIdx.x * 7);
  }
  const uint32_t e = 0x44444444u;
  float c[kChains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < kChains; ++j) {
      if constexpr (kSparse) {
        mma_sp(c[j], a, b, e);
      } else {
        mma_dense(c[j], a, b[0], b[1]);
      }
    }
  }
  float s = 0;
  for (int j = 0; j < kChains; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 12345.0f) sink[threadIdx.x] = s;
}

template <bool kSparse>
double rate_tflops(int sms, int warps_per_sm) {
  float* sink;
  CHECK(cudaMalloc(&sink, 1024 * sizeof(float)));
  const int iters = 4096, warps_per_block = 8, blocks = sms * warps_per_sm / warps_per_block;
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  rate_kernel<kSparse><<<blocks, warps_per_block * 32>>>(iters, sink);
  CHECK(cudaEventRecord(t0));
  rate_kernel<kSparse><<<blocks, warps_per_block * 32>>>(iters, sink);
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  const double instr = double(blocks) * warps_per_block * iters * kChains;
  const double flops = instr * 2.0 * 16 * 8 * (kSparse ? 32 : 16);  // dense-equivalent
  CHECK(cudaFree(sink));
  return flops / (ms * 1e-3) / 1e12;
}

double cublas_tflops() {
  const int n = 4096;
  __nv_bfloat16 *a, *b, *c;
  CHECK(cudaMalloc(&a, size_t(n) * n * 2));
  CHECK(cudaMalloc(&b, size_t(n) * n * 2));
  CHECK(cudaMalloc(&c, size_t(n) * n * 2));
  CHECK(cudaMemset(a, 0, size_t(n) * n * 2));
  CHECK(cudaMemset(b, 0, size_t(n) * n * 2));
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1, zero = 0;
  auto run = [&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero, c,
                 CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < 5; ++i) run();
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaEventRecord(t0));
  for (int i = 0; i < 20; ++i) run();
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  cublasDestroy(h);
  return 2.0 * n * double(n) * n / (ms / 20 * 1e-3) / 1e12;
}

}  // namespace

int main() {
  // 1. The metadata layout.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<__nv_bfloat16> values(16 * 16), b(8 * 32);
  std::vector<uint16_t> meta(16 * 2);
  std::vector<float> dense(16 * 32, 0.0f);
  const int pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  for (int r = 0; r < 16; ++r) {
    for (int grp = 0; grp < 8; ++grp) {
      const int* pr = pairs[rng() % 6];
      for (int s = 0; s < 2; ++s) {
        const __nv_bfloat16 v = __float2bfloat16(u(rng));
        values[r * 16 + grp * 2 + s] = v;
        dense[r * 32 + grp * 4 + pr[s]] = __bfloat162float(v);
      }
      meta[r * 2 + grp / 4] |= static_cast<uint16_t>((pr[0] | (pr[1] << 2)) << (4 * (grp % 4)));
    }
  }
  for (auto& v : b) v = __float2bfloat16(u(rng));
  std::vector<float> want(16 * 8, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 32; ++k) want[r * 8 + n] += dense[r * 32 + k] * __bfloat162float(b[n * 32 + k]);
  __nv_bfloat16 *dv, *db;
  uint16_t* dm;
  float* dout;
  CHECK(cudaMalloc(&dv, values.size() * 2));
  CHECK(cudaMalloc(&db, b.size() * 2));
  CHECK(cudaMalloc(&dm, meta.size() * 2));
  CHECK(cudaMalloc(&dout, 16 * 8 * 4));
  CHECK(cudaMemcpy(dv, values.data(), values.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dm, meta.data(), meta.size() * 2, cudaMemcpyHostToDevice));
  for (int mode = 0; mode < 2; ++mode) {
    layout_kernel<<<1, 32>>>(dv, dm, db, mode, dout);
    std::vector<float> got(16 * 8);
    CHECK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int i = 0; i < 16 * 8; ++i) worst = std::fmax(worst, std::fabs(got[i] - want[i]));
    std::printf("{\"probe\": \"metadata layout\", \"layout\": \"%s\", \"max_abs_error\": %.3g, \"matches\": %s}\n",
                mode == 0 ? "chunk" : "row", worst, worst < 1e-3 ? "true" : "false");
  }
  // 2. The rates.
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const double dense_rate = rate_tflops<false>(sms, 32), sparse = rate_tflops<true>(sms, 32);
  const double sparse8 = rate_tflops<true>(sms, 8);
  const double wg_dense = wgmma_tflops<false>(sms), wg_sparse = wgmma_tflops<true>(sms);
  const double blas = cublas_tflops();
  std::printf(
      "{\"probe\": \"rates\", \"gpu\": \"%s\", \"mma_sync_dense_tflops\": %.0f, \"mma_sp_dense_equivalent_tflops\": "
      "%.0f, \"mma_sp_at_8_warps_per_sm_tflops\": %.0f, \"wgmma_dense_tflops\": %.0f, "
      "\"wgmma_sp_dense_equivalent_tflops\": %.0f, \"cublas_bf16_4096_tflops\": %.0f, \"mma_sp_over_cublas\": %.2f, "
      "\"wgmma_sp_over_cublas\": %.2f}\n",
      prop.name, dense_rate, sparse, sparse8, wg_dense, wg_sparse, blas, sparse / blas, wg_sparse / blas);
  return 0;
}
