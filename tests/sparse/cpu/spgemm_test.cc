// Tests for sparse x sparse on the CPU (sparse/cpu/spgemm.cc): SpGEMM
// (spgemm and matmul of two CSR operands) and the union of two CSR patterns
// (add, sub), against dense f64 references; results are valid CSR (sorted,
// no duplicates), with fresh pattern versions, or the operand's when both
// share one pattern; bf16; errors.
#include <string>

#include "gtest/gtest.h"
#include "tests/sparse/cpu/test_util.h"

namespace coppice {
namespace {

using sparse_test::near;
using sparse_test::random_matrix;
using sparse_test::to_format_for_test;

class SpgemmTest : public sparse_test::NoFallback {};

Tensor f64(const Tensor& t) { return to_dense(t).to(DType::kF64); }

// Rebuilding from the parts runs sparse_csr's validation (sorted, unique, in range).
void expect_valid_csr(const Tensor& t) {
  ASSERT_EQ(t.format(), "csr");
  const CompressedImpl& c = csr_impl(t, "test");
  EXPECT_NO_THROW(sparse_csr(c.pointers(), c.indices(), c.values(), t.shape()));
}

TEST_F(SpgemmTest, AgainstDenseProduct) {
  uint64_t seed = 1;
  const std::vector<std::vector<int64_t>> mkn = {{1, 8, 12}, {12, 8, 40}, {36, 24, 8}, {0, 8, 4}, {12, 1, 9}};
  for (const auto& s : mkn) {
    for (double da : sparse_test::densities()) {
      for (double db : sparse_test::densities()) {
        const Tensor a = to_format_for_test(random_matrix({s[0], s[1]}, da, seed++), "csr");
        const Tensor b = to_format_for_test(random_matrix({s[1], s[2]}, db, seed++), "csr");
        const Tensor c = spgemm(a, b);
        expect_valid_csr(c);
        EXPECT_NE(pattern_version(c), pattern_version(a));
        EXPECT_TRUE(near(c, matmul(f64(a), f64(b)), 1e-5, 1e-5)) << s[0] << "x" << s[1] << "x" << s[2];
        // The stored pattern is the structural product: row r holds column j
        // when some a[r, i] and b[i, j] are both stored.
        const Tensor structural = matmul(ne(f64(a), 0.0).to(DType::kF64), ne(f64(b), 0.0).to(DType::kF64));
        EXPECT_EQ(nnz(c), static_cast<int64_t>(sum(ne(structural, 0.0)).item()));
        EXPECT_TRUE(near(matmul(a, b), c, 0, 0));  // the frontend reaches the same kernel
      }
    }
  }
}

TEST_F(SpgemmTest, F64AndBf16) {
  const Tensor a = to_format_for_test(random_matrix({36, 24}, 0.2, 5), "csr", DType::kF64);
  const Tensor b = to_format_for_test(random_matrix({24, 40}, 0.2, 6), "csr", DType::kF64);
  EXPECT_TRUE(near(spgemm(a, b), matmul(f64(a), f64(b)), 1e-12, 1e-12));
  const Tensor c = spgemm(to_dtype(a, DType::kBF16), to_dtype(b, DType::kBF16));
  EXPECT_EQ(c.dtype(), DType::kBF16);
  EXPECT_TRUE(near(c, matmul(f64(to_dtype(a, DType::kBF16)), f64(to_dtype(b, DType::kBF16))), 1e-2, 2e-2));
}

TEST_F(SpgemmTest, UnionOfPatterns) {
  uint64_t seed = 10;
  for (const Shape& shape : sparse_test::shapes()) {
    for (double da : sparse_test::densities()) {
      for (double db : {0.0, 0.3, 1.0}) {
        const Tensor a = to_format_for_test(random_matrix(shape, da, seed++), "csr");
        const Tensor b = to_format_for_test(random_matrix(shape, db, seed++), "csr");
        const Tensor s = add(a, b), d = sub(a, b);
        expect_valid_csr(s);
        expect_valid_csr(d);
        EXPECT_TRUE(near(s, add(f64(a), f64(b)), 1e-6, 1e-6)) << shape_to_string(shape);
        EXPECT_TRUE(near(d, sub(f64(a), f64(b)), 1e-6, 1e-6)) << shape_to_string(shape);
        // Every stored position of either operand is stored (values may cancel).
        EXPECT_EQ(nnz(s), static_cast<int64_t>(sum(ne(add(abs(f64(a)), abs(f64(b))), 0.0)).item()));
      }
    }
  }
}

TEST_F(SpgemmTest, OnePatternKeepsItsVersion) {
  const Tensor a = to_format_for_test(random_matrix({12, 40}, 0.3, 20), "csr");
  const Tensor b = with_values(a, mul(values(a), 3.0));
  const Tensor s = add(a, b);
  EXPECT_EQ(pattern_version(s), pattern_version(a));
  EXPECT_TRUE(near(s, mul(f64(a), 4.0), 1e-6, 1e-6));
  EXPECT_TRUE(near(sub(a, b), mul(f64(a), -2.0), 1e-6, 1e-6));
}

TEST_F(SpgemmTest, Errors) {
  const Tensor a = to_format_for_test(random_matrix({12, 8}, 0.5, 1), "csr");
  EXPECT_THROWS_NAMING(spgemm(a, a), "spgemm: inner dimensions differ");
  EXPECT_THROWS_NAMING(spgemm(a, to_format_for_test(random_matrix({8, 4}, 0.5, 2), "coo")),
                       "spgemm: expected two CSR operands, got formats 'csr' and 'coo'");
  EXPECT_THROWS_NAMING(add(a, to_format_for_test(random_matrix({12, 4}, 0.5, 2), "csr")), "add");
}

}  // namespace
}  // namespace coppice
