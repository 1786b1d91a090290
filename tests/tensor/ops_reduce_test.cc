// Tests for tensor/ops_reduce.cc: sums, means, extrema, norms and top-k over
// any dims, against double-precision reference loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// A [2, 3, 4] tensor with distinct values: x[i][j][k] = v(i, j, k).
double v(int64_t i, int64_t j, int64_t k) { return std::sin(1.0 + i * 12 + j * 4 + k) * 10; }
Tensor cube(DType dtype = DType::kF64) {
  std::vector<double> data;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) data.push_back(v(i, j, k));
  return from_vector<double>(data, {2, 3, 4}, dtype);
}

TEST(Reduce, SumAll) {
  Tensor x = cube();
  double ref = 0;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) ref += v(i, j, k);
  Tensor s = sum(x);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), DType::kF64);
  EXPECT_NEAR(s.item(), ref, 1e-12);
  EXPECT_NEAR(sum(x.permute({2, 0, 1})).item(), ref, 1e-12);  // non-contiguous
  EXPECT_EQ(sum(zeros({0, 3})).item(), 0.0);
  EXPECT_EQ(sum(scalar_tensor(4.5)).item(), 4.5);
  // Integers and bool sum in i64.
  Tensor i = from_vector<int32_t>({1, 2, 3, 2000000000, 2000000000});
  EXPECT_EQ(sum(i).dtype(), DType::kI64);
  EXPECT_EQ(sum(i).item<int64_t>(), 4000000006);
  Tensor b = from_vector<bool>({true, false, true});
  EXPECT_EQ(sum(b).dtype(), DType::kI64);
  EXPECT_EQ(sum(b).item(), 2.0);
}

TEST(Reduce, SumOverDimsAgainstLoops) {
  Tensor x = cube();
  // Over dim 1, keepdim and not.
  Tensor s1 = sum(x, {1});
  EXPECT_EQ(s1.shape(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{2, 1, 4}));
  std::vector<double> got = vals(s1);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 4; ++k) {
      double ref = 0;
      for (int64_t j = 0; j < 3; ++j) ref += v(i, j, k);
      EXPECT_NEAR(got[i * 4 + k], ref, 1e-12);
    }
  // Over dims {0, 2} (given in any order, negative allowed).
  Tensor s02 = sum(x, {-1, 0}, true);
  EXPECT_EQ(s02.shape(), (Shape{1, 3, 1}));
  got = vals(s02);
  for (int64_t j = 0; j < 3; ++j) {
    double ref = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) ref += v(i, j, k);
    EXPECT_NEAR(got[j], ref, 1e-12);
  }
  EXPECT_NEAR(sum(x, {}).item(), sum(x).item(), 1e-12);  // no dims: all
  EXPECT_EQ(sum(x, {0, 1, 2}, true).shape(), (Shape{1, 1, 1}));
  // Non-contiguous input over a dim.
  EXPECT_LT(max_abs_diff(sum(x.transpose(0, 2), {2}), sum(x, {0}).t()), 1e-12);
  // Reducing an empty dim gives zeros; an empty kept dim gives an empty result.
  EXPECT_EQ(vals(sum(zeros({2, 0}), {1})), (std::vector<double>{0, 0}));
  EXPECT_EQ(sum(zeros({0, 3}), {1}).shape(), (Shape{0}));
}

TEST(Reduce, SumSixteenBitAccumulatesInF32) {
  // A running bf16 sum of ones would stall at 256 (256 + 1 rounds to 256); the kernel accumulates in f32.
  Tensor x = ones({4097}, DType::kBF16);
  Tensor s = sum(x);
  EXPECT_EQ(s.dtype(), DType::kBF16);
  EXPECT_EQ(s.item(), 4096.0);  // 4097, rounded to bf16 once at the end
  Tensor h = full({3000}, 0.1, DType::kF16);
  EXPECT_NEAR(sum(h).item(), 3000 * static_cast<double>(static_cast<float>(Half(0.1f))), 2.0);
}

TEST(Reduce, Mean) {
  Tensor x = cube();
  Tensor m = mean(x, {2});
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  std::vector<double> got = vals(m);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < 4; ++k) ref += v(i, j, k);
      EXPECT_NEAR(got[i * 3 + j], ref / 4, 1e-12);
    }
  EXPECT_NEAR(mean(x).item(), sum(x).item() / 24, 1e-12);
  EXPECT_EQ(mean(x, {0, 1}, true).shape(), (Shape{1, 1, 4}));
  Tensor i = from_vector<int64_t>({1, 2});
  EXPECT_EQ(mean(i).dtype(), DType::kF32);  // integers average as floats
  EXPECT_EQ(mean(i).item(), 1.5);
  EXPECT_EQ(mean(cube(DType::kBF16)).dtype(), DType::kBF16);
  EXPECT_NEAR(mean(cube(DType::kBF16)).item(), mean(x).item(), 0.05);
  EXPECT_TRUE(std::isnan(mean(zeros({0})).item()));  // 0 / 0
}

TEST(Reduce, MaxMinWithIndices) {
  Tensor x = cube();
  ValuesIndices mx = max(x, 1);
  ValuesIndices mn = min(x, -1, true);
  EXPECT_EQ(mx.values.shape(), (Shape{2, 4}));
  EXPECT_EQ(mx.indices.dtype(), DType::kI64);
  EXPECT_EQ(mn.values.shape(), (Shape{2, 3, 1}));
  std::vector<double> mxv = vals(mx.values), mxi = vals(mx.indices);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 4; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < 3; ++j)
        if (v(i, j, k) > v(i, best, k)) best = j;
      EXPECT_EQ(mxv[i * 4 + k], v(i, best, k));
      EXPECT_EQ(mxi[i * 4 + k], best);
    }
  std::vector<double> mnv = vals(mn.values), mni = vals(mn.indices);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      int64_t best = 0;
      for (int64_t k = 1; k < 4; ++k)
        if (v(i, j, k) < v(i, j, best)) best = k;
      EXPECT_EQ(mnv[i * 3 + j], v(i, j, best));
      EXPECT_EQ(mni[i * 3 + j], best);
    }
  EXPECT_EQ(vals(argmax(x, 1)), mxi);
  EXPECT_EQ(vals(argmin(x, 2, true)), mni);
  // Ties: the first index wins.
  Tensor t = from_vector<float>({3, 1, 3, 1}, {1, 4});
  EXPECT_EQ(argmax(t, 1).item(), 0.0);
  EXPECT_EQ(argmin(t, 1).item(), 1.0);
  // Over a non-contiguous view, and on integers and bool.
  EXPECT_EQ(vals(max(x.transpose(0, 2).contiguous().transpose(0, 2), 0).values), vals(max(x, 0).values));
  EXPECT_EQ(vals(max(from_vector<int64_t>({4, -9, 7}, {3}), 0).values), (std::vector<double>{7}));
  ValuesIndices bm = max(from_vector<bool>({false, true, true}), 0);
  EXPECT_EQ(bm.values.dtype(), DType::kBool);
  EXPECT_EQ(bm.values.item(), 1.0);
  EXPECT_EQ(bm.indices.item(), 1.0);
  // 0-d: itself, index 0.
  ValuesIndices s = max(scalar_tensor(2.0), 0);
  EXPECT_EQ(s.values.item(), 2.0);
  EXPECT_EQ(s.indices.item(), 0.0);
}

TEST(Reduce, MaxMinAll) {
  Tensor x = cube();
  double hi = -1e9, lo = 1e9;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) hi = std::max(hi, v(i, j, k)), lo = std::min(lo, v(i, j, k));
  EXPECT_EQ(max(x).item(), hi);
  EXPECT_EQ(min(x).item(), lo);
  EXPECT_EQ(max(x).dim(), 0);
  EXPECT_EQ(max(x.permute({1, 2, 0})).item(), hi);
  EXPECT_EQ(min(from_vector<float>({3, -2}, {}, DType::kF16)).dtype(), DType::kF16);
  // NaN propagates, as in PyTorch.
  EXPECT_TRUE(std::isnan(max(from_vector<float>({1, NAN, 3})).item()));
}

TEST(Reduce, Norms) {
  Tensor x = from_vector<double>({3, -4, 0, 12}, {2, 2});
  EXPECT_NEAR(norm(x).item(), 13.0, 1e-12);
  EXPECT_NEAR(norm(x, 1).item(), 19.0, 1e-12);
  EXPECT_EQ(norm(x, INFINITY).item(), 12.0);
  EXPECT_EQ(norm(x, -INFINITY).item(), 0.0);
  EXPECT_EQ(norm(x, 0).item(), 3.0);  // non-zeros
  EXPECT_NEAR(norm(x, 3).item(), std::cbrt(27 + 64 + 1728.0), 1e-12);
  EXPECT_NEAR(norm(x, 0.5).item(), std::pow(std::sqrt(3.0) + 2 + std::sqrt(12.0), 2), 1e-12);
  // Over dims.
  Tensor rows = norm(x, 2, {1});
  EXPECT_EQ(rows.shape(), (Shape{2}));
  EXPECT_LT(max_abs_diff(rows, from_vector<double>({5, 12})), 1e-12);
  EXPECT_EQ(norm(x, 1, {0}, true).shape(), (Shape{1, 2}));
  EXPECT_LT(max_abs_diff(norm(x, 1, {0}, true), from_vector<double>({3, 16}, {1, 2})), 1e-12);
  EXPECT_LT(max_abs_diff(norm(x, INFINITY, {0}), from_vector<double>({3, 12})), 1e-12);
  // 16-bit inputs are reduced in f32 and rounded once.
  Tensor big = full({10000}, 1.0, DType::kBF16);
  EXPECT_EQ(norm(big).dtype(), DType::kBF16);
  EXPECT_EQ(norm(big).item(), 100.0);
  // Integers give f32.
  EXPECT_EQ(norm(from_vector<int64_t>({3, 4})).dtype(), DType::kF32);
  EXPECT_EQ(norm(from_vector<int64_t>({3, 4})).item(), 5.0);
  EXPECT_EQ(norm(zeros({0}), INFINITY).item(), 0.0);
  EXPECT_ERROR_NAMING(norm(x, NAN), "norm: p must not be NaN");
}

TEST(Reduce, TopkAlongAnyDim) {
  Tensor x = cube();
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (bool largest : {true, false}) {
      int64_t n = x.size(dim), k = std::min<int64_t>(2, n);
      ValuesIndices t = topk(x, k, dim, largest);
      Shape expected = x.shape();
      expected[dim] = k;
      ASSERT_EQ(t.values.shape(), expected);
      ASSERT_EQ(t.indices.shape(), expected);
      // Reference: sort each line along dim.
      std::vector<double> tv = vals(t.values), ti = vals(t.indices);
      Shape strides = contiguous_strides(expected);
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 3; ++b)
          for (int64_t c = 0; c < 4; ++c) {
            int64_t idx[3] = {a, b, c};
            if (idx[dim] != 0) continue;
            std::vector<std::pair<double, int64_t>> line;
            for (int64_t p = 0; p < n; ++p) {
              int64_t q[3] = {a, b, c};
              q[dim] = p;
              line.push_back({v(q[0], q[1], q[2]), p});
            }
            std::stable_sort(line.begin(), line.end(),
                             [&](auto& l, auto& r) { return largest ? l.first > r.first : l.first < r.first; });
            for (int64_t p = 0; p < k; ++p) {
              int64_t q[3] = {a, b, c};
              q[dim] = p;
              int64_t off = q[0] * strides[0] + q[1] * strides[1] + q[2] * strides[2];
              EXPECT_EQ(tv[off], line[p].first) << "dim " << dim << " largest " << largest;
              EXPECT_EQ(ti[off], line[p].second) << "dim " << dim << " largest " << largest;
            }
          }
    }
  }
  // Ties: the lower index first.
  ValuesIndices tie = topk(from_vector<float>({1, 5, 5, 2}), 3);
  EXPECT_EQ(vals(tie.values), (std::vector<double>{5, 5, 2}));
  EXPECT_EQ(vals(tie.indices), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(topk(x, 0, 1).values.shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(vals(topk(from_vector<int64_t>({4, 9, 1}), 1).values), (std::vector<double>{9}));
  EXPECT_ERROR_NAMING(topk(x, 5, 1), "topk: k = 5 is out of range for dim 1 of size 3");
  EXPECT_ERROR_NAMING(topk(x, -1), "topk");
  EXPECT_ERROR_NAMING(topk(x, 1, 3), "topk: dim 3 is out of range");
}

TEST(Reduce, Errors) {
  Tensor x = cube();
  EXPECT_ERROR_NAMING(sum(x, {3}), "sum: dim 3 is out of range for a tensor of 3 dimensions");
  EXPECT_ERROR_NAMING(sum(x, {1, -2}), "sum: dim 1 appears more than once");
  EXPECT_ERROR_NAMING(mean(x, {0, 0}), "mean");
  EXPECT_ERROR_NAMING(max(x, 5), "max: dim 5 is out of range");
  EXPECT_ERROR_NAMING(min(zeros({2, 0}), 1), "min: cannot reduce dim 1 of size 0");
  EXPECT_ERROR_NAMING(max(zeros({0})), "max: cannot reduce an empty tensor");
  EXPECT_ERROR_NAMING(argmin(x, -4), "argmin: dim -4");
  EXPECT_ERROR_NAMING(sum(Tensor()), "sum: input is an undefined tensor");
}

TEST(ReduceOnGpu, MatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda(0);
  Tensor x = cube(), g = cube().to(gpu);
  EXPECT_LT(max_abs_diff(sum(x, {0, 2}), sum(g, {0, 2})), 1e-12);
  EXPECT_LT(max_abs_diff(mean(x, {1}, true), mean(g, {1}, true)), 1e-12);
  EXPECT_EQ(max_abs_diff(max(x, 1).indices, max(g, 1).indices), 0.0);
  EXPECT_EQ(max_abs_diff(argmin(x, 2), argmin(g, 2)), 0.0);
  EXPECT_LT(max_abs_diff(norm(x, 3, {2}), norm(g, 3, {2})), 1e-12);
  EXPECT_EQ(max(g).device(), gpu);
  ValuesIndices tc = topk(x, 2, 1, false), tg = topk(g, 2, 1, false);
  EXPECT_EQ(max_abs_diff(tc.values, tg.values), 0.0);
  EXPECT_EQ(max_abs_diff(tc.indices, tg.indices), 0.0);
}

}  // namespace
}  // namespace coppice
