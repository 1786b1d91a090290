// The products of a sparse linear layer, W [out, in] sparse, x
// [batch, in], dy [batch, out] (all [4096, 4096] with batch 4096 by default;
// --hidden H (out), --in I and --batch B change them):
//
//   op "linear"          y = x W^T                    linear(x, W)
//   op "linear_gelu"     gelu(z), z = x W^T + b       linear_gelu(x, W, b)
//   op "linear_dx"       dx = dy W                    matmul(dy, W)
//   op "linear_dx_gelu"  dx = (dy W) gelu'(z)         matmul_gelu_backward(dy, W, z)
//   op "linear_dw"       dW = dy^T x at W             sddmm(dy^T, x, W)
//
// (the gelu forms: a transformer MLP's products that carry the erf gelu in
// their write-out, its forward after the first linear and its gradient
// after the second's dx),
//
// each beside the dense product of the same shape and type by cuBLAS (op
// "dense_linear", format "dense"), timed in the same run. Flops count the
// stored entries (2 nnz batch), and each row carries the dense time and two
// ratios: speedup = dense ms / ms, and fraction_of_ideal = speedup * density
// — 1 is density-proportional time; and its byte floor (its dense operands
// read and written once, at the rate of a copy of x) with the fraction of
// it reached. CUDA only. `bench bsr` runs it on BSR
// weights, `bench spmm` on 2:4 ones.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tools/bench/bench_util.h"

namespace coppice::bench {

// A numeric mode: the Result's dtype, the tensors' dtype, and for f32
// whether TF32 tensor cores may run (allow_tf32).
struct LinearMode {
  const char* name;
  DType dtype;
  bool tf32;
};

// One sparse weight: what its rows report, and how to build it on the GPU
// from dense values [out, in] of the mode's dtype.
struct SparseWeight {
  std::string format;
  double sparsity = 0.0;
  std::vector<std::pair<std::string, double>> extra;  // e.g. {"block", 32}
  std::function<Tensor(const Tensor& values)> make;
};

// The modes of `all` that --dtype asks for (f32 meaning TF32), or all.
std::vector<LinearMode> modes_asked(const Config& config, const std::vector<LinearMode>& all);

// For each mode: the dense anchor, then the five products of each weight.
void run_linear_products(const Config& config, const std::string& suite, const std::vector<LinearMode>& modes,
                         const std::vector<SparseWeight>& weights, std::vector<Result>* results);

}  // namespace coppice::bench
