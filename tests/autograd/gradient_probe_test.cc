// The gradient probe (autograd/gradient_probe.h): every product whose sparse
// operand gets its gradient by an SDDMM hands over factors whose product is
// that operand's whole gradient, the one a dense weight would get, in f64.
#include "autograd/gradient_probe.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "sparse/convert.h"
#include "tensor/ops.h"
#include "tests/autograd/test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;

// A BSR [8, 12] in 2x3 blocks storing about half of them.
Tensor sparse_weight() {
  Tensor w = randn64({8, 12});
  const Tensor keep = gt(randn64({4, 1, 4, 1}).expand({4, 2, 4, 3}).contiguous().reshape({8, 12}), 0.0);
  return to_format(where(keep, w, zeros_like(w)), "bsr", FormatOptions::block(2, 3));
}

// Sum of a_i @ b_i over the probe's factors for "w".
Tensor factor_sum(const GradientProbe& probe) {
  Tensor sum;
  for (const auto& [a, b] : probe.factors("w")) sum = sum.defined() ? add(sum, matmul(a, b)) : matmul(a, b);
  return sum;
}

// f(w) -> scalar loss, once with w sparse (probed) and once with w dense.
void expect_whole_gradient(const std::function<Variable(const Variable&)>& f, size_t pairs, const std::string& what) {
  const Tensor w = sparse_weight();
  const Variable ws = param(w), wd = param(to_dense(w));
  GradientProbe probe;
  probe.watch("w", w);
  f(ws).backward();
  f(wd).backward();
  ASSERT_EQ(probe.factors("w").size(), pairs) << what;
  EXPECT_TRUE(allclose(factor_sum(probe), wd.grad(), 1e-12, 1e-12)) << what;
}

TEST(GradientProbeTest, FactorsGiveTheWholeGradientOfEveryProduct) {
  const Tensor x = randn64({5, 12}), xt = randn64({12, 7}), xl = randn64({6, 8});
  const Tensor gy = randn64({5, 8}), gs = randn64({8, 7});  // fixed upstream gradients
  expect_whole_gradient([&](const Variable& w) { return sum(linear(param(x), w)); }, 1, "linear");
  expect_whole_gradient([&](const Variable& w) { return sum(mul(linear_relu(param(x), w), param(gy))); }, 1,
                        "linear_relu");
  // Either layer of gelu_mlp (w [8, 12]: first layer of 12 -> 8 -> 3, or second of 4 -> 12 -> 8).
  const Tensor w2 = randn64({3, 8}), w1 = randn64({12, 4}), x4 = randn64({5, 4});
  expect_whole_gradient(
      [&](const Variable& w) { return sum(gelu_mlp(param(x), w, Variable(), param(w2), Variable())); }, 1,
      "gelu_mlp, first layer");
  expect_whole_gradient(
      [&](const Variable& w) { return sum(mul(gelu_mlp(param(x4), param(w1), Variable(), w, Variable()), param(gy))); },
      1, "gelu_mlp, second layer");
  expect_whole_gradient([&](const Variable& w) { return sum(mul(matmul(w, param(xt)), param(gs))); }, 1, "S @ X");
  expect_whole_gradient([&](const Variable& w) { return sum(matmul(param(xl), w)); }, 1, "X @ S");
  // Used twice: two pairs whose sum is the accumulated gradient.
  expect_whole_gradient(
      [&](const Variable& w) {
        return add(sum(linear(param(x), w)), sum(mul(matmul(param(xl), w), param(xl.narrow(1, 0, 1)))));
      },
      2, "twice");
}

TEST(GradientProbeTest, OnlyWatchedWeightsAndOnlyWhileOpen) {
  const Tensor w = sparse_weight(), other = sparse_weight();
  const Tensor x = randn64({5, 12});
  {
    GradientProbe probe;
    probe.watch("w", w);
    sum(linear(param(x), param(other))).backward();
    EXPECT_TRUE(probe.factors("w").empty());
    EXPECT_TRUE(testing::throws_with([&] { probe.factors("v"); }, {"'v'", "not watched"}));
    EXPECT_TRUE(testing::throws_with([&] { probe.watch("w", w); }, {"'w'", "already watched"}));
    EXPECT_TRUE(testing::throws_with([&] { probe.watch("d", to_dense(w)); }, {"'d'", "sparse matrix"}));
    EXPECT_TRUE(testing::throws_with([] { GradientProbe second; }, {"already open"}));
  }
  GradientProbe reopened;  // the first one closed
  sum(linear(param(x), param(w))).backward();
  reopened.watch("w", w);
  EXPECT_TRUE(reopened.factors("w").empty());  // backward ran before the watch
}

// A probe sees the backward passes of the thread that opened it; another
// thread opens its own.
TEST(GradientProbeTest, OneProbePerThread) {
  const Tensor w = sparse_weight(), x = randn64({5, 12});
  GradientProbe mine;
  mine.watch("w", w);
  size_t theirs_saw = 0;
  std::thread other([&] {
    GradientProbe theirs;  // no conflict with this thread's
    theirs.watch("w", w);
    sum(linear(param(x), param(w))).backward();
    theirs_saw = theirs.factors("w").size();
  });
  other.join();
  EXPECT_EQ(theirs_saw, 1u);
  EXPECT_TRUE(mine.factors("w").empty());
  sum(linear(param(x), param(w))).backward();
  EXPECT_EQ(mine.factors("w").size(), 1u);
}

}  // namespace
}  // namespace coppice
