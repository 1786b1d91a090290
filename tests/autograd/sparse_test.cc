// Gradients through sparse values (autograd/functions/sparse.h): float64
// gradchecks of every sparse-aware function (linear_relu included; gelu_mlp
// in both GELU forms) on CSR, COO and BSR (values and dense operands), the
// format and pattern version of sparse gradients, no dense fallback in the
// CSR backward, accumulation, hooks and a tiny training loop on a sparse CSR
// weight.
#include "autograd/functions/sparse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/mlp.h"
#include "autograd/sparse_grad.h"
#include "sparse/convert.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"
#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using testing::randn_away;
using V = std::vector<Variable>;

const std::vector<std::string> kFormats = {"csr", "coo", "bsr"};

// A random f64 sparse matrix of `format` (about half the entries stored; BSR
// in 2x2 blocks), every stored value at least 0.1 away from 0 (for kinks).
Tensor random_sparse(const Shape& shape, const std::string& format) {
  Tensor mask = lt(rand(shape, DType::kF64, testing::test_gen()), 0.5);
  FormatOptions options = format == "bsr" ? FormatOptions::block(2) : FormatOptions{};
  Tensor s = sparse_from_mask(randn64(shape), mask, format, options);
  return with_values(s, randn_away(values(s).shape(), 0.0));
}

class SparseGradTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseGradTest, MatmulSparseDense) {
  Variable w = param(random_sparse({4, 6}, GetParam()), "w"), x = param(randn64({6, 3}), "x");
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {w, x});
}

TEST_P(SparseGradTest, MatmulDenseSparse) {
  Variable x = param(randn64({3, 4}), "x"), w = param(random_sparse({4, 6}, GetParam()), "w");
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {x, w});
}

TEST_P(SparseGradTest, MatmulOneSide) {
  Variable w = param(random_sparse({4, 6}, GetParam()), "w"), x = constant(randn64({6, 2}));
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {w, x});
  Variable w2 = constant(random_sparse({4, 6}, GetParam())), x2 = param(randn64({6, 2}), "x");
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {w2, x2});
}

// linear, and linear_relu (SparseLinearReluBackward).
TEST_P(SparseGradTest, Linear) {
  Variable x = param(randn64({5, 6}), "x"), w = param(random_sparse({4, 6}, GetParam()), "w");
  Variable b = param(randn64({4}), "b");
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {x, w, b});
  Variable x3 = param(randn64({2, 3, 6}), "x3");
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1]); }, {x3, w});
  EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1]); }, {x3, w});
}

// gelu_mlp with sparse weights (GeluMlpBackward), in either GELU form:
// gradchecks, and values and gradients (each weight's on its pattern) equal
// to linear, gelu (or gelu_tanh), linear's.
TEST_P(SparseGradTest, GeluMlp) {
  for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    SCOPED_TRACE(form == GeluForm::kTanh ? "tanh" : "erf");
    const Tensor w1v = random_sparse({8, 6}, GetParam()), w2v = random_sparse({4, 8}, GetParam());
    Variable x = param(randn64({5, 6}), "x"), w1 = param(w1v, "w1"), w2 = param(w2v, "w2");
    Variable b1 = param(randn64({8}), "b1"), b2 = param(randn64({4}), "b2");
    EXPECT_GRADCHECK([form](const V& v) { return gelu_mlp(v[0], v[1], v[2], v[3], v[4], form); }, {x, w1, b1, w2, b2});
    Variable x3 = param(randn64({2, 3, 6}), "x3");
    EXPECT_GRADCHECK([form](const V& v) { return gelu_mlp(v[0], v[1], Variable(), v[2], Variable(), form); },
                     {x3, w1, w2});
    const Tensor xv = randn64({2, 3, 6}), g = randn64({2, 3, 4});
    auto run = [&](bool fused) {
      Variable xp = param(xv, "x"), w1p = param(w1v, "w1"), w2p = param(w2v, "w2");
      Variable b1p = param(b1.value(), "b1"), b2p = param(b2.value(), "b2");
      Variable y;
      if (fused) {
        y = gelu_mlp(xp, w1p, b1p, w2p, b2p, form);
        EXPECT_EQ(y.grad_fn()->name(), "GeluMlpBackward");
      } else {
        y = linear(gelu_of_form(linear(xp, w1p, b1p), form), w2p, b2p);
      }
      y.backward(g);
      EXPECT_EQ(w1p.grad().format(), GetParam());
      EXPECT_EQ(w2p.grad().format(), GetParam());
      return std::vector<Tensor>{y.value(), xp.grad(), values(w1p.grad()), b1p.grad(), values(w2p.grad()), b2p.grad()};
    };
    std::vector<Tensor> fused = run(true), composite = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_EQ(fused[i].to_vector<double>(), composite[i].to_vector<double>()) << "output " << i;
    }
  }
}

// Values and gradients (the sparse weight's on its pattern) equal those of
// relu(linear(...)), for 2-D and 3-D inputs, with and without a bias.
TEST_P(SparseGradTest, LinearReluMatchesTheComposite) {
  const Tensor wv = random_sparse({4, 6}, GetParam()), bv = randn64({4});
  for (const Shape& xs : {Shape{5, 6}, Shape{2, 3, 6}}) {
    for (bool with_bias : {true, false}) {
      const Tensor xv = randn64(xs);
      Shape ys = xs;
      ys.back() = 4;
      const Tensor g = randn64(ys);
      auto run = [&](bool fused) {
        Variable x = param(xv, "x"), w = param(wv, "w"), b = with_bias ? param(bv, "b") : Variable();
        Variable y = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
        if (fused) { EXPECT_EQ(y.grad_fn()->name(), "SparseLinearReluBackward"); }
        y.backward(g);
        EXPECT_EQ(w.grad().format(), GetParam());
        return std::vector<Tensor>{y.value(), x.grad(), values(w.grad()),
                                   with_bias ? b.grad() : zeros({1}, DType::kF64)};
      };
      std::vector<Tensor> fused = run(true), composite = run(false);
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_EQ(fused[i].to_vector<double>(), composite[i].to_vector<double>())
            << "output " << i << " input " << shape_to_string(xs) << " bias " << with_bias;
      }
    }
  }
}

TEST_P(SparseGradTest, Mul) {
  Variable s = param(random_sparse({4, 6}, GetParam()), "s"), d = param(randn64({4, 6}), "d");
  EXPECT_GRADCHECK([](const V& v) { return mul(v[0], v[1]); }, {s, d});
  EXPECT_GRADCHECK([](const V& v) { return mul(v[1], v[0]); }, {s, d});
  Variable row = param(randn64({6}), "row");  // broadcast to the sparse shape
  EXPECT_GRADCHECK([](const V& v) { return mul(v[0], v[1]); }, {s, row});
}

TEST_P(SparseGradTest, Add) {
  Variable s = param(random_sparse({4, 6}, GetParam()), "s"), d = param(randn64({4, 6}), "d");
  EXPECT_GRADCHECK([](const V& v) { return add(v[0], v[1]); }, {s, d});
  EXPECT_GRADCHECK([](const V& v) { return add(v[1], v[0]); }, {s, d});
  Variable row = param(randn64({1, 6}), "row");
  EXPECT_GRADCHECK([](const V& v) { return add(v[0], v[1]); }, {s, row});
}

TEST_P(SparseGradTest, Unary) {
  Variable s = param(random_sparse({4, 6}, GetParam()), "s");
  EXPECT_GRADCHECK([](const V& v) { return relu(v[0]); }, {s});
  EXPECT_GRADCHECK([](const V& v) { return abs(v[0]); }, {s});
  EXPECT_GRADCHECK([](const V& v) { return neg(v[0]); }, {s});
  // Composed with a product, so the sparse result feeds a dense one.
  Variable x = param(randn64({6, 2}), "x");
  EXPECT_GRADCHECK([](const V& v) { return matmul(relu(v[0]), v[1]); }, {s, x});
}

TEST_P(SparseGradTest, Sum) {
  Variable s = param(random_sparse({4, 6}, GetParam()), "s");
  EXPECT_GRADCHECK([](const V& v) { return sum(v[0]); }, {s});
  EXPECT_GRADCHECK([](const V& v) { return sum(v[0], {0}); }, {s});
  EXPECT_GRADCHECK([](const V& v) { return sum(v[0], {1}, true); }, {s});
}

TEST_P(SparseGradTest, ValuesAndWithValues) {
  Variable s = param(random_sparse({4, 6}, GetParam()), "s");
  // Any function of the values: a sparse output of the same pattern...
  EXPECT_GRADCHECK(
      [](const V& v) {
        Variable vals = values(v[0]);
        return with_values(v[0].value(), mul(exp(vals), vals));
      },
      {s});
  // ... or a dense one.
  EXPECT_GRADCHECK([](const V& v) { return tanh(values(v[0])); }, {s});
  EXPECT_GRADCHECK([](const V& v) { return to_dense(v[0]); }, {s});
}

TEST_P(SparseGradTest, LinearSparseInput) {
  Variable x = param(random_sparse({6, 4}, GetParam()), "x"), w = param(randn64({3, 4}), "w");
  Variable b = param(randn64({3}), "b");
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {x, w, b});
}

TEST_P(SparseGradTest, GradcheckCatchesAWrongSparseGradient) {
  Variable s = param(random_sparse({4, 6}, GetParam()), "s");
  auto wrong = [](const V& v) {
    Tensor p = v[0].value();
    return record(mul(p, 2.0), "WrongBackward", {v[0]}, [p](const Tensor& g, const GradNeeds&) {
      return std::vector<Tensor>{with_values(p, mul(grad_values(g, p, "test"), 3.0))};
    });
  };
  GradcheckResult r = gradcheck(wrong, {s});
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("'s'"), std::string::npos) << r.message;
  // The same forward with the right backward (mul by a scalar keeps the pattern).
  auto right = [](const V& v) { return mul(v[0], 2.0); };
  EXPECT_GRADCHECK(right, {s});
}

INSTANTIATE_TEST_SUITE_P(Formats, SparseGradTest, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// 2:4 whose rows hold whole metadata words multiplies through the hardware
// form's CPU twin (the mma.sp metadata decoded: sparse/cpu/spmm.cc), with a
// transposable pattern, as the GPU's dx = dy W path needs.
TEST(SparseGradTest, Nm24LinearThroughTheHardwareFormTwin) {
  const Tensor dense = randn_away({16, 32}, 0.0);
  const Tensor w = nm_compress(dense, transposable_nm_mask(dense), 2, 4);
  Variable x = param(randn64({5, 32}), "x"), wv = param(w, "w"), b = param(randn64({16}), "b");
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1], v[2]); }, {x, wv, b});
  EXPECT_GRADCHECK([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {x, wv, b});
  Variable dy = param(randn64({3, 16}), "dy");
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {dy, wv});
}

TEST(SparseGradTest, MatmulGradIsCsrOfThePattern) {
  Tensor wt = random_sparse({5, 7}, "csr");
  Variable w = param(wt, "w"), x = param(randn64({7, 3}), "x");
  sum(matmul(w, x)).backward();
  const Tensor& g = w.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.layout(), Layout::kCsr);
  EXPECT_EQ(pattern_version(g), pattern_version(wt));
  EXPECT_EQ(values(g).numel(), nnz(wt));
  EXPECT_EQ(g.shape(), wt.shape());
  // Against the dense gradient sampled at the pattern: dW = G X^T with G = ones.
  Tensor dense = matmul(ones({5, 3}, x.value().options()), x.value().t());
  Tensor expected = values(mul(with_values(wt, ones_like(values(wt))), dense));
  EXPECT_TRUE(allclose(values(g), expected));
  EXPECT_TRUE(x.grad().is_dense());
}

TEST(SparseGradTest, CsrMatmulBackwardTakesNoDenseFallback) {
  Dispatcher& d = Dispatcher::instance();
  Variable w = param(random_sparse({6, 8}, "csr"), "w"), x = param(randn64({8, 4}), "x");
  Variable b = param(randn64({6}), "b"), xin = param(randn64({3, 8}), "xin");
  Variable left = param(randn64({2, 6}), "left");
  d.reset_fallback_counts();
  bool was_error = d.fallback_is_error();
  d.set_fallback_is_error(true);
  try {
    sum(matmul(w, x)).backward();
    sum(matmul(left, w)).backward();
    sum(linear(xin, w, b)).backward();
    sum(mul(relu(w), Variable(randn64({6, 8})))).backward();
  } catch (...) {
    d.set_fallback_is_error(was_error);
    throw;
  }
  d.set_fallback_is_error(was_error);
  EXPECT_TRUE(d.fallback_counts().empty());
  EXPECT_EQ(w.grad().layout(), Layout::kCsr);
}

TEST(SparseGradTest, AccumulatesOverBackwardCalls) {
  Tensor wt = random_sparse({4, 5}, "csr");
  Variable w = param(wt, "w"), x = constant(randn64({5, 2}));
  sum(matmul(w, x)).backward();
  Tensor once = values(w.grad()).clone();
  sum(matmul(w, x)).backward();
  EXPECT_EQ(pattern_version(w.grad()), pattern_version(wt));
  EXPECT_TRUE(allclose(values(w.grad()), mul(once, 2.0)));
  // Two uses in one graph add in the engine.
  w.zero_grad();
  EXPECT_EQ(w.grad().layout(), Layout::kCsr);
  EXPECT_EQ(sum(values(w.grad())).item(), 0.0);
  add(sum(matmul(w, x)), sum(matmul(w, x))).backward();
  EXPECT_TRUE(allclose(values(w.grad()), mul(once, 2.0)));
}

TEST(SparseGradTest, HooksSeeTheSparseGradient) {
  Tensor wt = random_sparse({4, 5}, "coo");
  Variable w = param(wt, "w");
  bool seen = false;
  w.register_hook([&](const Tensor& g) {
    seen = true;
    EXPECT_EQ(g.layout(), Layout::kCoo);
    EXPECT_EQ(pattern_version(g), pattern_version(wt));
    return mul(g, 3.0);
  });
  sum(w).backward();
  EXPECT_TRUE(seen);
  EXPECT_TRUE(allclose(values(w.grad()), full_like(values(wt), 3.0)));
}

// The accumulator stores the gradient the backward op made, not a copy,
// when nothing else holds it: a dense one, and a sparse one's values (its
// pattern may be shared: patterns are never written). A pre-hook that keeps
// the gradient gets a copy stored, so that grad() never aliases it.
TEST(SparseGradTest, AccumulatorStoresTheGradientItWasGiven) {
  auto data_of = [](const Tensor& t) { return (t.is_dense() ? t : values(t)).data_ptr(); };
  for (const char* format : {"dense", "csr", "coo", "bsr"}) {
    Variable w = param(format == std::string("dense") ? randn64({4, 6}) : random_sparse({4, 6}, format), "w");
    Variable x(randn64({6, 3}));
    const void* made = nullptr;
    HookId id = w.register_hook([&](const Tensor& g) {
      made = data_of(g);
      return Tensor();
    });
    sum(matmul(w, x)).backward();
    EXPECT_EQ(data_of(w.grad()), made) << format;

    w.remove_hook(id);
    w.set_grad(Tensor());
    Tensor kept;
    w.register_hook([&](const Tensor& g) {
      kept = g;
      return Tensor();
    });
    sum(matmul(w, x)).backward();
    EXPECT_NE(data_of(w.grad()), data_of(kept)) << format;
    EXPECT_TRUE(allclose(to_dense(w.grad()), to_dense(kept))) << format;
  }
}

TEST(SparseGradTest, OtherPatternIsAClearError) {
  Variable w = param(random_sparse({4, 5}, "csr"), "w");
  Tensor other = random_sparse({4, 5}, "csr");
  try {
    w.set_grad(other);
    FAIL() << "set_grad with another pattern should throw";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("pattern version"), std::string::npos) << e.what(); }
  // A dense gradient is projected onto the pattern.
  w.set_grad(ones({4, 5}, values(w.value()).options()));
  EXPECT_EQ(w.grad().layout(), Layout::kCsr);
  EXPECT_EQ(values(w.grad()).numel(), nnz(w.value()));
}

TEST(SparseGradTest, TrainingLoopLossFalls) {
  Tensor pattern = random_sparse({8, 8}, "csr");
  Tensor target_w = with_values(pattern, randn64(values(pattern).shape()));
  Tensor x = randn64({8, 16});
  Tensor y = matmul(target_w, x);
  Variable w(with_values(pattern, zeros_like(values(pattern))), true, "w");
  const double lr = 0.01;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Variable diff = sub(matmul(w, constant(x)), constant(y));
    Variable loss = mean(mul(diff, diff));
    double l = loss.item();
    if (step == 0) first = l;
    last = l;
    loss.backward();
    ASSERT_EQ(w.grad().layout(), Layout::kCsr);
    // SGD on the nnz-sized values; the pattern (and its version) stays.
    Tensor updated = sub(values(w.value()), mul(values(w.grad()), lr * 16 * 8));
    w = Variable(with_values(w.value(), updated), true, "w");
  }
  EXPECT_EQ(pattern_version(w.value()), pattern_version(pattern));
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace coppice
