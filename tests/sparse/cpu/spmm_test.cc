// Tests for SpMM on the CPU (sparse/cpu/spmm.cc) through the op frontends:
// matmul(sparse, dense), matmul(dense, sparse), linear(dense, sparse) and
// linear(sparse, dense) for every format, at densities 0, 0.1, 0.5 and 1,
// with empty rows, one-row and non-square matrices, against a dense f64
// reference on to_dense(); transposed operands; f64 and bf16 values; batch
// dims and 1-D operands; linear_relu against relu(linear); and the errors. No
// dense fallback may run.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "sparse/blocked_ell.h"
#include "sparse/cpu/spmm_kernels.h"
#include "tensor/runtime_options.h"
#include "tests/sparse/cpu/test_util.h"

namespace coppice {
namespace {

using sparse_test::atol_for;
using sparse_test::near;
using sparse_test::random_dense;
using sparse_test::random_matrix;
using sparse_test::rtol_for;
using sparse_test::to_format_for_test;

class SpmmTest : public sparse_test::NoFallback {};

Tensor f64(const Tensor& t) { return to_dense(t).to(DType::kF64); }

TEST_F(SpmmTest, SparseTimesDenseEveryFormat) {
  uint64_t seed = 1;
  int checked = 0;
  for (const std::string& f : sparse_test::formats()) {
    for (const Shape& shape : sparse_test::shapes()) {
      for (double density : sparse_test::densities()) {
        const Tensor a = to_format_for_test(random_matrix(shape, density, seed++), f);
        ASSERT_EQ(a.format(), f);
        for (int64_t n : {1, 37, 70}) {
          const Tensor x = random_dense({shape[1], n}, seed++).to(DType::kF32);
          const Tensor y = matmul(a, x);
          ASSERT_TRUE(y.is_dense());
          ASSERT_EQ(y.dtype(), DType::kF32);
          EXPECT_TRUE(near(y, matmul(f64(a), f64(x)), rtol_for(DType::kF32), atol_for(DType::kF32, shape[1])))
              << f << " " << shape_to_string(shape) << " density " << density << " n " << n;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 7 * 5 * 4 * 3);
}

TEST_F(SpmmTest, DenseTimesSparseEveryFormat) {
  uint64_t seed = 100;
  for (const std::string& f : sparse_test::formats()) {
    for (const Shape& shape : sparse_test::shapes()) {
      for (double density : sparse_test::densities()) {
        const Tensor a = to_format_for_test(random_matrix(shape, density, seed++), f);
        for (int64_t m : {1, 5, 37, 70}) {  // one transposed block, a few, and enough to run in parallel
          const Tensor x = random_dense({m, shape[0]}, seed++).to(DType::kF32);
          const Tensor y = matmul(x, a);
          EXPECT_TRUE(near(y, matmul(f64(x), f64(a)), rtol_for(DType::kF32), atol_for(DType::kF32, shape[0])))
              << f << " " << shape_to_string(shape) << " density " << density << " m " << m;
        }
      }
    }
  }
}

TEST_F(SpmmTest, LinearWithSparseWeightEveryFormat) {
  uint64_t seed = 200;
  for (const std::string& f : sparse_test::formats()) {
    for (const Shape& shape : sparse_test::shapes()) {  // weight [out, in]
      for (double density : sparse_test::densities()) {
        const Tensor w = to_format_for_test(random_matrix(shape, density, seed++), f);
        for (int64_t batch : {1, 37, 70}) {
          const Tensor x = random_dense({batch, shape[1]}, seed++).to(DType::kF32);
          const Tensor bias = random_dense({1, shape[0]}, seed++).to(DType::kF32).reshape({shape[0]});
          EXPECT_TRUE(
              near(linear(x, w), matmul(f64(x), f64(w).t()), rtol_for(DType::kF32), atol_for(DType::kF32, shape[1])))
              << f << " " << shape_to_string(shape) << " density " << density << " batch " << batch;
          EXPECT_TRUE(near(linear(x, w, bias), add(matmul(f64(x), f64(w).t()), f64(bias)), rtol_for(DType::kF32),
                           atol_for(DType::kF32, shape[1])))
              << f << " with bias";
        }
      }
    }
  }
}

TEST_F(SpmmTest, LinearWithSparseInputEveryFormat) {
  uint64_t seed = 300;
  for (const std::string& f : sparse_test::formats()) {
    for (const Shape& shape : sparse_test::shapes()) {  // input [batch, in]
      for (double density : {0.0, 0.5}) {
        const Tensor x = to_format_for_test(random_matrix(shape, density, seed++), f);
        const Tensor w = random_dense({9, shape[1]}, seed++).to(DType::kF32);
        EXPECT_TRUE(
            near(linear(x, w), matmul(f64(x), f64(w).t()), rtol_for(DType::kF32), atol_for(DType::kF32, shape[1])))
            << f << " " << shape_to_string(shape);
      }
    }
  }
}

// linear_relu on the CPU is relu(linear(...)) bit for bit (the CPU twin of
// the fused CUDA kernel): every format as the weight and as the input, 2-D
// and 3-D inputs, with and without a bias.
TEST_F(SpmmTest, LinearReluIsTheCompositeEveryFormat) {
  uint64_t seed = 250;
  for (const std::string& f : sparse_test::formats()) {
    const Tensor w = to_format_for_test(random_matrix({12, 40}, 0.5, seed++), f);
    const Tensor bias = random_dense({1, 12}, seed++).to(DType::kF32).reshape({12});
    for (const Shape& xs : {Shape{37, 40}, Shape{2, 5, 40}}) {
      const Tensor x = random_dense({shape_numel(xs) / 40, 40}, seed++).to(DType::kF32).reshape(xs);
      for (const Tensor& b : {bias, Tensor()}) {
        const Tensor got = linear_relu(x, w, b), want = relu(linear(x, w, b));
        ASSERT_EQ(got.shape(), want.shape()) << f;
        EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>())
            << f << " input " << shape_to_string(xs) << (b.defined() ? " with bias" : "");
        EXPECT_TRUE(near(got, relu(add(matmul(f64(x), f64(w).t()), b.defined() ? f64(b) : zeros({12}, DType::kF64))),
                         rtol_for(DType::kF32), atol_for(DType::kF32, 40)))
            << f;
      }
    }
    // A sparse input times a dense weight.
    const Tensor xs = to_format_for_test(random_matrix({12, 40}, 0.5, seed++), f);
    const Tensor wd = random_dense({9, 40}, seed++).to(DType::kF32), bd = random_dense({1, 9}, seed++).reshape({9});
    EXPECT_EQ(linear_relu(xs, wd, bd.to(DType::kF32)).to_vector<double>(),
              relu(linear(xs, wd, bd.to(DType::kF32))).to_vector<double>())
        << f << " as the input";
  }
}

TEST_F(SpmmTest, F64IsExactToRounding) {
  uint64_t seed = 400;
  for (const std::string& f : sparse_test::formats()) {
    const Tensor a = to_format_for_test(random_matrix({36, 24}, 0.3, seed++), f, DType::kF64);
    const Tensor x = random_dense({24, 70}, seed++);
    const Tensor xl = random_dense({37, 36}, seed++);
    EXPECT_TRUE(near(matmul(a, x), matmul(to_dense(a), x), 1e-12, 1e-12)) << f;
    EXPECT_TRUE(near(matmul(xl, a), matmul(xl, to_dense(a)), 1e-12, 1e-12)) << f;
    EXPECT_EQ(matmul(a, x).dtype(), DType::kF64);
  }
}

TEST_F(SpmmTest, Bf16AndF16ValuesAccumulateInF32) {
  uint64_t seed = 500;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const std::string& f : sparse_test::formats()) {
      const Tensor a = to_format_for_test(random_matrix({36, 40}, 0.5, seed++), f, dtype);
      const Tensor x = random_dense({40, 37}, seed++).to(dtype);
      const Tensor xl = random_dense({37, 36}, seed++).to(dtype);
      const Tensor y = matmul(a, x);
      ASSERT_EQ(y.dtype(), dtype);
      // The reference multiplies the same 16-bit inputs in f64; the result rounds once.
      EXPECT_TRUE(near(y, matmul(f64(a), f64(x)), rtol_for(dtype), atol_for(dtype, 1)))
          << f << " " << dtype_name(dtype);
      EXPECT_TRUE(near(matmul(xl, a), matmul(f64(xl), f64(a)), rtol_for(dtype), atol_for(dtype, 1))) << f;
      if (f == "nm") continue;  // the transpose of a 2:4 matrix is rarely 2:4
      EXPECT_TRUE(near(linear(xl, transpose(a)), matmul(f64(xl), f64(a)), rtol_for(dtype), atol_for(dtype, 1))) << f;
    }
  }
}

TEST_F(SpmmTest, TransposedOperands) {
  uint64_t seed = 600;
  for (const std::string& f : sparse_test::formats()) {
    const Tensor a = to_format_for_test(random_matrix({12, 40}, 0.3, seed++), f);
    const Tensor xt = random_dense({70, 40}, seed++).to(DType::kF32).t();  // a transposed view [40, 70]
    const Tensor xl = random_dense({12, 37}, seed++).to(DType::kF32).t();  // [37, 12] view
    ASSERT_FALSE(xt.is_contiguous());
    EXPECT_TRUE(near(matmul(a, xt), matmul(f64(a), f64(xt)), 1e-5, 1e-4)) << f;
    EXPECT_TRUE(near(matmul(xl, a), matmul(f64(xl), f64(a)), 1e-5, 1e-4)) << f;
    if (f == "nm") continue;         // the transpose of a 2:4 matrix is rarely 2:4
    const Tensor at = transpose(a);  // [40, 12], same format (CSR <-> CSC for the compressed ones)
    EXPECT_EQ(at.format(), f == "csr" ? "csc" : (f == "csc" ? "csr" : f));
    EXPECT_TRUE(near(matmul(at, random_dense({12, 5}, seed).to(DType::kF32)),
                     matmul(f64(a).t(), random_dense({12, 5}, seed)), 1e-5, 1e-4))
        << f;
    EXPECT_TRUE(near(matmul(random_dense({3, 40}, seed).to(DType::kF32), at),
                     matmul(random_dense({3, 40}, seed), f64(a).t()), 1e-5, 1e-4))
        << f;
  }
  // The CSR/CSC transpose is free: the same arrays and pattern version.
  const Tensor csr = to_format_for_test(random_matrix({12, 40}, 0.3, 7), "csr");
  const Tensor csc = transpose(csr);
  EXPECT_EQ(csc.format(), "csc");
  EXPECT_EQ(pattern_version(csc), pattern_version(csr));
  EXPECT_TRUE(values(csc).is_same(values(csr)));
}

TEST_F(SpmmTest, OneDimensionalAndBatchedDenseOperands) {
  const Tensor a = to_format_for_test(random_matrix({12, 40}, 0.3, 11), "csr");
  const Tensor v = random_dense({1, 40}, 12).to(DType::kF32).reshape({40});
  const Tensor u = random_dense({1, 12}, 13).to(DType::kF32).reshape({12});
  Tensor av = matmul(a, v);
  EXPECT_EQ(av.shape(), (Shape{12}));
  EXPECT_TRUE(near(av, matmul(f64(a), f64(v)), 1e-5, 1e-4));
  Tensor ua = matmul(u, a);
  EXPECT_EQ(ua.shape(), (Shape{40}));
  EXPECT_TRUE(near(ua, matmul(f64(u), f64(a)), 1e-5, 1e-4));
  // linear over [batch, seq, in] inputs flattens the leading dims.
  const Tensor x = random_dense({6, 40}, 14).to(DType::kF32).reshape({2, 3, 40});
  Tensor y = linear(x, a);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 12}));
  EXPECT_TRUE(near(y, matmul(f64(x), f64(a).t()), 1e-5, 1e-4));
}

TEST_F(SpmmTest, UncoalescedCooSumsDuplicates) {
  // Entry (0, 1) twice and out of order.
  const Tensor idx = from_vector<int64_t>({1, 0, 0, 2, 1, 1}, {2, 3});
  const Tensor vals = from_vector<float>({3.0f, 1.0f, 2.0f});
  const Tensor a = sparse_coo(idx, vals, {3, 3});
  ASSERT_FALSE(coo_impl(a, "test").is_coalesced());
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TRUE(near(matmul(a, x), matmul(f64(a), f64(x)), 0, 0));
  EXPECT_TRUE(near(matmul(x.t(), transpose(a)), matmul(f64(x).t(), f64(a).t()), 0, 0));
}

TEST_F(SpmmTest, LargeEnoughToSplitAcrossThreadsAndPanels) {
  // Wider than one panel of the gather (and than a tile), many rows.
  const Tensor a = to_format_for_test(random_matrix({300, 500}, 0.05, 21), "csr");
  const Tensor x = random_dense({500, 700}, 22).to(DType::kF32);
  EXPECT_TRUE(near(matmul(a, x), matmul(f64(a), f64(x)), 1e-5, 1e-4));
  const Tensor c = transpose(to_format_for_test(random_matrix({500, 300}, 0.05, 23), "csr"));  // CSC [300, 500]
  EXPECT_TRUE(near(matmul(c, x), matmul(f64(c), f64(x)), 1e-5, 1e-4));
  const Tensor xl = random_dense({333, 300}, 24).to(DType::kF32);
  EXPECT_TRUE(near(matmul(xl, a), matmul(f64(xl), f64(a)), 1e-5, 1e-4));
  EXPECT_TRUE(near(linear(xl, transpose(a)), matmul(f64(xl), f64(a)), 1e-5, 1e-4));
  const Tensor xw = random_dense({333, 500}, 25).to(DType::kF32);  // many transposed blocks, gathered
  EXPECT_TRUE(near(linear(xw, a), matmul(f64(xw), f64(a).t()), 1e-5, 1e-4));
}

TEST_F(SpmmTest, LinearWithFewRowsTakesDotProductsEveryBlockWidth) {
  // Up to kDotRows rows of x (4 for rows of single entries, 16 for blocks), X @ W^T is dot
  // products along W's rows (and X @ W, or a CSC weight's X @ W^T, W's rows scaled and added): whole vectors of a
  // block's values where bw allows (bw 16 and 24: two AVX2 vectors and a tail; 12: the scalar tail alone), then the
  // panels past them. Blocks from a block-sparse mask, whole-zero block rows included; enough output rows to split
  // across threads.
  uint64_t seed = 700;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (int64_t b : {12, 16, 24}) {
      const int64_t out = 10 * b, in = 6 * b;
      Tensor mask_blocks = random_matrix({out / b, in / b}, 0.4, seed++);
      std::vector<double> m = to_dense(mask_blocks).to(DType::kF64).to_vector<double>();
      std::vector<double> w = random_dense({out, in}, seed++).to_vector<double>();
      for (int64_t r = 0; r < out; ++r) {
        for (int64_t c = 0; c < in; ++c) {
          const bool kept = m[static_cast<size_t>((r / b) * (in / b) + c / b)] != 0 && r / b != 3;  // block row 3 empty
          if (!kept) w[static_cast<size_t>(r * in + c)] = 0;
        }
      }
      const Tensor dense = from_vector<double>(w, {out, in}).to(dtype);
      const std::vector<std::pair<std::string, Tensor>> weights = {
          {"bsr", dense_to_bsr(dense, b, b)},
          {"blocked_ell", bsr_to_blocked_ell(dense_to_bsr(dense, b, b))},
          {"csr", to_format_for_test(dense, "csr", dtype)},
          {"coo", to_format_for_test(dense, "coo", dtype)}};
      for (const auto& [name, weight] : weights) {
        for (int64_t rows : {1, 2, 4, 5, 16, 17}) {
          const Tensor x = random_dense({rows, in}, seed++).to(dtype);
          const double tol = dtype == DType::kF64 ? 1e-12 : rtol_for(DType::kF32);
          EXPECT_TRUE(near(linear(x, weight), matmul(x.to(DType::kF64), dense.to(DType::kF64).t()), tol,
                           dtype == DType::kF64 ? 1e-12 : atol_for(DType::kF32, in)))
              << name << " b " << b << " rows " << rows << " " << dtype_name(dtype);
          EXPECT_EQ(linear(x, weight).to(DType::kF64).to_vector<double>(),
                    linear(x, weight).to(DType::kF64).to_vector<double>())
              << name << ": the same bits on repeat";
          // X @ W (W's rows scaled and added: the backward's dx, and a CSC weight's forward).
          const Tensor xo = random_dense({rows, out}, seed++).to(dtype);
          EXPECT_TRUE(near(matmul(xo, weight), matmul(xo.to(DType::kF64), dense.to(DType::kF64)), tol,
                           dtype == DType::kF64 ? 1e-12 : atol_for(DType::kF32, out)))
              << name << " x @ W, b " << b << " rows " << rows << " " << dtype_name(dtype);
          const Tensor csc = transpose(to_format_for_test(dense.t().contiguous(), "csr", dtype));  // CSC [out, in]
          EXPECT_TRUE(near(linear(x, csc), matmul(x.to(DType::kF64), dense.to(DType::kF64).t()), tol,
                           dtype == DType::kF64 ? 1e-12 : atol_for(DType::kF32, in)))
              << "csc b " << b << " rows " << rows << " " << dtype_name(dtype);
        }
      }
    }
  }
}

TEST(SimdPathTest, FollowsTheEnvironment) {
  // spmm_sse_test runs this file with COPPICE_CPU_SIMD=sse: the SSE2 loops.
  if (runtime_options().cpu_simd == CpuSimd::kSse) { EXPECT_FALSE(sparse_cpu::use_avx2()); }
  {
    ScopedRuntimeOptions sse([](RuntimeOptions& o) { o.cpu_simd = CpuSimd::kSse; });
    EXPECT_FALSE(sparse_cpu::use_avx2());
  }
  std::printf("sparse CPU loops: %s\n", sparse_cpu::use_avx2() ? "AVX2+FMA" : "SSE2");
}

TEST_F(SpmmTest, ErrorsNameTheOpAndOperands) {
  const Tensor a = to_format_for_test(random_matrix({12, 8}, 0.5, 31), "csr");
  EXPECT_THROWS_NAMING(matmul(a, zeros({7, 3})), "matmul: inner dimensions differ");
  EXPECT_THROWS_NAMING(matmul(a, zeros({8, 3}, DType::kF64)), "matmul: operands have different dtypes (f32 and f64)");
  EXPECT_THROWS_NAMING(matmul(a, zeros({2, 8, 3})), "with a sparse operand, expected a [.., m, k] and b [k, n]");
  EXPECT_THROWS_NAMING(linear(zeros({4, 7}), a), "linear: inner dimensions differ");
  EXPECT_THROWS_NAMING(linear(zeros({4, 8}), a, a), "linear: bias must be dense");
  EXPECT_THROWS_NAMING(linear_relu(zeros({4, 7}), a), "linear_relu: inner dimensions differ");
  EXPECT_THROWS_NAMING(linear_relu(zeros({4, 8}), a, a), "linear_relu: bias must be dense");
  EXPECT_THROWS_NAMING(linear_relu(zeros({4, 8}, DType::kF64), a), "linear_relu: operands have different dtypes");
}

}  // namespace
}  // namespace coppice
