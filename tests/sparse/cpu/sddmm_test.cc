// Tests for SDDMM on the CPU (sparse/cpu/sddmm.cc) through sparse/ops.h:
// every pattern format at densities 0, 0.1, 0.5 and 1, empty rows, one-row
// and non-square shapes, against (a @ b) * mask in f64; the result keeps the
// pattern's format, parts and version; b as a transposed view (the SpMM
// gradient); f64 and bf16; errors.
#include <string>

#include "gtest/gtest.h"
#include "tests/sparse/cpu/test_util.h"

namespace coppice {
namespace {

using sparse_test::near;
using sparse_test::random_dense;
using sparse_test::random_matrix;
using sparse_test::to_format_for_test;

class SddmmTest : public sparse_test::NoFallback {};

// The stored positions of `pattern` as a dense 0/1 f64 matrix (explicit zeros
// count as stored): a pattern with every value set to 1.
Tensor stored_mask(const Tensor& pattern) {
  return to_dense(with_values(pattern, ones_like(values(pattern)).to(DType::kF64)));
}

TEST_F(SddmmTest, EveryFormatAgainstMaskedProduct) {
  uint64_t seed = 1;
  for (const std::string& f : sparse_test::formats()) {
    for (const Shape& shape : sparse_test::shapes()) {
      for (double density : sparse_test::densities()) {
        const Tensor p = to_format_for_test(random_matrix(shape, density, seed++), f);
        for (int64_t k : {1, 9, 40}) {
          const Tensor a = random_dense({shape[0], k}, seed++).to(DType::kF32);
          const Tensor b = random_dense({k, shape[1]}, seed++).to(DType::kF32);
          const Tensor s = sddmm(a, b, p);
          ASSERT_EQ(s.format(), f);
          EXPECT_EQ(pattern_version(s), pattern_version(p));
          EXPECT_EQ(values(s).shape(), values(p).shape());
          EXPECT_EQ(s.dtype(), DType::kF32);
          const Tensor want = mul(matmul(a.to(DType::kF64), b.to(DType::kF64)), stored_mask(p));
          EXPECT_TRUE(near(s, want, 1e-5, 1e-5 * static_cast<double>(k)))
              << f << " " << shape_to_string(shape) << " density " << density << " k " << k;
        }
      }
    }
  }
}

TEST_F(SddmmTest, KeepsTheParts) {
  const Tensor p = to_format_for_test(random_matrix({12, 40}, 0.3, 3), "csr");
  const Tensor s = sddmm(random_dense({12, 5}, 4).to(DType::kF32), random_dense({5, 40}, 5).to(DType::kF32), p);
  const CompressedImpl& cp = csr_impl(p, "test");
  const CompressedImpl& cs = csr_impl(s, "test");
  EXPECT_TRUE(cs.pointers().is_same(cp.pointers()));
  EXPECT_TRUE(cs.indices().is_same(cp.indices()));
}

TEST_F(SddmmTest, GradientOfSpmmWithTransposedView) {
  // dL/dW for y = W @ x with dL/dy = g is (g @ x^T) at W's pattern.
  const Tensor w = to_format_for_test(random_matrix({36, 24}, 0.2, 7), "csr", DType::kF64);
  const Tensor x = random_dense({24, 70}, 8);
  const Tensor g = random_dense({36, 70}, 9);
  const Tensor grad = sddmm(g, x.t(), w);
  EXPECT_TRUE(near(grad, mul(matmul(g, x.t()), stored_mask(w)), 1e-12, 1e-12));
  EXPECT_EQ(grad.dtype(), DType::kF64);
}

TEST_F(SddmmTest, Bf16ComputesInF32) {
  uint64_t seed = 20;
  for (const std::string& f : sparse_test::formats()) {
    const Tensor p = to_format_for_test(random_matrix({12, 40}, 0.5, seed++), f, DType::kBF16);
    const Tensor a = random_dense({12, 33}, seed++).to(DType::kBF16);
    const Tensor b = random_dense({33, 40}, seed++).to(DType::kBF16);
    const Tensor s = sddmm(a, b, p);
    EXPECT_EQ(s.dtype(), DType::kBF16);
    EXPECT_TRUE(near(s, mul(matmul(a.to(DType::kF64), b.to(DType::kF64)), stored_mask(p)), 1e-2, 2e-2)) << f;
  }
}

TEST_F(SddmmTest, UncoalescedCooDuplicatesEachHoldTheProduct) {
  const Tensor p = sparse_coo(from_vector<int64_t>({0, 1, 0, 1, 2, 1}, {2, 3}), from_vector<float>({1, 1, 1}), {2, 3});
  const Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = from_vector<float>({1, 0, 2, 0, 1, 3}, {2, 3});
  const Tensor s = sddmm(a, b, p);  // a @ b = [[1, 2, 8], [3, 4, 18]]
  EXPECT_EQ(values(s).to_vector<float>(), (std::vector<float>{2, 18, 2}));
}

// sddmm_row_sums: sddmm's output and a's row sums; on the CPU the frontend
// composes the two (the fused kernel is CUDA's), a as a transposed view (dy^T)
// or contiguous.
TEST_F(SddmmTest, RowSumsBesideTheValues) {
  uint64_t seed = 30;
  for (const std::string& f : sparse_test::formats()) {
    const Tensor p = to_format_for_test(random_matrix({12, 40}, 0.3, seed++), f, DType::kF64);
    for (bool transposed : {true, false}) {
      const Tensor a = transposed ? random_dense({17, 12}, seed++).t() : random_dense({12, 17}, seed++);
      const Tensor b = random_dense({17, 40}, seed++);
      EXPECT_FALSE(sddmm_row_sums_fused(p)) << f;  // no CPU cell: composed
      const auto [s, sums] = sddmm_row_sums(a, b, p);
      EXPECT_EQ(s.format(), f);
      EXPECT_EQ(pattern_version(s), pattern_version(p));
      EXPECT_TRUE(near(s, sddmm(a, b, p), 0, 0)) << f;
      EXPECT_EQ(sums.shape(), (Shape{12}));
      EXPECT_TRUE(near(sums, sum(a, {1}), 1e-12, 1e-12)) << f;
    }
  }
  EXPECT_THROWS_NAMING(
      sddmm_row_sums(zeros({12, 3}), zeros({4, 8}), to_format_for_test(random_matrix({12, 8}, 0.5, 1), "csr")),
      "sddmm_row_sums: inner dimensions differ");
}

TEST_F(SddmmTest, Errors) {
  const Tensor p = to_format_for_test(random_matrix({12, 8}, 0.5, 1), "csr");
  EXPECT_THROWS_NAMING(sddmm(zeros({12, 3}), zeros({4, 8}), p), "sddmm: inner dimensions differ");
  EXPECT_THROWS_NAMING(sddmm(zeros({11, 3}), zeros({3, 8}), p), "sddmm: pattern has shape [12, 8], expected [11, 8]");
  EXPECT_THROWS_NAMING(sddmm(zeros({12, 3}), zeros({3, 8}), zeros({12, 8})), "sddmm: pattern must be a sparse tensor");
  EXPECT_THROWS_NAMING(sddmm(zeros({12, 3}), zeros({3, 8}, DType::kF64), p), "sddmm: a and b must share");
  EXPECT_THROWS_NAMING(sddmm(p, zeros({8, 8}), p), "sddmm");
}

}  // namespace
}  // namespace coppice
