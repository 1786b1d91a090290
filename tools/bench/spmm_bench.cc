// SpMM: W (csr, coo, bsr 32x32) [m, k] x X dense [k, n] in f32 at sparsities
// 50..99 %, against the dense gemm of the same shape; 2 nnz n flops per call.
// Shapes: [4096, 4096] x [4096, 4096] on CUDA and [4096, 4096] x [4096, 256]
// on the CPU (--size N: N everywhere), and the LeNet-300-100 layers with a
// batch of 256.
//
// On CUDA also 2:4 in bf16 and f16: the products (and gelu forms) of a linear
// layer with a 2:4 weight (linear_products.h, beside cuBLAS dense; --hidden and
// --batch size them), with a transposable pattern (dx on sparse tensor cores
// too) and with a magnitude-selected one (dx the dense way): rows of format
// "nm" with extra "transposable" 1 or 0.
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "tensor/ops.h"
#include "tools/bench/linear_products.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

SparseBench spmm_case(int64_t m, int64_t k, int64_t n) {
  SparseBench b;
  b.suite = "spmm";
  b.op = "matmul";
  b.m = m;
  b.k = k;
  b.n = n;
  b.rows = m;
  b.cols = k;
  b.flops_per_nnz = n;
  b.sparse_op = [k, n](const Tensor& w, Device device) {
    Tensor x = random_input({k, n}, DType::kF32, device);
    return std::function<void()>([w, x] { Tensor y = matmul(w, x); });
  };
  b.dense_op = [m, k, n](Device device) {
    Tensor w = random_input({m, k}, DType::kF32, device);
    Tensor x = random_input({k, n}, DType::kF32, device);
    return std::function<void()>([w, x] { Tensor y = matmul(w, x); });
  };
  return b;
}

// 2:4 weights: transposable (both W and W^T 2:4) or by magnitude.
std::vector<SparseWeight> nm24_weights() {
  std::vector<SparseWeight> out;
  for (bool transposable : {true, false}) {
    SparseWeight w;
    w.format = "nm";
    w.sparsity = 0.5;
    w.extra = {{"transposable", transposable ? 1.0 : 0.0}};
    w.make = [transposable](const Tensor& values) {
      return transposable ? nm_compress(values, transposable_nm_mask(values), 2, 4) : nm_compress(values);
    };
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

void run_spmm(const Config& config, std::vector<Result>* results) {
  constexpr int64_t kBatch = 256;  // LeNet-300-100 batch
  for (const DeviceCase& dc : devices_to_run(config)) {
    const int64_t big = config.size > 0 ? config.size : kSparseSize;
    const int64_t big_n = config.size > 0 ? config.size : (dc.cuda ? kSparseSize : kCpuSparseBatch);
    for (const SparseBench& b : {spmm_case(big, big, big_n), spmm_case(300, 784, kBatch), spmm_case(100, 300, kBatch),
                                 spmm_case(10, 100, kBatch)}) {
      run_sparse_bench(config, dc, b, results);
    }
    if (dc.cuda) {
      const std::vector<LinearMode> modes = {{"bf16", DType::kBF16, false}, {"f16", DType::kF16, false}};
      run_linear_products(config, "spmm", modes_asked(config, modes), nm24_weights(), results);
    }
  }
}

}  // namespace coppice::bench
