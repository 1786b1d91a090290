// gemm against a double-precision reference loop.
#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::call1;
using testing::expect_error;
using testing::expect_values;
using testing::make;
using testing::noise;
using testing::values;

Attrs trans(bool ta, bool tb) {
  Attrs a;
  a.set("trans_a", ta);
  a.set("trans_b", tb);
  return a;
}

// c[i] = op(a[i or 0]) op(b[i or 0]) in double, from the operands' stored values.
std::vector<double> reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  std::vector<double> av = values(a), bv = values(b);
  const int64_t ba = a.size(0), bb = b.size(0), batch = std::max(ba, bb);
  const int64_t m = ta ? a.size(2) : a.size(1), k = ta ? a.size(1) : a.size(2), n = tb ? b.size(1) : b.size(2);
  std::vector<double> c(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t z = 0; z < batch; ++z) {
    const double* pa = av.data() + (ba == 1 ? 0 : z) * m * k;
    const double* pb = bv.data() + (bb == 1 ? 0 : z) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += (ta ? pa[p * m + i] : pa[i * k + p]) * (tb ? pb[j * k + p] : pb[p * n + j]);
        c[(z * m + i) * n + j] = s;
      }
  }
  return c;
}

TEST(GemmTest, AllTransposesAndDtypes) {
  const int64_t m = 5, k = 7, n = 3;
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (auto [ba, bb] : {std::pair<int64_t, int64_t>{2, 2}, {1, 3}, {3, 1}, {1, 1}}) {
          Shape sa = ta ? Shape{ba, k, m} : Shape{ba, m, k};
          Shape sb = tb ? Shape{bb, n, k} : Shape{bb, k, n};
          Tensor a = make(sa, noise(shape_numel(sa), 21), t);
          Tensor b = make(sb, noise(shape_numel(sb), 22), t);
          Tensor c = call1("gemm", {a, b}, trans(ta, tb));
          EXPECT_EQ(c.dtype(), t);
          EXPECT_EQ(c.shape(), (Shape{std::max(ba, bb), m, n}));
          double tol = t == DType::kF64 ? 1e-13 : t == DType::kF32 ? 1e-5 : t == DType::kBF16 ? 3e-2 : 4e-3;
          expect_values(c, reference(a, b, ta, tb), tol, tol,
                        str_cat(dtype_name(t), " ta=", ta, " tb=", tb, " ba=", ba, " bb=", bb));
        }
      }
    }
  }
}

TEST(GemmTest, LargeF32AndNonContiguousInput) {
  const int64_t m = 129, k = 257, n = 65;
  Tensor a = make({1, k, m}, noise(m * k, 23), DType::kF32).transpose(1, 2);  // [1, m, k], not contiguous
  Tensor b = make({1, k, n}, noise(k * n, 24), DType::kF32);
  Tensor c = call1("gemm", {a, b}, trans(false, false));
  expect_values(c, reference(a.contiguous(), b, false, false), 1e-5, 1e-4);
}

TEST(GemmTest, TransposedAndSlicedViewsWithFlags) {
  const int64_t m = 4, k = 6, n = 5;
  Tensor a = make({2, m, k}, noise(2 * m * k, 25), DType::kF64);
  Tensor b = make({2, k, n}, noise(2 * k * n, 26), DType::kF64);
  Tensor want = call1("gemm", {a, b}, trans(false, false));
  // The same products from views: a^T as a transposed view, given with trans_a.
  Tensor at = a.transpose(1, 2);  // [2, k, m] view
  EXPECT_FALSE(at.is_contiguous());
  expect_values(call1("gemm", {at, b}, trans(true, false)), values(want), 1e-14, 1e-14);
  Tensor bt = b.transpose(1, 2).contiguous().transpose(1, 2);  // [2, k, n], column-major inside
  expect_values(call1("gemm", {a, bt}, trans(false, false)), values(want), 1e-14, 1e-14);
  Tensor wide = make({2, m, 2 * k}, noise(4 * m * k, 27), DType::kF64);
  Tensor sliced = wide.slice(2, 0, 2 * k, 2);  // [2, m, k], every other column
  expect_values(call1("gemm", {sliced, b}, trans(false, false)), reference(sliced.contiguous(), b, false, false), 1e-14,
                1e-14);
}

TEST(GemmTest, ZeroSizes) {
  Tensor c = call1("gemm", {Tensor::empty({2, 3, 0}), Tensor::empty({2, 0, 4})}, trans(false, false));
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4}));
  expect_values(c, std::vector<double>(24, 0.0));
  c = call1("gemm", {Tensor::empty({2, 0, 5}, DType::kBF16), Tensor::empty({1, 5, 4}, DType::kBF16)},
            trans(false, false));
  EXPECT_EQ(c.shape(), (Shape{2, 0, 4}));
  c = call1("gemm", {Tensor::empty({0, 3, 5}), Tensor::empty({1, 5, 4})}, trans(false, false));
  EXPECT_EQ(c.shape(), (Shape{0, 3, 4}));
}

TEST(GemmTest, BadInputsThrowNamingGemm) {
  expect_error(
      [] {
        dispatch("gemm", {make({1, 1, 1}, {1}, DType::kBool), make({1, 1, 1}, {1}, DType::kBool)});
      },
      "gemm");
  expect_error(
      [] {
        dispatch("gemm", {make({1, 1, 1}, {1}, DType::kI64), make({1, 1, 1}, {1}, DType::kI64)});
      },
      "gemm");
  expect_error([] { dispatch("gemm", {Tensor::empty({1, 2, 3}), Tensor::empty({1, 4, 2})}); }, "gemm");
  expect_error([] { dispatch("gemm", {Tensor::empty({2, 2, 3}), Tensor::empty({3, 3, 2})}); }, "gemm");
  expect_error([] { dispatch("gemm", {Tensor::empty({2, 3}), Tensor::empty({3, 2})}); }, "gemm");
  expect_error([] { dispatch("gemm", {Tensor::empty({1, 2, 3}), Tensor::empty({1, 3, 2}, DType::kF64)}); }, "gemm");
}

}  // namespace
}  // namespace coppice
