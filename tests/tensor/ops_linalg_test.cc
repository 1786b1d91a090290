// Tests for tensor/ops_linalg.cc: matmul with NumPy semantics (1-D operands,
// batch broadcasting, transposed views), bmm, linear and linear_relu, against
// double-precision reference loops.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

// Deterministic values in [-1, 1).
Tensor values(const Shape& shape, double seed, DType dtype = DType::kF64) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.7 * static_cast<double>(i));
  return from_vector<double>(v, shape, dtype);
}

// Reference NumPy matmul in double: a and b are brought to [..., m, k] and
// [..., k, n] by the caller's shapes; batch dims broadcast.
Tensor reference_matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "reference");
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape ae = batch, be = batch;
  ae.insert(ae.end(), {m, k});
  be.insert(be.end(), {k, n});
  std::vector<double> av = a.expand(ae).to_vector<double>(), bv = b.expand(be).to_vector<double>();
  int64_t nb = shape_numel(batch);
  std::vector<double> c(static_cast<size_t>(nb * m * n), 0.0);
  for (int64_t q = 0; q < nb; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[(q * m + i) * k + p] * bv[(q * k + p) * n + j];
        c[(q * m + i) * n + j] = s;
      }
  Shape out = batch;
  if (a_in.dim() > 1) out.push_back(m);
  if (b_in.dim() > 1) out.push_back(n);
  return from_vector<double>(c, out, DType::kF64);
}

void expect_matmul(const Tensor& a, const Tensor& b, double tol = 1e-12) {
  Tensor got = matmul(a, b);
  Tensor want = reference_matmul(a, b);
  ASSERT_EQ(got.shape(), want.shape()) << shape_to_string(a.shape()) << " x " << shape_to_string(b.shape());
  EXPECT_EQ(got.dtype(), a.dtype());
  EXPECT_LT(max_abs_diff(got, want), tol) << shape_to_string(a.shape()) << " x " << shape_to_string(b.shape());
}

TEST(Matmul, HandComputed) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{58, 64, 139, 154}));
}

TEST(Matmul, ShapesLikeNumPy) {
  expect_matmul(values({3, 4}, 1), values({4, 5}, 2));
  expect_matmul(values({4}, 1), values({4}, 2));  // dot: 0-d
  EXPECT_EQ(matmul(values({4}, 1), values({4}, 2)).dim(), 0);
  expect_matmul(values({4}, 1), values({4, 5}, 2));  // [5]
  expect_matmul(values({3, 4}, 1), values({4}, 2));  // [3]
  expect_matmul(values({2, 3, 4}, 1), values({4, 5}, 2));
  expect_matmul(values({3, 4}, 1), values({2, 4, 5}, 2));
  expect_matmul(values({2, 3, 4}, 1), values({2, 4, 5}, 2));
  expect_matmul(values({2, 1, 3, 4}, 1), values({5, 4, 2}, 2));     // batch [2, 1] with [5] -> [2, 5]
  expect_matmul(values({2, 1, 3, 4}, 1), values({1, 3, 4, 2}, 2));  // both broadcast -> [2, 3]
  expect_matmul(values({4}, 1), values({2, 3, 4, 5}, 2));
  expect_matmul(values({2, 3, 3, 4}, 1), values({4}, 2));
  expect_matmul(values({1, 3, 4}, 1), values({6, 4, 2}, 2));
}

TEST(Matmul, TransposedAndStridedOperands) {
  Tensor a = values({4, 3}, 1).t();  // [3, 4], transpose contiguous
  Tensor b = values({5, 4}, 2).t();  // [4, 5]
  expect_matmul(a, b);
  expect_matmul(values({2, 4, 3}, 1).transpose(1, 2), values({2, 4, 5}, 2));
  expect_matmul(values({2, 3, 4}, 1), values({2, 5, 4}, 2).transpose(-1, -2));
  expect_matmul(values({3, 8}, 1).slice(1, 0, 8, 2), values({4, 5}, 2));  // neither layout: copied
  expect_matmul(values({3, 4}, 1), values({1, 4, 1}, 2).expand({6, 4, 1}).squeeze(-1).t());
  expect_matmul(values({6, 3, 4}, 1).select(0, 2), values({4, 2}, 3));
  expect_matmul(values({4, 2, 3}, 1).permute({1, 2, 0}), values({4, 2}, 3));  // non-contiguous batched a
}

TEST(Matmul, EmptyAndDegenerate) {
  Tensor c = matmul(zeros({3, 0}), zeros({0, 4}));
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  EXPECT_EQ(c.to_vector<double>(), std::vector<double>(12, 0.0));  // empty sums are 0
  EXPECT_EQ(matmul(zeros({0, 3}), zeros({3, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(matmul(zeros({2, 0, 3}), zeros({3, 4})).shape(), (Shape{2, 0, 4}));
  expect_matmul(values({1, 1}, 1), values({1, 1}, 2));
  expect_matmul(values({5, 1}, 1), values({1, 6}, 2));
}

TEST(Matmul, OneRowOrOneColumnUnderEveryTransposition) {
  // The CPU runs these as matrix-vector products (gemv): each layout of each
  // operand (contiguous, or a transposed view whose transpose is), one row,
  // one column, both, batched and broadcast, f64 and f32.
  for (DType dtype : {DType::kF64, DType::kF32}) {
    const double tol = dtype == DType::kF64 ? 1e-12 : 1e-5;
    for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 7}, {6, 1}, {1, 1}}) {
      const int64_t k = 9;
      const Tensor a = values({m, k}, 1, dtype), at = values({k, m}, 2, dtype).t();
      const Tensor b = values({k, n}, 3, dtype), bt = values({n, k}, 4, dtype).t();
      for (const Tensor& x : {a, at}) {
        for (const Tensor& y : {b, bt}) expect_matmul(x, y, tol);
      }
      expect_matmul(values({3, m, k}, 5, dtype), values({3, k, n}, 6, dtype), tol);
      expect_matmul(values({3, m, k}, 7, dtype), values({k, n}, 8, dtype), tol);
      expect_matmul(values({m, k}, 9, dtype), values({3, n, k}, 10, dtype).transpose(1, 2), tol);
    }
  }
  const Tensor w = values({5, 9}, 11, DType::kF32), bias = values({5}, 12, DType::kF32);
  for (const Tensor& x : {values({1, 9}, 13, DType::kF32), values({9, 1}, 14, DType::kF32).t()}) {
    EXPECT_LT(max_abs_diff(linear(x, w, bias), add(reference_matmul(x, w.t()), bias.to(DType::kF64))), 1e-5);
  }
}

TEST(Matmul, SixteenBitAndF32) {
  Tensor a = values({8, 32}, 1), b = values({32, 16}, 2);
  Tensor ref = reference_matmul(a, b);
  Tensor f = matmul(a.to(DType::kF32), b.to(DType::kF32));
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_LT(max_abs_diff(f, ref), 1e-5);
  for (DType t : {DType::kBF16, DType::kF16}) {
    Tensor a16 = a.to(t), b16 = b.to(t);
    Tensor h = matmul(a16, b16);
    EXPECT_EQ(h.dtype(), t);
    // f32 accumulation: error is the rounding of inputs and output, not 32 roundings.
    Tensor exact = reference_matmul(a16.to(DType::kF64), b16.to(DType::kF64));
    double tol = t == DType::kBF16 ? 0.04 : 0.005;
    EXPECT_LT(max_abs_diff(h, exact), tol) << dtype_name(t);
  }
}

TEST(Bmm, MatchesLoops) {
  Tensor a = values({3, 2, 4}, 1), b = values({3, 4, 5}, 2);
  Tensor c = bmm(a, b);
  EXPECT_EQ(c.shape(), (Shape{3, 2, 5}));
  EXPECT_LT(max_abs_diff(c, reference_matmul(a, b)), 1e-12);
  EXPECT_LT(max_abs_diff(bmm(a, values({3, 5, 4}, 2).transpose(1, 2)),
                         reference_matmul(a, values({3, 5, 4}, 2).transpose(1, 2))),
            1e-12);
  EXPECT_ERROR_NAMING(bmm(a, values({2, 4, 5}, 2)), "bmm: batch sizes differ: a is [3, 2, 4], b is [2, 4, 5]");
  EXPECT_ERROR_NAMING(bmm(values({2, 4}, 1), values({4, 5}, 2)), "bmm: expected 3-D operands");
  EXPECT_ERROR_NAMING(bmm(a, values({3, 5, 5}, 2)), "bmm: inner dimensions differ");
}

TEST(Linear, WeightTransposedWithoutCopy) {
  Tensor x = values({2, 3, 4}, 1), w = values({5, 4}, 2), bias = values({5}, 3);
  Tensor y = linear(x, w, bias);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  Tensor ref = add(reference_matmul(x, w.t()), bias);
  EXPECT_LT(max_abs_diff(y, ref), 1e-12);
  EXPECT_LT(max_abs_diff(linear(x, w), reference_matmul(x, w.t())), 1e-12);
  Tensor v = linear(values({4}, 1), w, bias);  // 1-D input
  EXPECT_EQ(v.shape(), (Shape{5}));
  EXPECT_LT(max_abs_diff(v, add(reference_matmul(values({4}, 1), w.t()), bias)), 1e-12);
  // Hand-computed.
  Tensor hx = from_vector<float>({1, 2}, {1, 2});
  Tensor hw = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor hb = from_vector<float>({10, 20, 30});
  EXPECT_EQ(linear(hx, hw, hb).to_vector<double>(), (std::vector<double>{11, 22, 33}));
}

// Dense operands: linear_relu is relu(linear(...)), bit for bit.
TEST(LinearRelu, IsTheComposite) {
  Tensor w = values({5, 4}, 2), bias = values({5}, 3);
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    Tensor x = values(xs, 1);
    for (const Tensor& b : {bias, Tensor()}) {
      Tensor y = linear_relu(x, w, b), want = relu(linear(x, w, b));
      EXPECT_EQ(y.shape(), want.shape());
      EXPECT_EQ(y.to_vector<double>(), want.to_vector<double>()) << shape_to_string(xs);
    }
  }
  Tensor hx = from_vector<float>({1, -2}, {1, 2});
  Tensor hw = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor hb = from_vector<float>({1, 1, 0.5});
  EXPECT_EQ(linear_relu(hx, hw, hb).to_vector<double>(), (std::vector<double>{2, 0, 0}));
}

// The weight and bias gradients of a linear layer: g^T x and g's row sums.
TEST(LinearWeightGrad, IsTheProductAndTheRowSums) {
  Tensor g = values({5, 3}, 1), x = values({5, 4}, 2);
  const auto [gw, gb] = linear_weight_grad(g, x, /*bias=*/true);
  EXPECT_EQ(gw.shape(), (Shape{3, 4}));
  EXPECT_LT(max_abs_diff(gw, reference_matmul(g.t(), x)), 1e-12);
  ASSERT_TRUE(gb.defined());
  EXPECT_EQ(gb.shape(), (Shape{3}));
  const std::vector<double> gv = g.to_vector<double>(), sums = gb.to_vector<double>();
  for (int64_t o = 0; o < 3; ++o) {
    double s = 0;
    for (int64_t r = 0; r < 5; ++r) s += gv[static_cast<size_t>(r * 3 + o)];
    EXPECT_NEAR(sums[static_cast<size_t>(o)], s, 1e-12) << o;
  }
  // Without the bias: gw alone, the same bits.
  const auto [gw2, gb2] = linear_weight_grad(g, x, /*bias=*/false);
  EXPECT_FALSE(gb2.defined());
  EXPECT_EQ(gw2.to_vector<double>(), gw.to_vector<double>());
  // Hand-computed, f32.
  Tensor hg = from_vector<float>({1, 2, 3, 4}, {2, 2}), hx = from_vector<float>({1, 0, 2, 1, 1, 1}, {2, 3});
  const auto [hw, hb] = linear_weight_grad(hg, hx, true);
  EXPECT_EQ(hw.dtype(), DType::kF32);
  EXPECT_EQ(hw.to_vector<double>(), (std::vector<double>{4, 3, 5, 6, 4, 8}));
  EXPECT_EQ(hb.to_vector<double>(), (std::vector<double>{4, 6}));
  // No rows: zeros.
  const auto [ew, eb] = linear_weight_grad(zeros({0, 3}), zeros({0, 4}), true);
  EXPECT_EQ(ew.shape(), (Shape{3, 4}));
  EXPECT_EQ(ew.to_vector<double>(), std::vector<double>(12, 0.0));
  EXPECT_EQ(eb.to_vector<double>(), std::vector<double>(3, 0.0));
}

// gw written into gw_out (a slice of a larger buffer: a data-parallel
// bucket): returned as it, the same bits as a fresh gw, every float dtype;
// the buffer around it untouched.
TEST(LinearWeightGrad, WritesIntoGivenOutput) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor g = values({5, 3}, 1).to(dtype), x = values({5, 4}, 2).to(dtype);
    const auto [fresh, fresh_b] = linear_weight_grad(g, x, true);
    Tensor bucket = full({20}, 7.0, dtype);
    Tensor out = bucket.narrow(0, 4, 12).view({3, 4});
    const auto [gw, gb] = linear_weight_grad(g, x, true, out);
    EXPECT_EQ(gw.data_ptr(), out.data_ptr()) << dtype_name(dtype);
    EXPECT_EQ(gw.to_vector<double>(), fresh.to_vector<double>()) << dtype_name(dtype);
    EXPECT_EQ(gb.to_vector<double>(), fresh_b.to_vector<double>()) << dtype_name(dtype);
    const std::vector<double> all = bucket.to_vector<double>();
    for (size_t i : {0, 1, 2, 3, 16, 17, 18, 19}) EXPECT_EQ(all[i], 7.0) << dtype_name(dtype) << " " << i;
  }
  // No rows: gw_out zeroed.
  Tensor out = full({3, 4}, 5.0);
  const auto [ew, eb] = linear_weight_grad(zeros({0, 3}), zeros({0, 4}), false, out);
  EXPECT_EQ(out.to_vector<double>(), std::vector<double>(12, 0.0));
  EXPECT_FALSE(eb.defined());
}

TEST(LinearWeightGrad, RefusesAnOutputThatDoesNotFit) {
  Tensor g = zeros({5, 3}), x = zeros({5, 4});
  EXPECT_ERROR_NAMING(linear_weight_grad(g, x, false, zeros({4, 3})),
                      "linear_weight_grad: gw_out must be contiguous [3, 4], got [4, 3]");
  EXPECT_ERROR_NAMING(linear_weight_grad(g, x, false, zeros({4, 3}).t()), "got [3, 4] (not contiguous)");
  EXPECT_ERROR_NAMING(linear_weight_grad(g, x, false, zeros({3, 4}, DType::kF64)),
                      "linear_weight_grad: gw_out is f64 on cpu, expected f32 on cpu like the grad");
  Tensor both = zeros({32});
  EXPECT_ERROR_NAMING(
      linear_weight_grad(both.narrow(0, 0, 15).view({5, 3}), x, false, both.narrow(0, 16, 12).view({3, 4})),
      "linear_weight_grad: gw_out shares memory with the grad or the input");
}

TEST(Linalg, Errors) {
  EXPECT_ERROR_NAMING(matmul(zeros({2, 3}), zeros({4, 5})),
                      "matmul: inner dimensions differ: a is [2, 3], b is [4, 5]");
  EXPECT_ERROR_NAMING(matmul(zeros({3}), zeros({4})), "matmul: inner dimensions differ: a is [3], b is [4]");
  EXPECT_ERROR_NAMING(matmul(scalar_tensor(1), zeros({2})), "matmul: both operands must be at least 1-D");
  EXPECT_ERROR_NAMING(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), "matmul: shapes [2] and [3] do not broadcast");
  EXPECT_ERROR_NAMING(matmul(zeros({2, 3}), zeros({3, 2}, DType::kF64)),
                      "matmul: a and b have different dtypes (f32 and f64)");
  EXPECT_ERROR_NAMING(matmul(zeros({2, 3}, DType::kI64), zeros({3, 2}, DType::kI64)),
                      "matmul: expected floating-point operands, got i64");
  EXPECT_ERROR_NAMING(linear(zeros({2, 3}), zeros({4, 5})), "linear: input's last dimension (3) differs from weight's");
  EXPECT_ERROR_NAMING(linear(zeros({2, 3}), zeros({4, 3, 1})), "linear: weight must be 2-D");
  EXPECT_ERROR_NAMING(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})), "linear: bias must be [4], got [5]");
  EXPECT_ERROR_NAMING(linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, DType::kF64)), "linear: bias has dtype f64");
  EXPECT_ERROR_NAMING(linear_relu(zeros({2, 3}), zeros({4, 5})),
                      "linear_relu: input's last dimension (3) differs from weight's");
  EXPECT_ERROR_NAMING(linear_relu(zeros({2, 3}), zeros({4, 3}), zeros({5})), "linear_relu: bias must be [4], got [5]");
  EXPECT_ERROR_NAMING(linear_relu(zeros({2, 3}), zeros({4, 3}, DType::kBF16)),
                      "linear_relu: input and weight have different dtypes");
  EXPECT_ERROR_NAMING(linear(zeros({2, 3}), zeros({4, 3}, DType::kBF16)),
                      "linear: input and weight have different dtypes");
  EXPECT_ERROR_NAMING(linear_weight_grad(zeros({2, 3}), zeros({3, 4}), true),
                      "linear_weight_grad: expected grad [N, out] and input [N, in] with one N, got grad [2, 3] and "
                      "input [3, 4]");
  EXPECT_ERROR_NAMING(linear_weight_grad(zeros({2, 3}), zeros({2, 4}, DType::kF64), true),
                      "linear_weight_grad: grad and input have different dtypes (f32 and f64)");
}

TEST(LinalgOnGpu, MatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda(0);
  Tensor a = values({2, 3, 4}, 1), b = values({5, 4}, 2), bias = values({5}, 3);
  EXPECT_LT(max_abs_diff(linear(a, b, bias), linear(a.to(gpu), b.to(gpu), bias.to(gpu))), 1e-12);
  EXPECT_LT(max_abs_diff(matmul(values({2, 1, 3, 4}, 1), values({5, 4, 2}, 2)),
                         matmul(values({2, 1, 3, 4}, 1).to(gpu), values({5, 4, 2}, 2).to(gpu))),
            1e-12);
  EXPECT_LT(max_abs_diff(matmul(values({4}, 1), values({4, 3}, 2).t().t()),
                         matmul(values({4}, 1).to(gpu), values({4, 3}, 2).to(gpu))),
            1e-12);
  Tensor h = values({16, 32}, 4, DType::kBF16);
  EXPECT_LT(max_abs_diff(matmul(h, h.t()), matmul(h.to(gpu), h.to(gpu).t())), 0.05);
  EXPECT_ERROR_NAMING(matmul(zeros({2, 2}), zeros({2, 2}, gpu)),
                      "matmul: operands are on different devices (cpu and cuda:0)");
  EXPECT_ERROR_NAMING(linear(zeros({2, 2}, gpu), zeros({2, 2}, gpu), zeros({2})),
                      "linear: operands are on different devices");
}

}  // namespace
}  // namespace coppice
