// The benchmark suites. Each appends one Result per (device, dtype) it was
// asked for: measured, or with a status saying why not ("skipped: no CUDA
// device", "error: ...").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "tools/bench/bench_util.h"

namespace coppice::bench {

// Dense matmul [n, n] x [n, n]: 2 n^3 flops per call.
void run_gemm(const Config& config, std::vector<Result>* results);
// add of two tensors of numel elements: 3 * numel * itemsize bytes per call.
void run_elementwise(const Config& config, std::vector<Result>* results);

// SpMM: matmul(W sparse [m, k], X dense [k, n]) per format and sparsity, and
// the dense gemm of the same shape (op "dense_gemm"); 2 nnz n flops.
void run_spmm(const Config& config, std::vector<Result>* results);
// SDDMM: sddmm(A [m, k], B [k, n], pattern [m, n]) per pattern format and
// sparsity, and the full dense gemm A @ B (op "dense_gemm"); 2 nnz k flops.
void run_sddmm(const Config& config, std::vector<Result>* results);
// Sparsifiers on --numel f32 elements (tools/bench/sparsify_bench.cc): apply
// into dense and streaming masks, against a device copy of the same tensor.
void run_sparsify(const Config& config, std::vector<Result>* results);
// Data-parallel training steps (tools/bench/dp_bench.cc): one Result per
// variant (dense, compact, densified) on this rank. In a launched job
// (tools/launch, launch_env) every rank runs it; returns whether this rank
// is rank 0, the one that prints and writes the report.
bool run_dp(const Config& config, std::vector<Result>* results);
// Training steps (tools/bench/train_bench.cc): one Result per device, model,
// weight format and sparsity, and numeric mode (the Result's dtype: f32,
// tf32 or bf16).
void run_train(const Config& config, std::vector<Result>* results);
// A BSR linear layer's products (and their gelu forms) per block size, sparsity and 16-bit
// or TF32 mode, beside cuBLAS's dense product (tools/bench/bsr_bench.cc).
void run_bsr(const Config& config, std::vector<Result>* results);
// BSR-of-2:4 (issue 35's hybrid) beside BSR and 2:4 alone, the forward
// product at the MLP-4096 shapes (tools/bench/bsr_nm24_bench.cc).
void run_bsr_nm24(const Config& config, std::vector<Result>* results);
// A block-RigL mask-update step of the MLP beside its ordinary step
// (tools/bench/rigl_bench.cc).
void run_rigl(const Config& config, std::vector<Result>* results);
// Fused attention forward and backward, causal and block-sparse
// (tools/bench/attention_bench.cc).
void run_attention(const Config& config, std::vector<Result>* results);

// Shared by the suites.
struct DeviceCase {
  bool cuda;
  std::string label;  // "cpu", "cuda:0"
};
std::vector<DeviceCase> devices_to_run(const Config& config);
// Why CUDA cases are skipped, or "" when a GPU is there.
std::string cuda_skip_reason();
TimingOptions timing_options(const Config& config);
// Fills device_name and peak fields of `r` for its device.
void describe_device(bool cuda, DType dtype, const char* metric, Result* r);
// A row-major 0/1 pattern (random_pattern, random_block_pattern) as a bool
// [rows, cols] tensor on `device`.
Tensor mask_tensor(const std::vector<uint8_t>& mask, int64_t rows, int64_t cols, Device device);
// Uniform [0, 1) values of `dtype` on `device`, drawn on the CPU and copied
// (so a device without random kernels can still be timed).
Tensor random_input(const Shape& shape, DType dtype, Device device);
// One sparse benchmark shape: a pattern [rows, cols] with per-call flops
// 2 * nnz * flops_per_nnz / 2, and closures that set up the operands on a
// device and return the timed call.
struct SparseBench {
  std::string suite, op;
  int64_t m = 0, k = 0, n = 0;  // the Result shape [m, k, n]
  int64_t rows = 0, cols = 0;   // the sparse operand's shape
  int64_t flops_per_nnz = 0;    // n (spmm) or k (sddmm)
  std::function<std::function<void()>(const Tensor& sparse, Device device)> sparse_op;
  std::function<std::function<void()>(Device device)> dense_op;  // the dense gemm baseline
};
// Sparsities (fraction of zeros) the sparse suites run: 0.5 0.75 0.9 0.95 0.99.
const std::vector<double>& sparse_sparsities();
// The fixed seed of the pattern at `sparsity`.
uint64_t pattern_seed(double sparsity);
// Runs the dense baseline, then every (sparsity, format) of `b` on `dc`:
// csr, coo and bsr 32x32 (bsr with a block-uniform pattern; skipped when 32
// does not divide the shape). A format whose warm-up call fell back to dense
// is reported as "skipped: no kernel ..." and not timed.
void run_sparse_bench(const Config& config, const DeviceCase& dc, const SparseBench& b, std::vector<Result>* results);
// Logs one line about `r` to stderr.
void log_result(const Result& r);

}  // namespace coppice::bench
