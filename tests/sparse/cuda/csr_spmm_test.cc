// Tests for the own CSR SpMM kernels (sparse/cuda/csr_spmm.h) and the choice
// between them and cuSPARSE (sparse/cuda/spmm_choice.h): both own kernels
// against the CPU twin in f32/f64/bf16/f16 (empty rows, an empty matrix,
// n = 1, 3, 4, 129 and partial column tiles, shapes that are not multiples of
// the tiles, very long and very short rows, a misaligned dense operand),
// determinism, RuntimeOptions::csr_spmm forcing each side through matmul and linear
// in every direction, the cache of measured choices (a new pattern of the
// same key reuses the choice and still gets its own row order), and gradients
// through matmul on CUDA in f64 against the CPU's (which the autograd tests
// gradcheck). Every test skips without a GPU.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/cuda/spmm_choice.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tensor/runtime_options.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using sparse_cuda::CsrSpmmImpl;

const std::vector<DType> kAllDtypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
const std::vector<CsrSpmmImpl> kOwn = {CsrSpmmImpl::kTiled, CsrSpmmImpl::kRows};

std::string impl_name(CsrSpmmImpl impl) { return std::string(sparse_cuda::csr_spmm_impl_name(impl)); }

// Pins the decision csr_spmm (sparse/route_choices.h) for one scope, and
// restores the previous pins after it.
class ScopedMode {
 public:
  explicit ScopedMode(std::string_view mode) : pins_(str_cat("csr_spmm=", mode)) {}

 private:
  ScopedRoutePins pins_;
};

// `dense` (f64, host) with its rows in reverse order: the same shape and nnz,
// another pattern.
Tensor reverse_rows(const Tensor& dense) {
  std::vector<int64_t> idx(static_cast<size_t>(dense.size(0)));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(idx.size() - 1 - i);
  return index_select(dense, 0, from_vector(idx, {dense.size(0)}));
}

// One own kernel against the CPU twin for csr [rows, cols] at `density` times
// x [cols, n].
void expect_own_matches_cpu(CsrSpmmImpl impl, DType dtype, const Shape& shape, double density, int64_t n, uint64_t seed,
                            const std::vector<int64_t>& empty_rows = {}) {
  const Tensor a = to_format(random_matrix(shape, density, seed, empty_rows).to(dtype), "csr");
  const Tensor x = random_dense({shape[1], n}, seed + 1).to(dtype);
  const Tensor want = matmul(a, x);
  const Tensor got = sparse_cuda::own_csr_spmm(to_device(a, kCuda), x.to(kCuda), impl, "test");
  EXPECT_TRUE(got.device().is_cuda());
  EXPECT_EQ(got.dtype(), dtype);
  EXPECT_TRUE(near(got, want, dtype)) << impl_name(impl) << " " << dtype_name(dtype) << " " << shape_to_string(shape)
                                      << " density " << density << " n " << n;
}

TEST_F(SparseCudaTest, OwnKernelsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (CsrSpmmImpl impl : kOwn) {
    for (DType dtype : kAllDtypes) {
      // Rows not a multiple of the 64-row tile, columns not a multiple of the
      // chunk; n scalar-only (1, 3, 129), vector-aligned for f32/f64 (4), for
      // every type with a partial second column tile (264), and with several
      // groups per warp (8, 20).
      for (const Shape& shape : std::vector<Shape>{{37, 23}, {130, 70}, {1, 1}, {3, 200}}) {
        for (double density : {0.1, 0.5, 1.0}) {
          for (int64_t n : {1, 3, 4, 8, 20, 129, 264}) {
            const std::vector<int64_t> empty = shape[0] > 6 ? std::vector<int64_t>{0, 6} : std::vector<int64_t>{};
            expect_own_matches_cpu(impl, dtype, shape, density, n, seed, empty);
            seed += 2;
          }
        }
      }
    }
  }
}

TEST_F(SparseCudaTest, OwnKernelsOnLongAndShortRows) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (CsrSpmmImpl impl : kOwn) {
    for (DType dtype : kAllDtypes) {
      // Very long rows (~2000 and 4096 entries, over many chunks), very short
      // rows (~2 entries), and a training shape at 90 % sparsity over several
      // row and column tiles.
      expect_own_matches_cpu(impl, dtype, {20, 4096}, 0.5, 16, seed++);
      expect_own_matches_cpu(impl, dtype, {5, 4096}, 1.0, 8, seed++);
      expect_own_matches_cpu(impl, dtype, {300, 784}, 0.003, 256, seed++);
      expect_own_matches_cpu(impl, dtype, {256, 512}, 0.1, 520, seed++, {3, 100, 255});
    }
  }
}

TEST_F(SparseCudaTest, OwnKernelsOnEmptyOperands) {
  SKIP_WITHOUT_CUDA();
  for (CsrSpmmImpl impl : kOwn) {
    for (DType dtype : kAllDtypes) {
      expect_own_matches_cpu(impl, dtype, {30, 20}, 0.0, 8, 7);  // no entries
      expect_own_matches_cpu(impl, dtype, {70, 50}, 0.2, 8, 8, {0, 1, 2, 3, 4, 5, 6, 7, 8, 69});
      const Tensor a = to_device(to_format(random_matrix({4, 5}, 0.5, 9).to(dtype), "csr"), kCuda);
      const Tensor y0 = sparse_cuda::own_csr_spmm(a, Tensor::empty({5, 0}, TensorOptions(dtype, kCuda)), impl, "test");
      EXPECT_EQ(y0.shape(), (Shape{4, 0}));
      const Tensor e = to_device(to_format(zeros({0, 5}, TensorOptions(dtype)), "csr"), kCuda);
      const Tensor y1 = sparse_cuda::own_csr_spmm(e, random_dense({5, 3}, 10).to(dtype).to(kCuda), impl, "test");
      EXPECT_EQ(y1.shape(), (Shape{0, 3}));
      const Tensor k0 = to_device(to_format(zeros({3, 0}, TensorOptions(dtype)), "csr"), kCuda);
      const Tensor y2 = sparse_cuda::own_csr_spmm(k0, Tensor::empty({0, 4}, TensorOptions(dtype, kCuda)), impl, "test");
      EXPECT_TRUE(near(y2, zeros({3, 4}, TensorOptions(dtype)), dtype));
    }
  }
}

// X 4 bytes past a 16-byte boundary: the tiled kernel cannot take it and the
// scalar row-split runs instead.
TEST_F(SparseCudaTest, OwnKernelsOnMisalignedDense) {
  SKIP_WITHOUT_CUDA();
  const int64_t cols = 40, n = 16;
  const Tensor a = to_format(random_matrix({33, cols}, 0.3, 11).to(DType::kF32), "csr");
  const Tensor x = random_dense({cols, n}, 12).to(DType::kF32);
  const Tensor flat = cat({zeros({1}, TensorOptions(DType::kF32)), x.reshape({cols * n})}).to(kCuda);
  const Tensor shifted = flat.slice(0, 1, cols * n + 1).reshape({cols, n});
  ASSERT_TRUE(shifted.is_contiguous());
  ASSERT_NE(reinterpret_cast<uintptr_t>(shifted.data_ptr()) % 16, 0u);
  for (CsrSpmmImpl impl : kOwn) {
    const Tensor got = sparse_cuda::own_csr_spmm(to_device(a, kCuda), shifted, impl, "test");
    EXPECT_EQ(sparse_cuda::last_csr_spmm_impl(), CsrSpmmImpl::kRows);
    EXPECT_TRUE(near(got, matmul(a, x), DType::kF32)) << impl_name(impl);
  }
}

TEST_F(SparseCudaTest, OwnKernelsAreDeterministic) {
  SKIP_WITHOUT_CUDA();
  const Tensor a = to_device(to_format(random_matrix({200, 1000}, 0.1, 13).to(DType::kF32), "csr"), kCuda);
  const Tensor x = random_dense({1000, 256}, 14).to(DType::kF32).to(kCuda);
  for (CsrSpmmImpl impl : kOwn) {
    const std::vector<float> first = sparse_cuda::own_csr_spmm(a, x, impl, "test").to(Device::cpu()).to_vector<float>();
    const std::vector<float> second =
        sparse_cuda::own_csr_spmm(a, x, impl, "test").to(Device::cpu()).to_vector<float>();
    EXPECT_EQ(first, second) << impl_name(impl);
  }
}

// Every product direction that goes through the CSR SpMM, with each side
// forced through RuntimeOptions::csr_spmm.
TEST_F(SparseCudaTest, ForcedSidesThroughMatmulAndLinear) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  for (const char* mode : {"cusparse", "own", "tiled", "rows", "auto"}) {
    ScopedMode scoped(mode);
    for (DType dtype : kAllDtypes) {
      // Big enough for auto to measure (nnz * n above kMinMeasuredWork).
      const Tensor a = to_format(random_matrix({192, 256}, 0.2, seed++, {5}).to(dtype), "csr");
      const Tensor ac = to_device(a, kCuda);
      const Tensor x = random_dense({256, 128}, seed++).to(dtype), xl = random_dense({64, 256}, seed++).to(dtype);
      const Tensor y = random_dense({96, 192}, seed++).to(dtype), w = random_dense({128, 256}, seed++).to(dtype);
      const std::string what = str_cat(mode, " ", dtype_name(dtype));
      EXPECT_TRUE(near(matmul(ac, x.to(kCuda)), matmul(a, x), dtype)) << "matmul(csr, dense) " << what;
      const std::string m(mode), ran = impl_name(sparse_cuda::last_csr_spmm_impl());
      if (m == "own") {
        EXPECT_NE(ran, "cusparse") << what;
      } else if (m != "auto") {
        EXPECT_EQ(ran, m) << what;
      }
      EXPECT_TRUE(near(matmul(y.to(kCuda), ac), matmul(y, a), dtype)) << "matmul(dense, csr) " << what;
      EXPECT_TRUE(near(linear(xl.to(kCuda), ac), linear(xl, a), dtype)) << "linear(dense, csr) " << what;
      EXPECT_TRUE(near(linear(ac, w.to(kCuda)), linear(a, w), dtype)) << "linear(csr, dense) " << what;
    }
  }
}

// A pin's spelling is checked where it is set (sparse/route_choices.h).
TEST_F(SparseCudaTest, UnknownModeIsAClearError) {
  try {
    ScopedMode mode("fastest");
    ADD_FAILURE() << "csr_spmm=fastest was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("csr_spmm='fastest'"), std::string::npos) << e.what();
  }
}

TEST_F(SparseCudaTest, ChoiceIsMeasuredOncePerKey) {
  SKIP_WITHOUT_CUDA();
  auto csr_spmm_choice_stats = [] { return route_choice_stats("csr_spmm"); };
  ScopedMode scoped("auto");
  clear_route_choices();
  const Tensor dense = random_matrix({256, 512}, 0.1, 31, {7});
  const Tensor a = to_format(dense.to(DType::kF32), "csr");
  const Tensor x = random_dense({512, 96}, 32).to(DType::kF32);
  ASSERT_GE(nnz(a) * 96, sparse_cuda::kMinMeasuredWork);
  const Tensor ac = to_device(a, kCuda), xc = x.to(kCuda);
  EXPECT_TRUE(near(matmul(ac, xc), matmul(a, x), DType::kF32));
  EXPECT_EQ(csr_spmm_choice_stats().measured, 1);
  EXPECT_EQ(csr_spmm_choice_stats().reused, 0);
  const CsrSpmmImpl chosen = sparse_cuda::last_csr_spmm_impl();
  // The same key: the cached choice, new values used.
  const Tensor a2 = with_values(ac, mul(values(ac), 2.0));
  EXPECT_TRUE(near(matmul(a2, xc), matmul(to_device(a2, Device::cpu()), x), DType::kF32));
  EXPECT_EQ(csr_spmm_choice_stats().measured, 1);
  EXPECT_EQ(csr_spmm_choice_stats().reused, 1);
  EXPECT_EQ(sparse_cuda::last_csr_spmm_impl(), chosen);
  // Another pattern (rows reversed: same shape and nnz, a new version and a
  // new row order): the choice is reused and the result is right.
  const Tensor b = to_format(reverse_rows(dense).to(DType::kF32), "csr");
  ASSERT_NE(pattern_version(b), pattern_version(a));
  ASSERT_EQ(nnz(b), nnz(a));
  EXPECT_TRUE(near(matmul(to_device(b, kCuda), xc), matmul(b, x), DType::kF32));
  EXPECT_EQ(csr_spmm_choice_stats().measured, 1);
  EXPECT_EQ(csr_spmm_choice_stats().reused, 2);
  // Every own kernel on that new pattern too (its own row order).
  for (CsrSpmmImpl impl : kOwn) {
    EXPECT_TRUE(near(sparse_cuda::own_csr_spmm(to_device(b, kCuda), xc, impl, "test"), matmul(b, x), DType::kF32))
        << impl_name(impl);
  }
  // A new n, a new density, a new dtype: each measured once.
  const Tensor x2 = random_dense({512, 128}, 33).to(DType::kF32);
  EXPECT_TRUE(near(matmul(ac, x2.to(kCuda)), matmul(a, x2), DType::kF32));
  const Tensor d = to_format(random_matrix({256, 512}, 0.4, 34).to(DType::kF32), "csr");
  EXPECT_TRUE(near(matmul(to_device(d, kCuda), xc), matmul(d, x), DType::kF32));
  const Tensor a64 = to_format(dense, "csr");
  EXPECT_TRUE(
      near(matmul(to_device(a64, kCuda), x.to(DType::kF64).to(kCuda)), matmul(a64, x.to(DType::kF64)), DType::kF64));
  EXPECT_EQ(csr_spmm_choice_stats().measured, 4);
  EXPECT_EQ(csr_spmm_choice_stats().recorded, 4);
  // Small products take cuSPARSE unmeasured.
  const Tensor s = to_device(to_format(random_matrix({20, 30}, 0.3, 35).to(DType::kF32), "csr"), kCuda);
  matmul(s, random_dense({30, 5}, 36).to(DType::kF32).to(kCuda));
  EXPECT_EQ(sparse_cuda::last_csr_spmm_impl(), CsrSpmmImpl::kCusparse);
  EXPECT_EQ(csr_spmm_choice_stats().measured, 4);
  EXPECT_EQ(csr_spmm_choice_stats().reused, 2);
}

// dW (an SDDMM at W's pattern) and dX (S^T @ G, through the CSR SpMM) on
// CUDA in f64 against the CPU's gradients, which tests/autograd gradchecks.
TEST_F(SparseCudaTest, MatmulGradientsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  const Tensor wt = to_format(random_matrix({96, 80}, 0.3, 41, {2}), "csr");
  const Tensor xt = random_dense({80, 64}, 42), vt = random_dense({96, 64}, 43);
  auto grads = [&](Device device) {
    Variable w(to_device(wt, device), true), x(xt.to(device), true);
    sum(mul(matmul(w, x), Variable(vt.to(device), false))).backward();
    return std::vector<Tensor>{values(w.grad()).to(Device::cpu()), x.grad().to(Device::cpu())};
  };
  const std::vector<Tensor> want = grads(Device::cpu());
  for (const char* mode : {"tiled", "rows", "cusparse", "auto"}) {
    ScopedMode scoped(mode);
    const std::vector<Tensor> got = grads(kCuda);
    EXPECT_TRUE(near(got[0], want[0], DType::kF64)) << "dW " << mode;
    EXPECT_TRUE(near(got[1], want[1], DType::kF64)) << "dX " << mode;
  }
}

}  // namespace
}  // namespace coppice
