// Tests for the sparse CUDA kernels (sparse/cuda): matmul and linear with an
// operand of every format in both directions, SDDMM at a pattern of every
// format (uncoalesced COO included) and CSR x CSR SpGEMM,
// each against the CPU twin on the same data (densities 0, 0.1, 0.5 and 1,
// empty rows, non-square shapes, f32/f64/bf16); the plan cache (a second call
// with the same pattern version reuses the plan, a new version builds one;
// the LRU bound); and no dense fallback on these paths. Every test skips
// without a GPU.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/cuda/csr_view.h"
#include "sparse/cuda/cusparse_context.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

TEST_F(SparseCudaTest, MatmulSparseDenseMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (const char* f : {"csr", "coo"}) {
    for (DType dtype : kDtypes) {
      for (double density : kDensities) {
        for (const Shape& shape : std::vector<Shape>{{37, 23}, {1, 40}, {64, 64}}) {
          const std::vector<int64_t> empty = shape[0] > 5 ? std::vector<int64_t>{0, 5} : std::vector<int64_t>{};
          const Tensor a = to_format(random_matrix(shape, density, seed++, empty).to(dtype), f);
          const Tensor x = random_dense({shape[1], 19}, seed++).to(dtype);
          const Tensor want = matmul(a, x);
          const Tensor got = matmul(to_device(a, kCuda), x.to(kCuda));
          EXPECT_TRUE(got.device().is_cuda());
          EXPECT_EQ(got.dtype(), dtype);
          EXPECT_TRUE(near(got, want, dtype))
              << f << " " << dtype_name(dtype) << " density " << density << " " << shape_to_string(shape);
        }
      }
    }
  }
}

TEST_F(SparseCudaTest, MatmulDenseSparseMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (const char* f : {"csr", "coo"}) {
    for (DType dtype : kDtypes) {
      for (double density : kDensities) {
        for (const Shape& shape : std::vector<Shape>{{37, 23}, {23, 1}, {64, 64}}) {
          const Tensor a = to_format(random_matrix(shape, density, seed++, {0}).to(dtype), f);
          const Tensor x = random_dense({11, shape[0]}, seed++).to(dtype);
          const Tensor want = matmul(x, a);
          const Tensor got = matmul(x.to(kCuda), to_device(a, kCuda));
          EXPECT_TRUE(near(got, want, dtype))
              << f << " " << dtype_name(dtype) << " density " << density << " " << shape_to_string(shape);
        }
      }
    }
  }
}

TEST_F(SparseCudaTest, LinearBothWaysMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  for (const char* f : {"csr", "coo"}) {
    for (DType dtype : kDtypes) {
      for (double density : kDensities) {
        const Tensor w = to_format(random_matrix({37, 23}, density, seed++, {3}).to(dtype), f);
        const Tensor x = random_dense({9, 23}, seed++).to(dtype);
        EXPECT_TRUE(near(linear(x.to(kCuda), to_device(w, kCuda)), linear(x, w), dtype))
            << "linear(dense, " << f << ") " << dtype_name(dtype) << " density " << density;
        const Tensor s = to_format(random_matrix({9, 23}, density, seed++, {1}).to(dtype), f);
        const Tensor wd = random_dense({37, 23}, seed++).to(dtype);
        EXPECT_TRUE(near(linear(to_device(s, kCuda), wd.to(kCuda)), linear(s, wd), dtype))
            << "linear(" << f << ", dense) " << dtype_name(dtype) << " density " << density;
      }
    }
  }
}

TEST_F(SparseCudaTest, BlockedEllMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 400;
  for (DType dtype : kDtypes) {
    for (double density : kDensities) {
      for (int64_t b : {2, 4}) {
        // Whole zero block rows (rows 0..3) and a non-square shape.
        const Tensor dense = random_matrix({16, 24}, density, seed++, {0, 1, 2, 3}).to(dtype);
        const Tensor a = to_format(dense, "blocked_ell", FormatOptions::block(b));
        ASSERT_EQ(a.format(), "blocked_ell");
        const Tensor ac = to_device(a, kCuda);
        const Tensor x = random_dense({24, 7}, seed++).to(dtype);
        EXPECT_TRUE(near(matmul(ac, x.to(kCuda)), matmul(a, x), dtype))
            << "matmul(blocked_ell, dense) " << dtype_name(dtype) << " density " << density << " b " << b;
        const Tensor xl = random_dense({5, 24}, seed++).to(dtype);
        EXPECT_TRUE(near(linear(xl.to(kCuda), ac), linear(xl, a), dtype))
            << "linear(dense, blocked_ell) " << dtype_name(dtype) << " density " << density << " b " << b;
        const Tensor w = random_dense({9, 24}, seed++).to(dtype);
        EXPECT_TRUE(near(linear(ac, w.to(kCuda)), linear(a, w), dtype))
            << "linear(blocked_ell, dense) " << dtype_name(dtype) << " density " << density << " b " << b;
      }
    }
  }
}

TEST_F(SparseCudaTest, BsrAndNmMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 600;
  for (DType dtype : kDtypes) {
    for (double density : kDensities) {
      const Tensor bsr =
          to_format(random_matrix({12, 18}, density, seed++, {0, 1}).to(dtype), "bsr", FormatOptions::block(2, 3));
      const Tensor nm = to_format(two_of_four(random_matrix({10, 16}, density, seed++, {3}).to(dtype)), "nm",
                                  FormatOptions::nm(2, 4));
      for (const Tensor& a : {bsr, nm}) {
        const Tensor ac = to_device(a, kCuda);
        const Tensor x = random_dense({a.size(1), 7}, seed++).to(dtype);
        EXPECT_TRUE(near(matmul(ac, x.to(kCuda)), matmul(a, x), dtype))
            << "matmul(" << a.format() << ", dense) " << dtype_name(dtype) << " density " << density;
        const Tensor w = random_dense({5, a.size(1)}, seed++).to(dtype);
        EXPECT_TRUE(near(linear(ac, w.to(kCuda)), linear(a, w), dtype))
            << "linear(" << a.format() << ", dense) " << dtype_name(dtype) << " density " << density;
      }
    }
  }
}

// n:m keeping at least one in 8 multiplies through its dense form (cuBLAS);
// sparser n:m keeps the element kernel: both against the CPU.
TEST_F(SparseCudaTest, DenseAndSparseNmRoutesMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 900;
  for (DType dtype : kDtypes) {
    for (int64_t m : {4, 16}) {
      std::vector<double> v = random_matrix({12, 32}, 1.0, seed++).to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) {
        if (static_cast<int64_t>(i) % m != 0) v[i] = 0.0;  // one kept per group of m
      }
      const Tensor a =
          to_format(from_vector(v, {12, 32}, TensorOptions(DType::kF64)).to(dtype), "nm", FormatOptions::nm(1, m));
      EXPECT_EQ(sparse_cuda::multiplies_densely(to_device(a, kCuda)), m <= 8) << "1:" << m;
      const Tensor x = random_dense({32, 5}, seed++).to(dtype);
      const Tensor w = random_dense({7, 12}, seed++).to(dtype);
      EXPECT_TRUE(near(matmul(to_device(a, kCuda), x.to(kCuda)), matmul(a, x), dtype)) << "1:" << m;
      EXPECT_TRUE(near(matmul(w.to(kCuda), to_device(a, kCuda)), matmul(w, a), dtype)) << "1:" << m;
    }
  }
}

TEST_F(SparseCudaTest, TransposedDenseOperand) {
  SKIP_WITHOUT_CUDA();
  const Tensor a = to_format(random_matrix({30, 20}, 0.3, 7).to(DType::kF32), "csr");
  const Tensor xt = random_dense({12, 20}, 8).to(DType::kF32);  // x = xt.t() is a non-contiguous view
  EXPECT_TRUE(near(matmul(to_device(a, kCuda), xt.to(kCuda).t()), matmul(a, xt.t()), DType::kF32));
}

TEST_F(SparseCudaTest, SddmmMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 300;
  for (DType dtype : kDtypes) {
    for (double density : kDensities) {
      for (const Shape& shape : std::vector<Shape>{{37, 23}, {1, 17}, {40, 40}}) {
        const Tensor pattern = to_format(random_matrix(shape, density, seed++, {0}).to(dtype), "csr");
        const Tensor a = random_dense({shape[0], 16}, seed++).to(dtype);
        const Tensor b = random_dense({16, shape[1]}, seed++).to(dtype);
        const Tensor want = sddmm(a, b, pattern);
        const Tensor got = sddmm(a.to(kCuda), b.to(kCuda), to_device(pattern, kCuda));
        EXPECT_EQ(got.format(), "csr");
        EXPECT_EQ(pattern_version(got), pattern_version(pattern));
        EXPECT_TRUE(got.device().is_cuda());
        EXPECT_TRUE(near(values(got), values(want), dtype))
            << dtype_name(dtype) << " density " << density << " " << shape_to_string(shape);
      }
    }
  }
  // b as a transposed view, as in the gradient of SpMM.
  const Tensor pattern = to_format(random_matrix({20, 30}, 0.3, 9).to(DType::kF32), "csr");
  const Tensor a = random_dense({20, 8}, 10).to(DType::kF32), bt = random_dense({30, 8}, 11).to(DType::kF32);
  EXPECT_TRUE(near(values(sddmm(a.to(kCuda), bt.to(kCuda).t(), to_device(pattern, kCuda))),
                   values(sddmm(a, bt.t(), pattern)), DType::kF32));
}

TEST_F(SparseCudaTest, EveryFormatInEveryDirectionMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 700;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (double density : kDensities) {
      for (const Tensor& a : every_format(random_matrix({16, 24}, density, seed++, {0, 9}).to(dtype))) {
        const Tensor ac = to_device(a, kCuda);
        const std::string what = str_cat(a.format(), " ", dtype_name(dtype), " density ", density);
        const Tensor x = random_dense({24, 7}, seed++).to(dtype), xl = random_dense({5, 24}, seed++).to(dtype);
        const Tensor y = random_dense({3, 16}, seed++).to(dtype), w = random_dense({9, 24}, seed++).to(dtype);
        EXPECT_TRUE(near(matmul(ac, x.to(kCuda)), matmul(a, x), dtype)) << "matmul(sparse, dense) " << what;
        EXPECT_TRUE(near(matmul(y.to(kCuda), ac), matmul(y, a), dtype)) << "matmul(dense, sparse) " << what;
        EXPECT_TRUE(near(linear(xl.to(kCuda), ac), linear(xl, a), dtype)) << "linear(dense, sparse) " << what;
        EXPECT_TRUE(near(linear(ac, w.to(kCuda)), linear(a, w), dtype)) << "linear(sparse, dense) " << what;
      }
    }
  }
}

// Both routes of the CUDA SDDMM: cuSPARSE (through CSR) and, above a
// density, cuBLAS then a gather (the pin sddmm_dense=off|on forces each).
TEST_F(SparseCudaTest, SddmmAtEveryPatternMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 800;
  for (const char* dense_route : {"off", "on"}) {
    ScopedRoutePins route(str_cat("sddmm_dense=", dense_route));
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
      for (double density : kDensities) {
        for (const Tensor& pattern : every_format(random_matrix({16, 24}, density, seed++, {2}).to(dtype))) {
          const Tensor a = random_dense({16, 12}, seed++).to(dtype), b = random_dense({12, 24}, seed++).to(dtype);
          const Tensor want = sddmm(a, b, pattern);
          const Tensor got = sddmm(a.to(kCuda), b.to(kCuda), to_device(pattern, kCuda));
          EXPECT_EQ(got.format(), pattern.format());
          EXPECT_EQ(pattern_version(got), pattern_version(pattern));
          EXPECT_TRUE(near(values(got), values(want), dtype))
              << pattern.format() << " " << dtype_name(dtype) << " density " << density << " dense route "
              << dense_route;
        }
      }
    }
  }
}

TEST_F(SparseCudaTest, SpgemmMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 500;
  for (DType dtype : kDtypes) {
    for (double density : kDensities) {
      const Tensor a = to_format(random_matrix({29, 17}, density, seed++, {0, 4}).to(dtype), "csr");
      const Tensor b = to_format(random_matrix({17, 23}, density, seed++, {2}).to(dtype), "csr");
      const Tensor want = matmul(a, b);
      const Tensor got = matmul(to_device(a, kCuda), to_device(b, kCuda));
      ASSERT_EQ(got.format(), "csr");
      EXPECT_TRUE(got.device().is_cuda());
      EXPECT_EQ(got.dtype(), dtype);
      EXPECT_NE(pattern_version(got), pattern_version(a));
      // The same structural pattern as the CPU twin (sorted, no duplicates).
      const Tensor got_cpu = to_device(got, Device::cpu());
      const SparseParts pg = sparse_impl(got_cpu, "test").parts(), pw = sparse_impl(want, "test").parts();
      ASSERT_EQ(pg.size(), pw.size());
      for (size_t i = 0; i < pg.size(); ++i) {
        if (pg[i].first == "values") continue;
        EXPECT_EQ(pg[i].second.to(DType::kI64).to_vector<int64_t>(), pw[i].second.to(DType::kI64).to_vector<int64_t>())
            << pg[i].first << " " << dtype_name(dtype) << " density " << density;
      }
      EXPECT_TRUE(near(got, want, dtype)) << dtype_name(dtype) << " density " << density;
    }
  }
}

TEST_F(SparseCudaTest, PlanCacheReusedForSamePatternVersionOnly) {
  SKIP_WITHOUT_CUDA();
  using sparse_cuda::plan_cache_stats;
  sparse_cuda::clear_plan_cache();
  sparse_cuda::reset_plan_cache_stats();
  const Tensor a = to_device(to_format(random_matrix({50, 40}, 0.2, 21).to(DType::kF32), "csr"), kCuda);
  const Tensor x = random_dense({40, 8}, 22).to(DType::kF32).to(kCuda);
  matmul(a, x);
  EXPECT_EQ(plan_cache_stats().misses, 1);
  EXPECT_EQ(plan_cache_stats().hits, 0);
  // New values, same pattern version: the plan is reused and the new values used.
  const Tensor a2 = with_values(a, mul(values(a), 2.0));
  ASSERT_EQ(pattern_version(a2), pattern_version(a));
  const Tensor y2 = matmul(a2, x);
  EXPECT_EQ(plan_cache_stats().misses, 1);
  EXPECT_EQ(plan_cache_stats().hits, 1);
  EXPECT_TRUE(near(y2, matmul(to_device(a2, Device::cpu()), x.to(Device::cpu())), DType::kF32));
  // The same pattern rebuilt from parts has a new version: a new plan.
  const Tensor a3 = to_device(to_format(to_dense(a2).to(Device::cpu()), "csr"), kCuda);
  ASSERT_NE(pattern_version(a3), pattern_version(a));
  matmul(a3, x);
  EXPECT_EQ(plan_cache_stats().misses, 2);
  EXPECT_EQ(plan_cache_stats().hits, 1);
  EXPECT_EQ(plan_cache_stats().size, 2);
  // SDDMM's cuSPARSE route caches per pattern version as well (its dense
  // route, taken at this density by default, has no plan).
  {
    ScopedRoutePins cusparse_route("sddmm_dense=off");
    const Tensor p = to_device(to_format(random_matrix({50, 40}, 0.2, 23).to(DType::kF32), "csr"), kCuda);
    const Tensor l = random_dense({50, 4}, 24).to(DType::kF32).to(kCuda);
    const Tensor r = random_dense({4, 40}, 25).to(DType::kF32).to(kCuda);
    sddmm(l, r, p);
    sddmm(l, r, p);
  }
  EXPECT_EQ(plan_cache_stats().misses, 3);
  EXPECT_EQ(plan_cache_stats().hits, 2);
}

// More live patterns than the old bound of 64 plans stay cached (a model of
// many CSR layers built a plan on every call); those no tensor holds go at
// the next build; kPlanCacheCapacity still bounds a runaway.
TEST_F(SparseCudaTest, PlanCacheKeepsLivePatternsAndDropsDeadOnes) {
  SKIP_WITHOUT_CUDA();
  sparse_cuda::clear_plan_cache();
  sparse_cuda::reset_plan_cache_stats();
  const Tensor x = random_dense({16, 4}, 31).to(DType::kF32).to(kCuda);
  std::vector<Tensor> weights;
  for (uint64_t i = 0; i < 100; ++i) {
    weights.push_back(to_device(to_format(random_matrix({16, 16}, 0.3, 40 + i).to(DType::kF32), "csr"), kCuda));
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const Tensor& w : weights) matmul(with_values(w, values(w)), x);
  }
  EXPECT_EQ(sparse_cuda::plan_cache_stats().misses, 100);
  EXPECT_EQ(sparse_cuda::plan_cache_stats().hits, 100);
  EXPECT_EQ(sparse_cuda::plan_cache_stats().size, 100);
  weights.resize(10);  // 90 patterns gone
  matmul(to_device(to_format(random_matrix({16, 16}, 0.3, 7).to(DType::kF32), "csr"), kCuda), x);
  EXPECT_EQ(sparse_cuda::plan_cache_stats().dropped, 90);
  EXPECT_EQ(sparse_cuda::plan_cache_stats().size, 11);
  EXPECT_EQ(sparse_cuda::plan_cache_stats().evictions, 0);
  // The bound: kPlanCacheCapacity + 5 live patterns.
  sparse_cuda::clear_plan_cache();
  sparse_cuda::reset_plan_cache_stats();
  weights.clear();
  const int64_t plans = static_cast<int64_t>(sparse_cuda::kPlanCacheCapacity) + 5;
  for (int64_t i = 0; i < plans; ++i) {
    weights.push_back(to_device(
        to_format(random_matrix({16, 16}, 0.3, 200 + static_cast<uint64_t>(i)).to(DType::kF32), "csr"), kCuda));
    matmul(weights.back(), x);
  }
  EXPECT_EQ(sparse_cuda::plan_cache_stats().size, static_cast<int64_t>(sparse_cuda::kPlanCacheCapacity));
  EXPECT_EQ(sparse_cuda::plan_cache_stats().evictions, 5);
}

TEST_F(SparseCudaTest, CsrMatmulTakesNoDenseFallback) {
  SKIP_WITHOUT_CUDA();
  Dispatcher& d = Dispatcher::instance();
  d.set_fallback_is_error(true);
  const Tensor a = to_device(to_format(random_matrix({20, 10}, 0.4, 51).to(DType::kF32), "csr"), kCuda);
  const Tensor x = random_dense({10, 6}, 52).to(DType::kF32).to(kCuda);
  EXPECT_NO_THROW(matmul(a, x));
  EXPECT_NO_THROW(matmul(random_dense({3, 20}, 53).to(DType::kF32).to(kCuda), a));
  d.set_fallback_is_error(false);
  EXPECT_TRUE(d.fallback_counts().empty());
}

// A CSR's and a CSC's view and positions are formed on the device (one
// csr2csc, compressed_transpose.h): the same positions as the host's walk,
// the CSC's view the matrix's CSR, values through it and back unchanged;
// empty rows and columns, a matrix with no entries, and the transposes the
// products take.
TEST_F(SparseCudaTest, CompressedViewsAndPositionsAreTheHostsOnTheDevice) {
  SKIP_WITHOUT_CUDA();
  for (const double density : {0.0, 0.05, 0.4}) {
    const Tensor dense = random_matrix({37, 53}, density, 21, {0, 5, 36});
    for (const char* format : {"csr", "csc"}) {
      SCOPED_TRACE(::testing::Message() << format << ", density " << density);
      const Tensor host = to_format(dense, format);
      const Tensor t = to_device(host, kCuda);
      EXPECT_EQ(sparse_cuda::device_positions(t, "test").to(Device::cpu()).to_vector<int64_t>(),
                stored_positions(host));
      const Tensor view = sparse_cuda::csr_view(t, "test");
      EXPECT_EQ(view.format(), "csr");
      EXPECT_EQ(host64(to_dense(view)).to_vector<double>(), host64(dense).to_vector<double>());
      const Tensor back = sparse_cuda::values_from_csr_order(t, values(view), "test");
      EXPECT_EQ(host64(back).to_vector<double>(), host64(values(host)).to_vector<double>());
      // The transposed view the products take for x @ S.
      const Tensor transposed = sparse_cuda::csr_view(transpose_compressed(t), "test");
      EXPECT_EQ(host64(to_dense(transposed)).to_vector<double>(), host64(dense.t().contiguous()).to_vector<double>());
    }
  }
}

TEST_F(SparseCudaTest, InnerDimensionMismatchIsRefused) {
  SKIP_WITHOUT_CUDA();
  const Tensor a = to_device(to_format(random_matrix({4, 4}, 0.5, 61).to(DType::kF32), "csr"), kCuda);
  const Tensor x = random_dense({5, 4}, 62).to(DType::kF32).to(kCuda);
  EXPECT_THROW(matmul(a, x), Error);  // inner dimensions differ
}

}  // namespace
}  // namespace coppice
