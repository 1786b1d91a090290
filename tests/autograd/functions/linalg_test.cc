#include "autograd/functions/linalg.h"

#include <gtest/gtest.h>

#include "autograd/functions/mlp.h"
#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

TEST(LinalgTest, MatmulShapes) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 2}},           // 2-D
      {{4}, {4, 2}},              // 1-D left
      {{3, 4}, {4}},              // 1-D right
      {{4}, {4}},                 // dot
      {{2, 3, 4}, {2, 4, 5}},     // batched
      {{2, 3, 4}, {4, 5}},        // batch times a shared matrix
      {{3, 4}, {2, 4, 5}},        // shared matrix times a batch
      {{2, 1, 3, 4}, {5, 4, 2}},  // broadcast batch dims
      {{4}, {2, 4, 3}},           // 1-D times a batch
      {{2, 3, 4}, {4}},           // batch times 1-D
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_to_string(c.a) + " x " + shape_to_string(c.b));
    Variable a = param(randn64(c.a), "a"), b = param(randn64(c.b), "b");
    EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {a, b});
  }
}

TEST(LinalgTest, MatmulOneSide) {
  Variable a = param(randn64({2, 3, 4})), b = constant(randn64({4, 5}));
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {a, b});
  Variable c = constant(randn64({3, 4})), d = param(randn64({2, 4, 5}));
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {c, d});
}

TEST(LinalgTest, Bmm) {
  Variable a = param(randn64({3, 2, 4})), b = param(randn64({3, 4, 5}));
  EXPECT_GRADCHECK([](const V& v) { return bmm(v[0], v[1]); }, {a, b});
}

// One node whose value and gradients are those of relu(linear(...)) exactly.
TEST(LinalgTest, LinearReluMatchesTheComposite) {
  for (bool with_bias : {true, false}) {
    Tensor xv = randn64({2, 5, 4}), wv = randn64({3, 4}), bv = randn64({3}), g = randn64({2, 5, 3});
    auto run = [&](bool fused) {
      Variable x = param(xv, "x"), w = param(wv, "w"), b = with_bias ? param(bv, "b") : Variable();
      Variable y = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
      if (fused) { EXPECT_EQ(y.grad_fn()->name(), "LinearReluBackward"); }
      y.backward(g);
      return std::vector<Tensor>{y.value(), x.grad(), w.grad(), with_bias ? b.grad() : zeros({1}, DType::kF64)};
    };
    std::vector<Tensor> fused = run(true), composite = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_EQ(fused[i].to_vector<double>(), composite[i].to_vector<double>())
          << "output " << i << " bias " << with_bias;
    }
  }
}

// gelu_mlp: one node whose value and gradients are those of linear, gelu,
// linear exactly, with and without biases, any weight frozen, in either GELU
// form (gelu or gelu_tanh between the layers); gradchecks in both forms.

TEST(LinalgTest, GeluMlpMatchesTheComposite) {
  for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    SCOPED_TRACE(form == GeluForm::kTanh ? "tanh" : "erf");
    for (bool with_bias : {true, false}) {
      for (int frozen = -1; frozen < 2; ++frozen) {
        const Tensor xv = randn64({2, 5, 4}), w1v = randn64({6, 4}), b1v = randn64({6}), w2v = randn64({3, 6});
        const Tensor b2v = randn64({3}), g = randn64({2, 5, 3});
        auto run = [&](bool fused) {
          Variable x = param(xv, "x");
          Variable w1 = frozen == 0 ? constant(w1v) : param(w1v, "w1"),
                   w2 = frozen == 1 ? constant(w2v) : param(w2v, "w2");
          Variable b1 = with_bias ? param(b1v, "b1") : Variable(), b2 = with_bias ? param(b2v, "b2") : Variable();
          Variable y =
              fused ? gelu_mlp(x, w1, b1, w2, b2, form) : linear(gelu_of_form(linear(x, w1, b1), form), w2, b2);
          if (fused) { EXPECT_EQ(y.grad_fn()->name(), "GeluMlpBackward"); }
          y.backward(g);
          auto grad = [](const Variable& v) {
            return v.defined() && v.grad().defined() ? v.grad() : zeros({1}, DType::kF64);
          };
          return std::vector<Tensor>{y.value(), grad(x), grad(w1), grad(b1), grad(w2), grad(b2)};
        };
        std::vector<Tensor> fused = run(true), composite = run(false);
        for (size_t i = 0; i < fused.size(); ++i) {
          EXPECT_EQ(fused[i].to_vector<double>(), composite[i].to_vector<double>())
              << "output " << i << " bias " << with_bias << " frozen weight " << frozen;
        }
      }
    }
    Variable w1 = param(randn64({6, 4}), "w1"), b1 = param(randn64({6}), "b1");
    Variable w2 = param(randn64({3, 6}), "w2"), b2 = param(randn64({3}), "b2");
    for (const Shape& xs : {Shape{4}, Shape{2, 4}, Shape{2, 5, 4}}) {
      SCOPED_TRACE(shape_to_string(xs));
      Variable x = param(randn64(xs), "x");
      EXPECT_GRADCHECK([form](const V& v) { return gelu_mlp(v[0], v[1], v[2], v[3], v[4], form); },
                       {x, w1, b1, w2, b2});
    }
    Variable x = param(randn64({3, 4}), "x");
    EXPECT_GRADCHECK([form](const V& v) { return gelu_mlp(v[0], v[1], Variable(), v[2], Variable(), form); },
                     {x, w1, w2});
  }
}

// linear, and linear_relu (one node saving its output).
TEST(LinalgTest, Linear) {
  Variable w = param(randn64({3, 4}), "weight"), bias = param(randn64({3}), "bias");
  for (const Shape& xs : {Shape{4}, Shape{2, 4}, Shape{2, 5, 4}}) {
    SCOPED_TRACE(shape_to_string(xs));
    Variable x = param(randn64(xs), "x");
    EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, bias});
    EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1]); }, {x, w});
    EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {x, w, bias});
    EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1]); }, {x, w});
  }
  Variable x = constant(randn64({2, 4}));
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, bias});
  EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {x, w, bias});
  // A frozen weight: the bias gradient without the weight's (linear_output_grads,
  // not linear_weight_grad).
  Variable xp = param(randn64({2, 5, 4}), "x"), frozen = constant(randn64({3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1], v[2]); }, {xp, frozen, bias});
  EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {xp, frozen, bias});
}

}  // namespace
}  // namespace coppice
