// CPU SpMM against OpenBLAS dense: W [size x size] at several sparsities
// times X [size x n] (CSR @ X, CSC @ X, X^T @ CSR as X [n x size] @ W, and
// linear(X, W)), and SDDMM, median of `reps` runs. Not a test: run it by hand,
//   bazel run --define=cuda=0 //tests/sparse/cpu:spmm_bench -- [size] [n] [reps] [sparsity]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "sparse/convert.h"
#include "sparse/ops.h"
#include "tensor/cpu/parallel.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

double median_ms(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  fn();  // warm up
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t size = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  Generator gen(1);
  const Tensor x = randn({size, n}, {}, gen);
  const Tensor xt = randn({n, size}, {}, gen);
  std::printf("threads %d, W [%lld x %lld], X [%lld x %lld], f32, median of %d (ms)\n", cpu::num_threads(),
              static_cast<long long>(size), static_cast<long long>(size), static_cast<long long>(size),
              static_cast<long long>(n), reps);
  const Tensor wd = randn({size, size}, {}, gen);
  const double dense = median_ms(reps, [&] { matmul(wd, x); });
  std::printf("dense gemm (OpenBLAS) %10.1f\n", dense);
  std::printf("%-9s %10s %10s %10s %10s %10s %10s\n", "sparsity", "csr@X", "csc@X", "X@csr", "linear", "sddmm",
              "dense/csr");
  std::vector<double> sparsities = {0.5, 0.75, 0.9, 0.95, 0.99};
  if (argc > 4) sparsities = {std::atof(argv[4])};
  for (double sparsity : sparsities) {
    const Tensor mask = lt(rand({size, size}, {}, gen), 1.0 - sparsity);
    const Tensor w = sparse_from_mask(wd, mask, "csr");
    const Tensor wc = transpose(sparse_from_mask(wd.t().contiguous(), mask.t().contiguous(), "csr"));  // CSC of W
    const double csr = median_ms(reps, [&] { matmul(w, x); });
    const double csc = median_ms(reps, [&] { matmul(wc, x); });
    const double left = median_ms(reps, [&] { matmul(xt, w); });
    const double lin = median_ms(reps, [&] { linear(xt, w); });
    const double sd = median_ms(reps, [&] { sddmm(wd, x.t(), w); });
    std::printf("%7.0f %% %10.1f %10.1f %10.1f %10.1f %10.1f %9.2fx\n", sparsity * 100, csr, csc, left, lin, sd,
                dense / csr);
  }
  return 0;
}

}  // namespace
}  // namespace coppice

int main(int argc, char** argv) { return coppice::run(argc, argv); }
