// SDDMM: (A [m, k] @ B [k, n]) sampled at a sparse pattern [m, n] (csr, coo,
// bsr 32x32) in f32 at sparsities 50..99 %, against the full dense gemm
// A @ B; 2 nnz k flops per call. Shapes: m = n = 4096 with k = 4096 on CUDA
// and k = 256 on the CPU (--size N: N everywhere), and the LeNet-300-100
// weight gradients (pattern [out, in], k = batch 256: sddmm(dy, x^T, W)).
// On CUDA the big shape runs again as "sddmm_cusparse" with the dense route
// off, so both routes of sparse/cuda/sddmm.cc are measured side by side.
#include <optional>
#include <string>

#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

// route "" is the library's choice; "cusparse" turns the CUDA dense route off
// (the pin sddmm_dense=off, which sparse/cuda/sddmm.cc asks on every call).
SparseBench sddmm_case(int64_t m, int64_t k, int64_t n, const std::string& route = "") {
  SparseBench b;
  b.suite = "sddmm";
  b.op = route.empty() ? "sddmm" : "sddmm_" + route;
  b.m = m;
  b.k = k;
  b.n = n;
  b.rows = m;
  b.cols = n;
  b.flops_per_nnz = k;
  b.sparse_op = [m, k, n, route](const Tensor& pattern, Device device) {
    Tensor a = random_input({m, k}, DType::kF32, device);
    Tensor bb = random_input({k, n}, DType::kF32, device);
    const bool cusparse = route == "cusparse";
    return std::function<void()>([a, bb, pattern, cusparse] {
      // The library's routes as they were, or with the dense route off.
      std::optional<ScopedRoutePins> no_dense_route;
      if (cusparse) no_dense_route.emplace("sddmm_dense=off");
      Tensor y = sddmm(a, bb, pattern);
    });
  };
  b.dense_op = [m, k, n](Device device) {
    Tensor a = random_input({m, k}, DType::kF32, device);
    Tensor bb = random_input({k, n}, DType::kF32, device);
    return std::function<void()>([a, bb] { Tensor y = matmul(a, bb); });
  };
  return b;
}

}  // namespace

void run_sddmm(const Config& config, std::vector<Result>* results) {
  constexpr int64_t kBatch = 256;  // LeNet-300-100 batch
  for (const DeviceCase& dc : devices_to_run(config)) {
    const int64_t big = config.size > 0 ? config.size : kSparseSize;
    const int64_t big_k = config.size > 0 ? config.size : (dc.cuda ? kSparseSize : kCpuSparseBatch);
    for (const SparseBench& b : {sddmm_case(big, big_k, big), sddmm_case(300, kBatch, 784),
                                 sddmm_case(100, kBatch, 300), sddmm_case(10, kBatch, 100)}) {
      run_sparse_bench(config, dc, b, results);
    }
    if (dc.cuda) run_sparse_bench(config, dc, sddmm_case(big, big_k, big, "cusparse"), results);
  }
}

}  // namespace coppice::bench
