// A quick check of sparse/cuda/nm24_wgmma.cu outside the library: products
// of random 2:4 weights against a host reference (small shapes, partial
// tiles, bias and relu) and against cuBLAS on the decompressed weight (4096
// shapes), then the time of the wgmma kernel, the mma.sp kernel
// (nm24_mma.cu) and cuBLAS's dense bf16 GEMM of the same shape in one run.
// The product tests of the library (tests/sparse/cuda/nm24_mma_test.cc) are
// the real parity tests; this is the loop for working on the kernel.
//
// Build (here) and run (lent GPU, carry [".devbin_exp"]):
//   nvcc -std=c++17 -O3 -I. -gencode arch=compute_90a,code=sm_90a -o .devbin_exp/nm24_wgmma_check \
//     tools/device/experiments/nm24_wgmma_check.cu sparse/cuda/nm24_wgmma.cu sparse/cuda/nm24_mma.cu \
//     sparse/cuda/nm24_pack.cu -lcublas
//   .devbin_exp/nm24_wgmma_check
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/cuda/nm24_mma.h"
#include "sparse/cuda/nm24_pack.h"
#include "sparse/cuda/nm24_wgmma.h"
#include "tensor/cuda/cuda_check.h"

// The library's error helpers, standing in for tensor/cuda/cuda_check.cc.
namespace coppice::cuda {
void check_cuda(cudaError_t err, std::string_view op, std::string_view what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%.*s: %s (%.*s)\n", int(op.size()), op.data(), cudaGetErrorString(err), int(what.size()),
                 what.data());
    std::exit(1);
  }
}
void check_launch(std::string_view op) { check_cuda(cudaGetLastError(), op, "launch"); }
}  // namespace coppice::cuda

using coppice::sparse_cuda::Nm24ProductArgs;
using T = __nv_bfloat16;

#define CHECK(x) coppice::cuda::check_cuda((x), "check", #x)

namespace {

struct Weight {
  std::vector<T> values;         // [rows, cols / 2]
  std::vector<uint16_t> meta;    // [rows, cols / 16]
  std::vector<float> dense;      // [rows, cols]
  std::vector<uint8_t> indices;  // [rows, cols / 2]
};

Weight random_weight(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  const int pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  Weight w;
  w.values.resize(rows * cols / 2);
  w.meta.assign(rows * cols / 16, 0);
  w.dense.assign(rows * cols, 0.0f);
  w.indices.resize(rows * cols / 2);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t grp = 0; grp < cols / 4; ++grp) {
      const int* pr = pairs[rng() % 6];
      for (int s = 0; s < 2; ++s) {
        const T v = __float2bfloat16(u(rng));
        w.values[r * cols / 2 + grp * 2 + s] = v;
        w.indices[r * cols / 2 + grp * 2 + s] = static_cast<uint8_t>(pr[s]);
        w.dense[r * cols + grp * 4 + pr[s]] = __bfloat162float(v);
      }
      w.meta[r * cols / 16 + grp / 4] |= static_cast<uint16_t>((pr[0] | (pr[1] << 2)) << (4 * (grp % 4)));
    }
  }
  return w;
}

template <typename V>
V* to_device(const std::vector<V>& h) {
  V* d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(V) + 16));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(V), cudaMemcpyHostToDevice));
  return d;
}

uint32_t* wgmma_meta(const uint16_t* meta, int64_t rows, int64_t cols) {
  uint32_t* out = nullptr;
  CHECK(cudaMalloc(&out, coppice::sparse_cuda::nm24_wgmma_metadata_words(rows, cols) * 4));
  coppice::sparse_cuda::nm24_wgmma_metadata(meta, out, rows, cols, nullptr);
  return out;
}

struct Run {
  T *x, *values, *bias, *out;
  uint16_t* meta;
  Nm24ProductArgs<T> args(int64_t m, int64_t rows, int64_t cols, bool with_bias, bool relu) const {
    Nm24ProductArgs<T> a;
    a.x = x;
    a.values = values;
    a.meta = meta;
    a.bias = with_bias ? bias : nullptr;
    a.relu = relu;
    a.out = out;
    a.m = m;
    a.rows = rows;
    a.cols = cols;
    return a;
  }
};

// Small shapes against the host.
bool check_small(int64_t m, int64_t rows, int64_t cols, bool with_bias, bool relu, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  const Weight w = random_weight(rows, cols, rng);
  std::vector<T> x(m * cols), bias(rows);
  for (auto& v : x) v = __float2bfloat16(u(rng));
  for (auto& v : bias) v = __float2bfloat16(u(rng));
  Run run{to_device(x), to_device(w.values), to_device(bias), nullptr, to_device(w.meta)};
  CHECK(cudaMalloc(&run.out, m * rows * sizeof(T)));
  uint32_t* wm = wgmma_meta(run.meta, rows, cols);
  coppice::sparse_cuda::nm24_product_wgmma<T>(run.args(m, rows, cols, with_bias, relu), wm, nullptr);
  CHECK(cudaDeviceSynchronize());
  std::vector<T> got(m * rows);
  CHECK(cudaMemcpy(got.data(), run.out, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double want = with_bias ? __bfloat162float(bias[r]) : 0.0;
      for (int64_t k = 0; k < cols; ++k) want += double(__bfloat162float(x[i * cols + k])) * w.dense[r * cols + k];
      if (relu) want = std::fmax(want, 0.0);
      const double err = std::fabs(__bfloat162float(got[i * rows + r]) - want) / (1.0 + std::fabs(want));
      worst = std::fmax(worst, err);
    }
  }
  const bool ok = worst < 2e-2;
  if (!ok && !with_bias && !relu) {
    // Which per-step combination the result is: step j's contribution alone, or the sum without one step.
    const int64_t steps = cols / 64;
    for (int64_t j = 0; j < steps; ++j) {
      double only = 0, without = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          double cj = 0, all = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const double t = double(__bfloat162float(x[i * cols + k])) * w.dense[r * cols + k];
            all += t;
            if (k / 64 == j) cj += t;
          }
          const double g = __bfloat162float(got[i * rows + r]);
          only = std::fmax(only, std::fabs(g - cj) / (1 + std::fabs(cj)));
          without = std::fmax(without, std::fabs(g - (all - cj)) / (1 + std::fabs(all - cj)));
        }
      }
      std::printf("{\"diagnose\": \"step %lld\", \"err_if_only_this_step\": %.3g, \"err_if_without_it\": %.3g}\n",
                  (long long)j, only, without);
    }
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t r = 0; r < 4; ++r) {
        double want = 0;
        for (int64_t k = 0; k < cols; ++k) want += double(__bfloat162float(x[i * cols + k])) * w.dense[r * cols + k];
        std::printf("{\"sample\": [%lld, %lld], \"got\": %.4f, \"want\": %.4f}\n", (long long)i, (long long)r,
                    __bfloat162float(got[i * rows + r]), want);
      }
  }
  std::printf(
      "{\"check\": \"host\", \"m\": %lld, \"rows\": %lld, \"cols\": %lld, \"bias\": %d, \"relu\": %d, "
      "\"max_rel_error\": %.3g, \"ok\": %s}\n",
      (long long)m, (long long)rows, (long long)cols, with_bias, relu, worst, ok ? "true" : "false");
  cudaFree(run.x);
  cudaFree(run.values);
  cudaFree(run.bias);
  cudaFree(run.out);
  cudaFree(run.meta);
  return ok;
}

template <typename F>
float time_ms(F f, int reps = 20) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaEventRecord(t0));
  for (int i = 0; i < reps; ++i) f();
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  return ms / reps;
}

// The 4096 shape: wgmma against cuBLAS on the decompressed weight, then times.
bool check_large(int64_t m, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  const Weight w = random_weight(rows, cols, rng);
  std::vector<T> x(m * cols), dense(rows * cols);
  for (auto& v : x) v = __float2bfloat16(u(rng));
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = __float2bfloat16(w.dense[i]);
  Run run{to_device(x), to_device(w.values), nullptr, nullptr, to_device(w.meta)};
  CHECK(cudaMalloc(&run.out, m * rows * sizeof(T)));
  T* d_dense = to_device(dense);
  T* ref = nullptr;
  CHECK(cudaMalloc(&ref, m * rows * sizeof(T)));
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1, zero = 0;
  // ref [m, rows] row-major = x [m, cols] @ dense^T: column-major ref^T [rows, m] = dense (col-major [cols, rows])^T
  // x^T.
  auto blas = [&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, m, cols, &one, d_dense, CUDA_R_16BF, cols, run.x, CUDA_R_16BF, cols,
                 &zero, ref, CUDA_R_16BF, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const auto args = run.args(m, rows, cols, false, false);
  uint32_t* wm = wgmma_meta(run.meta, rows, cols);
  auto wgmma = [&] { coppice::sparse_cuda::nm24_product_wgmma<T>(args, wm, nullptr); };
  auto mma_sp = [&] { coppice::sparse_cuda::nm24_product<T>(args, nullptr); };
  blas();
  wgmma();
  CHECK(cudaDeviceSynchronize());
  std::vector<T> got(m * rows), want(m * rows);
  CHECK(cudaMemcpy(got.data(), run.out, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), ref, want.size() * sizeof(T), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = __bfloat162float(got[i]), b = __bfloat162float(want[i]);
    worst = std::fmax(worst, std::fabs(a - b) / (1.0 + std::fabs(b)));
  }
  const bool ok = worst < 3e-2;
  // dx's preparation of W^T at every call: the transposed pack (valid only
  // for transposable patterns; here only its time counts) and the wgmma
  // metadata order.
  uint8_t* d_idx = to_device(w.indices);
  T* values_t = nullptr;
  uint16_t* meta_t = nullptr;
  CHECK(cudaMalloc(&values_t, rows * cols));
  CHECK(cudaMalloc(&meta_t, rows * cols / 8));
  auto pack = [&] {
    coppice::sparse_cuda::nm24_pack_transposed<T>(run.values, d_idx, values_t, meta_t, rows, cols, nullptr);
  };
  auto reorder = [&] { coppice::sparse_cuda::nm24_wgmma_metadata(run.meta, wm, rows, cols, nullptr); };
  const float t_pack = time_ms(pack), t_reorder = time_ms(reorder);
  std::printf("{\"prepare_dx\": \"%lldx%lld\", \"transposed_pack_ms\": %.4f, \"wgmma_metadata_ms\": %.4f}\n",
              (long long)rows, (long long)cols, t_pack, t_reorder);
  cudaFree(d_idx);
  cudaFree(values_t);
  cudaFree(meta_t);
  const float t_blas = time_ms(blas), t_wgmma = time_ms(wgmma), t_mma = time_ms(mma_sp);
  const double flops = 2.0 * m * rows * cols;
  std::printf(
      "{\"check\": \"cublas\", \"m\": %lld, \"rows\": %lld, \"cols\": %lld, \"max_rel_error\": %.3g, "
      "\"ok\": %s, \"cublas_ms\": %.4f, \"wgmma_ms\": %.4f, \"mma_sp_ms\": %.4f, "
      "\"wgmma_over_cublas\": %.2f, \"mma_sp_over_cublas\": %.2f, \"wgmma_dense_equiv_tflops\": %.0f}\n",
      (long long)m, (long long)rows, (long long)cols, worst, ok ? "true" : "false", t_blas, t_wgmma, t_mma,
      t_blas / t_wgmma, t_blas / t_mma, flops / (t_wgmma * 1e-3) / 1e12);
  cublasDestroy(h);
  cudaFree(run.x);
  cudaFree(run.values);
  cudaFree(run.out);
  cudaFree(run.meta);
  cudaFree(d_dense);
  cudaFree(ref);
  return ok;
}

}  // namespace

int main() {
  std::mt19937 rng(11);
  bool ok = true;
  ok &= check_small(128, 128, 128, false, false, rng);
  ok &= check_small(64, 128, 256, false, false, rng);
  ok &= check_small(200, 256, 384, true, true, rng);
  ok &= check_small(77, 136, 128, true, false, rng);
  ok &= check_small(100, 300, 64, false, true, rng);
  ok &= check_small(129, 520, 192, true, false, rng);
  ok &= check_large(4096, 4096, 4096, rng);
  ok &= check_large(8192, 4096, 4096, rng);
  ok &= check_large(4096, 16384, 4096, rng);
  std::printf("{\"all_ok\": %s}\n", ok ? "true" : "false");
  return ok ? 0 : 1;
}
