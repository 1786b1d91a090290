// Adam and AdamW (optim/adam.h) against torch.optim's formulas and
// hand-computed numbers; the fused step (optim/adam_step.h) against the
// tensor-op path.
#include "optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>

#include "optim/adam_step.h"
#include "sparse/masked.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::AdamRef;
using optim_test::f64;
using optim_test::host;
using optim_test::random_tensor;

TEST(AdamTest, FirstStepsByHand) {
  // Constant grad g: m_t / (1 - b1^t) = g and v_t / (1 - b2^t) = g^2 exactly, so
  // every step moves p by lr * g / (|g| + eps).
  Variable w(f64({1.0, -1.0}), true, "w");
  AdamOptions o;
  o.lr = 0.1;
  Adam opt({w}, o);
  for (int t = 1; t <= 3; ++t) {
    w.set_grad(f64({2.0, -0.5}));
    opt.step();
    const std::vector<double> p = host(w.value());
    EXPECT_NEAR(p[0], 1.0 - 0.1 * t * 2.0 / (2.0 + 1e-8), 1e-12);
    EXPECT_NEAR(p[1], -1.0 + 0.1 * t * 0.5 / (0.5 + 1e-8), 1e-12);
  }
  const ParamState* st = opt.state(w);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->step, 3);
  // m_3 = (1 - 0.9^3) g, v_3 = (1 - 0.999^3) g^2.
  EXPECT_NEAR(host(st->tensors.at("exp_avg"))[0], (1 - std::pow(0.9, 3)) * 2.0, 1e-12);
  EXPECT_NEAR(host(st->tensors.at("exp_avg_sq"))[0], (1 - std::pow(0.999, 3)) * 4.0, 1e-12);
}

struct AdamCase {
  bool decoupled;
  double weight_decay;
  double eps;
};

class AdamFormulaTest : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamFormulaTest, MatchesTorchFormulaOverSteps) {
  const AdamCase c = GetParam();
  const std::vector<double> p0 = {0.5, -1.5, 2.0, 0.0, 1e-3};
  for (bool fused : {true, false}) {
    // The masked format takes the tensor-op path; dense f64 the fused one.
    Tensor value = fused ? f64(p0) : sparse_masked(f64(p0), ne(f64(p0), 12345.0));
    Variable w(value, true, "w");
    AdamOptions o;
    o.lr = 0.01;
    o.beta1 = 0.8;
    o.beta2 = 0.95;
    o.eps = c.eps;
    o.weight_decay = c.weight_decay;
    std::unique_ptr<Adam> opt;
    if (c.decoupled) {
      AdamWOptions ow;
      static_cast<AdamOptions&>(ow) = o;
      opt = std::make_unique<AdamW>(std::vector<Variable>{w}, ow);
    } else {
      opt = std::make_unique<Adam>(std::vector<Variable>{w}, o);
    }
    std::vector<AdamRef> ref(p0.size(), AdamRef{0.01, 0.8, 0.95, c.eps, c.weight_decay, c.decoupled});
    std::vector<double> p = p0;
    for (int step = 0; step < 8; ++step) {
      std::vector<double> g(p.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(1.3 * step + static_cast<double>(i)) + 0.2 * p[i];
      for (size_t i = 0; i < p.size(); ++i) p[i] = ref[i].step(p[i], g[i]);
      w.set_grad(fused ? f64(g) : with_values(w.value(), f64(g)));
      opt->step();
      const std::vector<double> got = host(values(w.value()));
      for (size_t i = 0; i < p.size(); ++i) {
        EXPECT_NEAR(got[i], p[i], 1e-12) << (fused ? "fused" : "ops") << " step " << step << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Options, AdamFormulaTest,
                         ::testing::Values(AdamCase{false, 0.0, 1e-8}, AdamCase{false, 0.05, 1e-8},
                                           AdamCase{true, 0.05, 1e-8}, AdamCase{true, 0.0, 1e-3},
                                           AdamCase{false, 0.0, 0.1}));

TEST(AdamTest, AdamWDefaultsAndName) {
  Variable w(f64({1.0}), true, "w");
  AdamW opt({w});
  EXPECT_EQ(opt.name(), "adamw");
  EXPECT_EQ(opt.option(0, "weight_decay"), 1e-2);
  EXPECT_EQ(opt.option(0, "lr"), 1e-3);
  Adam adam({w}, AdamOptions{});
  EXPECT_EQ(adam.name(), "adam");
  EXPECT_EQ(adam.option(0, "weight_decay"), 0.0);
}

TEST(AdamTest, RejectsBadBetas) {
  Variable w(f64({1.0}), true, "w");
  AdamOptions o;
  o.beta2 = 1.0;
  EXPECT_THROW(Adam({w}, o), Error);
  Adam opt({w}, AdamOptions{});
  EXPECT_THROW(opt.set_option(0, "beta1", -0.1), Error);
  EXPECT_THROW(opt.set_option(0, "momentum", 0.9), Error);  // not an Adam hyperparameter
}

// The fused CPU kernel and the tensor-op path agree bit for bit in f32.
TEST(AdamStepTest, FusedEqualsTensorOpsInF32) {
  for (bool decoupled : {false, true}) {
    const Tensor p0 = random_tensor({257}, 1), mask = ne(p0, 1e9);  // all true
    Variable dense(p0.clone(), true, "dense");
    Variable masked(sparse_masked(p0.clone(), mask), true, "masked");
    AdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.1;
    std::unique_ptr<Adam> a, b;
    if (decoupled) {
      AdamWOptions ow;
      static_cast<AdamOptions&>(ow) = o;
      a = std::make_unique<AdamW>(std::vector<Variable>{dense}, ow);
      b = std::make_unique<AdamW>(std::vector<Variable>{masked}, ow);
    } else {
      a = std::make_unique<Adam>(std::vector<Variable>{dense}, o);
      b = std::make_unique<Adam>(std::vector<Variable>{masked}, o);
    }
    for (int step = 0; step < 20; ++step) {
      const Tensor g = random_tensor({257}, 100 + step);
      dense.set_grad(g);
      masked.set_grad(with_values(masked.value(), g));
      a->step();
      b->step();
    }
    EXPECT_EQ(dense.value().to_vector<float>(), values(masked.value()).to_vector<float>());
    EXPECT_EQ(a->state(dense)->tensors.at("exp_avg_sq").to_vector<float>(),
              b->state(masked)->tensors.at("exp_avg_sq").to_vector<float>());
  }
}

}  // namespace
}  // namespace coppice
