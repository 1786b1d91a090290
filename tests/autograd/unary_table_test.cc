// Every op of tensor/unary_ops.h, swept from the table (so an op added there
// is tested here without a line of its own): its float64 gradcheck, and its
// forward and gradient on every built-in sparse format against the dense op.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/functions/elementwise.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/sparse.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tensor/unary_ops.h"
#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn_away;
using testing::uniform64;

// Inputs inside every op's smooth domain: positive for the ops defined only
// there, away from 0 (the kinks of abs, relu and sign) for the rest.
bool positive_only(std::string_view op) { return op == "log" || op == "sqrt" || op == "rsqrt"; }
Tensor smooth_input(std::string_view op, const Shape& shape) {
  return positive_only(op) ? uniform64(shape, 0.3, 3.0) : randn_away(shape, 0.0, 0.2);
}

// A [4, 8] matrix whose zeros every built-in format can hold: two non-zeros
// in every group of four along a row (n:m's 2:4) and whole 2x2 blocks zero.
Tensor sparse_friendly(std::string_view op) {
  Tensor x = smooth_input(op, {4, 8});
  std::vector<double> keep(32, 0.0);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 8; ++c) keep[r * 8 + c] = (c % 4) < 2 && !(r < 2 && c < 2) ? 1.0 : 0.0;
  }
  return mul(x, from_vector<double>(keep, {4, 8}));
}

FormatOptions options_for(const std::string& format) {
  return is_block_format(format) ? FormatOptions::block(2) : FormatOptions{};
}

std::vector<double> dense_values(const Tensor& t) { return to_dense(t).to_vector<double>(); }

template <typename Op>
Variable apply(const Variable& x) {
  std::vector<Variable> out;
  // The table's functions by name, through the generated overloads.
#define COPPICE_PICK(fn, Name) \
  if constexpr (std::is_same_v<Op, unary_ops::Name>) out.push_back(coppice::fn(x));
  COPPICE_UNARY_OPS(COPPICE_PICK)
#undef COPPICE_PICK
  return out.at(0);
}

TEST(UnaryTableTest, EveryOpGradchecksInFloat64) {
  unary_ops::for_each([](auto op) {
    using Op = decltype(op);
    SCOPED_TRACE(Op::kName);
    Variable x = param(smooth_input(Op::kName, {3, 5}), "x");
    EXPECT_GRADCHECK([](const std::vector<Variable>& v) { return apply<Op>(v[0]); }, {x});
  });
}

TEST(UnaryTableTest, EveryOpOnEverySparseFormat) {
  unary_ops::for_each([](auto op) {
    using Op = decltype(op);
    const Tensor dense = sparse_friendly(Op::kName);
    const std::vector<double> want = apply<Op>(Variable(dense)).value().template to_vector<double>();
    for (const std::string& format : builtin_sparse_format_names()) {
      SCOPED_TRACE(std::string(Op::kName) + " on " + format);
      const Tensor x = to_format(dense, format, options_for(format));
      Dispatcher::instance().reset_fallback_counts();
      const Tensor y = apply<Op>(Variable(x)).value();
      EXPECT_EQ(dense_values(y), want);
      if (Op::kZeroPreserving) {
        // The pattern is kept: the stored values map, no dense fallback.
        EXPECT_EQ(y.format(), x.format());
        EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
      } else {
        EXPECT_FALSE(Dispatcher::instance().fallback_counts().empty());  // f(0) != 0: counted, dense
      }
    }
  });
}

TEST(UnaryTableTest, ZeroPreservingOpsGiveGradientsOnTheStoredValues) {
  unary_ops::for_each([](auto op) {
    using Op = decltype(op);
    if (!Op::kZeroPreserving) return;
    const Tensor dense = sparse_friendly(Op::kName);
    Variable xd = param(dense);
    sum(apply<Op>(xd)).backward();
    const std::vector<double> dense_grad = xd.grad().to_vector<double>();
    for (const std::string& format : builtin_sparse_format_names()) {
      SCOPED_TRACE(std::string(Op::kName) + " on " + format);
      Variable xs = param(to_format(dense, format, options_for(format)));
      sum(apply<Op>(xs)).backward();
      ASSERT_TRUE(xs.grad().defined());
      EXPECT_EQ(xs.grad().format(), xs.value().format());
      // The dense gradient at the stored positions (n:m stores zeros too), 0 elsewhere.
      const std::vector<double> stored = dense_values(with_values(xs.value(), ones_like(values(xs.value()))));
      const std::vector<double> got = dense_values(xs.grad());
      ASSERT_EQ(got.size(), dense_grad.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const double want = stored[i] != 0 ? dense_grad[i] : 0.0;
        if (std::isfinite(want)) {
          EXPECT_NEAR(got[i], want, 1e-12) << i;
        } else {
          EXPECT_EQ(got[i], want) << i;  // sqrt's gradient at a stored 0
        }
      }
    }
  });
}

}  // namespace
}  // namespace coppice
