// The straight-through projection (autograd/functions/straight_through.h):
// forward is the sparse tensor of the weight's values at the pattern; the
// weight's gradient through linear, linear_relu, both matmuls and to_dense is
// the dense product at every position, exactly (integer-valued f64, so any
// summation order gives the same bits); the true gradients of the other
// operands pass a float64 gradcheck; a gradient that reaches the projection
// only at its stored positions is refused.
#include "autograd/functions/straight_through.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "sparse/sparse_impl.h"
#include "tests/autograd/test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

// Integers in [-k, k] from a fixed stream, as f64 [rows, cols] (row-major host values too).
struct IntMatrix {
  std::vector<double> v;
  Tensor t;
};
IntMatrix ints(int64_t rows, int64_t cols, int64_t k, uint64_t seed) {
  IntMatrix m;
  uint64_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < rows * cols; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    m.v.push_back(static_cast<double>(static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(2 * k + 1)) - k));
  }
  m.t = from_vector<double>(m.v, {rows, cols});
  return m;
}

// A dense weight whose |w| are all distinct (no ties in the 2:4 selection).
Tensor distinct_weight(int64_t rows, int64_t cols) {
  std::vector<double> w;
  for (int64_t i = 0; i < rows * cols; ++i)
    w.push_back(((i * 7) % 11 + 1 + 0.01 * static_cast<double>(i)) * (i % 3 ? 1 : -1));
  return from_vector<double>(w, {rows, cols});
}

// a^T b over their rows, by loops: [a cols, b cols].
std::vector<double> at_b(const IntMatrix& a, const IntMatrix& b, int64_t rows, int64_t ac, int64_t bc) {
  std::vector<double> out(static_cast<size_t>(ac * bc), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < ac; ++i)
      for (int64_t j = 0; j < bc; ++j) out[i * bc + j] += a.v[r * ac + i] * b.v[r * bc + j];
  return out;
}

TEST(StraightThrough, ForwardIsTheWeightAtThePattern) {
  const Tensor w = distinct_weight(4, 8);
  const Tensor pattern = nm_compress(w, 2, 4);
  Variable wv = param(w, "w");
  const Variable p = straight_through(wv, pattern);
  ASSERT_EQ(p.value().layout(), Layout::kNm);
  EXPECT_EQ(pattern_version(p.value()), pattern_version(pattern));
  EXPECT_EQ(to_dense(p.value()).to_vector<double>(), nm_decompress(pattern).to_vector<double>());
  EXPECT_TRUE(wants_dense_gradient(p));
  EXPECT_FALSE(wants_dense_gradient(wv));
  // linear through it is linear with the projected weight.
  const Tensor x = randn64({3, 8});
  EXPECT_TRUE(allclose(linear(Variable(x), p, Variable()).value(), linear(x, nm_decompress(pattern), Tensor())));
  // Values come from the weight given, the positions from the pattern.
  const Tensor w2 = mul(w, 3.0);
  EXPECT_EQ(to_dense(straight_through(param(w2), pattern).value()).to_vector<double>(),
            mul(nm_decompress(pattern), 3.0).to_vector<double>());
  {
    NoGradGuard no_grad;
    const Variable q = straight_through(wv, pattern);
    EXPECT_FALSE(q.requires_grad());
    EXPECT_FALSE(wants_dense_gradient(q));
  }
}

// dW = dy^T x at every position, pruned ones included.
TEST(StraightThrough, LinearGivesTheWholeProductToTheWeight) {
  const int64_t n = 5, in = 8, out = 4;
  const IntMatrix x = ints(n, in, 3, 1), dy = ints(n, out, 2, 2);
  const Tensor pattern = nm_compress(distinct_weight(out, in), 2, 4);
  for (bool with_bias : {false, true}) {
    Variable w = param(distinct_weight(out, in), "w");
    Variable b = with_bias ? param(ints(1, out, 2, 3).t.reshape({out}), "b") : Variable();
    Variable y = linear(constant(x.t), straight_through(w, pattern), b);
    y.backward(dy.t);
    ASSERT_TRUE(w.grad().defined());
    EXPECT_TRUE(w.grad().is_dense());
    EXPECT_EQ(w.grad().to_vector<double>(), at_b(dy, x, n, out, in));
  }
}

// linear_relu: the product of the gradient through the relu.
TEST(StraightThrough, LinearReluGivesTheWholeProduct) {
  const int64_t n = 6, in = 8, out = 4;
  const IntMatrix x = ints(n, in, 3, 4), dy = ints(n, out, 2, 5);
  const Tensor wt = distinct_weight(out, in);
  const Tensor pattern = nm_compress(wt, 2, 4);
  Variable w = param(wt, "w");
  Variable y = linear_relu(constant(x.t), straight_through(w, pattern), Variable());
  y.backward(dy.t);
  const std::vector<double> yv = y.value().to_vector<double>();
  IntMatrix g = dy;
  for (size_t i = 0; i < g.v.size(); ++i)
    if (yv[i] <= 0) g.v[i] = 0;
  EXPECT_EQ(w.grad().to_vector<double>(), at_b(g, x, n, out, in));
}

// y = P x (dP = dy x^T) and y = x P (dP = x^T dy).
TEST(StraightThrough, MatmulsGiveTheWholeProduct) {
  const Tensor wt = distinct_weight(4, 8);
  const Tensor pattern = nm_compress(wt, 2, 4);
  {
    const IntMatrix x = ints(8, 3, 3, 6), dy = ints(4, 3, 2, 7);
    Variable w = param(wt, "w");
    matmul(straight_through(w, pattern), constant(x.t)).backward(dy.t);
    std::vector<double> expected(32, 0.0);  // dy x^T
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 8; ++j)
        for (int64_t k = 0; k < 3; ++k) expected[i * 8 + j] += dy.v[i * 3 + k] * x.v[j * 3 + k];
    EXPECT_EQ(w.grad().to_vector<double>(), expected);
  }
  {
    const IntMatrix x = ints(3, 4, 3, 8), dy = ints(3, 8, 2, 9);
    Variable w = param(wt, "w");
    matmul(constant(x.t), straight_through(w, pattern)).backward(dy.t);
    EXPECT_EQ(w.grad().to_vector<double>(), at_b(x, dy, 3, 4, 8));
  }
}

// to_dense passes the dense gradient through untouched (convolutions read a
// sparse weight so).
TEST(StraightThrough, ToDenseGivesTheWholeGradient) {
  const Tensor wt = distinct_weight(4, 8);
  const IntMatrix g = ints(4, 8, 3, 10);
  Variable w = param(wt, "w");
  to_dense(straight_through(w, nm_compress(wt, 2, 4))).backward(g.t);
  EXPECT_EQ(w.grad().to_vector<double>(), g.v);
}

// A transposable pattern works the same (W^T is 2:4 too).
TEST(StraightThrough, TransposablePattern) {
  const Tensor wt = distinct_weight(8, 8);
  const Tensor pattern = nm_compress(wt, transposable_nm_mask(wt), 2, 4);
  const IntMatrix x = ints(5, 8, 3, 11), dy = ints(5, 8, 2, 12);
  Variable w = param(wt, "w");
  linear(constant(x.t), straight_through(w, pattern), Variable()).backward(dy.t);
  EXPECT_EQ(w.grad().to_vector<double>(), at_b(dy, x, 5, 8, 8));
}

// The part that is a true gradient: x's and the bias's (and the dense
// operand's of a matmul), float64 gradcheck with the weight held constant.
TEST(StraightThrough, GradcheckOfTheOtherOperands) {
  const Tensor wt = randn64({4, 8});
  const Tensor pattern = nm_compress(wt, 2, 4);
  Variable x = param(randn64({3, 8}), "x"), b = param(randn64({4}), "b"), w = constant(wt);
  EXPECT_GRADCHECK([&](const V& v) { return linear(v[0], straight_through(w, pattern), v[1]); }, {x, b});
  EXPECT_GRADCHECK([&](const V& v) { return linear_relu(v[0], straight_through(w, pattern), v[1]); }, {x, b});
  // matmul's dense operand's gradient multiplies by P^T, which n:m holds
  // when the pattern is transposable.
  const Tensor square = randn64({8, 8});
  const Tensor both = nm_compress(square, transposable_nm_mask(square), 2, 4);
  Variable ws = constant(square), r = param(randn64({8, 2}), "r"), l = param(randn64({2, 8}), "l");
  EXPECT_GRADCHECK([&](const V& v) { return matmul(straight_through(ws, both), v[0]); }, {r});
  EXPECT_GRADCHECK([&](const V& v) { return matmul(v[0], straight_through(ws, both)); }, {l});
}

// An op that gives the projection its gradient at the stored positions only
// (mul by a dense tensor) is refused, naming what would do.
TEST(StraightThrough, AStoredPositionsGradientIsRefused) {
  const Tensor wt = distinct_weight(4, 8);
  Variable w = param(wt, "w");
  const Variable p = straight_through(w, nm_compress(wt, 2, 4));
  const Variable y = sum(mul(p, constant(ones({4, 8}, TensorOptions(DType::kF64)))));
  EXPECT_ERROR_NAMING(y.backward(), "use the projection in linear, linear_relu, matmul or to_dense");
}

TEST(StraightThrough, RefusesBadOperands) {
  const Tensor wt = distinct_weight(4, 8);
  const Tensor pattern = nm_compress(wt, 2, 4);
  EXPECT_ERROR_NAMING(straight_through(param(pattern), pattern), "the weight must be dense");
  EXPECT_ERROR_NAMING(straight_through(param(wt), wt), "the pattern must be sparse");
  EXPECT_ERROR_NAMING(straight_through(param(distinct_weight(4, 4)), pattern), "for a pattern of shape [4, 8]");
}

}  // namespace
}  // namespace coppice
