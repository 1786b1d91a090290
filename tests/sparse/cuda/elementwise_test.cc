// CPU parity of the sparse elementwise kernels on CUDA (sparse/cuda/
// elementwise.cc) for every format of sparse/: zero-preserving unary ops,
// sparse * / dense (full and scalar), sparse ** scalar, sparse +- dense in
// both orders, sums, the transpose, COO +- COO and CSR +- CSR; results keep
// their format and pattern version where the table says so, and no dense
// fallback runs. Every test skips without a GPU.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

TEST_F(SparseCudaTest, ValueOpsOnEveryFormatMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 900;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    for (double density : kDensities) {
      for (const Tensor& a : every_format(random_matrix({16, 24}, density, seed++, {3}).to(dtype))) {
        const Tensor ac = to_device(a, kCuda);
        const std::string what = str_cat(a.format(), " ", dtype_name(dtype), " density ", density);
        for (const char* op : {"neg", "abs", "relu", "tanh", "gelu"}) {
          const Tensor got = dispatch(op, {ac})[0], want = dispatch(op, {a})[0];
          EXPECT_EQ(got.format(), a.format()) << op << " " << what;
          EXPECT_EQ(pattern_version(got), pattern_version(a)) << op << " " << what;
          EXPECT_TRUE(near(got, want, dtype)) << op << " " << what;
        }
        // Dense operands away from 0, so that div is finite.
        const Tensor d = add(abs(random_dense({16, 24}, seed++)), scalar_tensor(0.5)).to(dtype);
        const Tensor row = add(abs(random_dense({1, 24}, seed++)), scalar_tensor(0.5)).to(dtype);
        const Tensor two = scalar_tensor(2.0, TensorOptions(dtype));
        EXPECT_TRUE(near(mul(ac, d.to(kCuda)), mul(a, d), dtype)) << "mul(sparse, dense) " << what;
        EXPECT_TRUE(near(mul(row.to(kCuda), ac), mul(row, a), dtype)) << "mul(dense row, sparse) " << what;
        EXPECT_TRUE(near(mul(ac, two.to(kCuda)), mul(a, two), dtype)) << "mul(sparse, scalar) " << what;
        EXPECT_TRUE(near(div(ac, d.to(kCuda)), div(a, d), dtype)) << "div " << what;
        EXPECT_TRUE(near(pow(ac, two.to(kCuda)), pow(a, two), dtype)) << "pow " << what;
        EXPECT_EQ(mul(ac, d.to(kCuda)).format(), a.format()) << what;
        EXPECT_TRUE(near(add(ac, d.to(kCuda)), add(a, d), dtype)) << "add(sparse, dense) " << what;
        EXPECT_TRUE(near(sub(d.to(kCuda), ac), sub(d, a), dtype)) << "sub(dense, sparse) " << what;
        EXPECT_TRUE(near(sub(ac, row.to(kCuda)), sub(a, row), dtype)) << "sub(sparse, dense row) " << what;
        EXPECT_TRUE(near(sum(ac), sum(a), dtype)) << "sum " << what;
        EXPECT_TRUE(near(sum(ac, {0}), sum(a, {0}), dtype)) << "sum dim 0 " << what;
        EXPECT_TRUE(near(sum(ac, {1}, true), sum(a, {1}, true), dtype)) << "sum dim 1 keepdim " << what;
        if (a.format() == "nm") continue;  // n:m's transpose is n:m only by chance (the CPU throws alike)
        const Tensor t = transpose(ac);
        EXPECT_EQ(t.shape(), (Shape{24, 16})) << what;
        EXPECT_TRUE(near(t, transpose(a), dtype)) << "transpose " << what;
      }
    }
  }
}

TEST_F(SparseCudaTest, SparsePlusSparseMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 1000;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const char* f : {"coo", "csr"}) {
      const Tensor a = to_format(random_matrix({12, 20}, 0.3, seed++, {0}).to(dtype), f);
      const Tensor b = to_format(random_matrix({12, 20}, 0.3, seed++, {1}).to(dtype), f);
      const Tensor ac = to_device(a, kCuda), bc = to_device(b, kCuda);
      for (const bool subtract : {false, true}) {
        const Tensor got = subtract ? sub(ac, bc) : add(ac, bc), want = subtract ? sub(a, b) : add(a, b);
        EXPECT_EQ(got.format(), f);
        EXPECT_EQ(nnz(got), nnz(want)) << f;
        EXPECT_TRUE(near(got, want, dtype)) << f << (subtract ? " sub" : " add");
      }
      // The same pattern: values added in place of a union.
      const Tensor twice = add(ac, with_values(ac, values(ac)));
      EXPECT_TRUE(near(twice, mul(a, scalar_tensor(2.0, TensorOptions(dtype))), dtype)) << f;
    }
  }
}

}  // namespace
}  // namespace coppice
