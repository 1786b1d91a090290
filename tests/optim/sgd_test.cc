// SGD (optim/sgd.h) against torch.optim.SGD's formulas and hand-computed
// numbers, hyperparameter groups and validation.
#include "optim/sgd.h"

#include <gtest/gtest.h>

#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::f64;
using optim_test::host;
using optim_test::SgdCase;
using optim_test::SgdRef;

TEST(SgdTest, PlainStepByHand) {
  Variable w(f64({1.0, -2.0}), true, "w");
  Sgd opt({w}, SgdOptions{0.1});
  w.set_grad(f64({0.5, 1.0}));
  opt.step();
  EXPECT_NEAR(host(w.value())[0], 0.95, 1e-15);
  EXPECT_NEAR(host(w.value())[1], -2.1, 1e-15);
}

TEST(SgdTest, MomentumByHand) {
  // lr 0.1, momentum 0.9, constant grad 1: buf = 1, 1.9, 2.71; p = 1 - 0.1, - 0.19, - 0.271.
  Variable w(f64({1.0}), true, "w");
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  Sgd opt({w}, o);
  const std::vector<double> want = {0.9, 0.71, 0.439};
  for (double expected : want) {
    w.set_grad(f64({1.0}));
    opt.step();
    EXPECT_NEAR(host(w.value())[0], expected, 1e-12);
  }
  EXPECT_NEAR(host(opt.state(w)->tensors.at("momentum_buffer"))[0], 2.71, 1e-12);
  EXPECT_EQ(opt.state(w)->step, 3);
}

class SgdFormulaTest : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdFormulaTest, MatchesTorchFormulaOverSteps) {
  const SgdCase c = GetParam();
  const std::vector<double> p0 = {0.5, -1.5, 2.0, 0.0};
  Variable w(f64(p0), true, "w");
  Sgd opt({w}, c.options(0.05));
  std::vector<SgdRef> ref(p0.size(), SgdRef{0.05, c.momentum, c.dampening, c.weight_decay, c.nesterov});
  std::vector<double> p = p0;
  for (int step = 0; step < 6; ++step) {
    std::vector<double> g(p.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7 * step + static_cast<double>(i)) + 0.1 * p[i];
    for (size_t i = 0; i < p.size(); ++i) p[i] = ref[i].step(p[i], g[i]);
    w.set_grad(f64(g));
    opt.step();
    const std::vector<double> got = host(w.value());
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(got[i], p[i], 1e-12) << "step " << step << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Options, SgdFormulaTest,
                         ::testing::Values(SgdCase{0, 0, 0, false}, SgdCase{0, 0, 0.01, false},
                                           SgdCase{0.9, 0, 0, false}, SgdCase{0.9, 0.1, 0.001, false},
                                           SgdCase{0.9, 0, 0.01, true}));

TEST(SgdTest, GroupsOverrideDefaults) {
  Variable a(f64({1.0}), true, "a"), b(f64({1.0}), true, "b");
  Sgd opt({ParamGroup{{a}, {}}, ParamGroup{{b}, {{"lr", 1.0}}}}, SgdOptions{0.1});
  EXPECT_EQ(opt.option(0, "lr"), 0.1);
  EXPECT_EQ(opt.option(1, "lr"), 1.0);
  a.set_grad(f64({1.0}));
  b.set_grad(f64({1.0}));
  opt.step();
  EXPECT_NEAR(host(a.value())[0], 0.9, 1e-15);
  EXPECT_NEAR(host(b.value())[0], 0.0, 1e-15);
}

TEST(SgdTest, SkipsParametersWithoutGradAndZeroGrad) {
  Variable a(f64({1.0}), true, "a"), b(f64({1.0}), true, "b");
  Sgd opt({a, b}, SgdOptions{0.1});
  a.set_grad(f64({1.0}));
  opt.step();
  EXPECT_EQ(host(b.value())[0], 1.0);
  EXPECT_EQ(opt.state(b), nullptr);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(SgdTest, RejectsBadOptions) {
  Variable w(f64({1.0}), true, "w");
  SgdOptions o;
  o.nesterov = true;
  EXPECT_THROW(Sgd({w}, o), Error);  // Nesterov without momentum
  EXPECT_THROW(Sgd({ParamGroup{{w}, {{"betas", 1.0}}}}, SgdOptions{}), Error);
  Sgd opt({w}, SgdOptions{});
  EXPECT_THROW(opt.set_option(0, "lr", -1.0), Error);
  EXPECT_THROW(Sgd({w, w}, SgdOptions{}), Error);  // twice
  Variable ints(from_vector(std::vector<int64_t>{1}), false, "ints");
  EXPECT_THROW(Sgd({ints}, SgdOptions{}), Error);
}

TEST(SgdTest, AddParamGroupLaterAndZeroGradToZeros) {
  Variable a(f64({1.0}), true, "a"), b(f64({2.0}), true, "b");
  Sgd opt({a}, SgdOptions{0.1});
  opt.add_param_group(ParamGroup{{b}, {{"lr", 0.5}, {"momentum", 0.5}}});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.option(1, "momentum"), 0.5);
  EXPECT_EQ(opt.option(1, "dampening"), 0.0);                     // the default
  EXPECT_THROW(opt.add_param_group(ParamGroup{{a}, {}}), Error);  // already in group 0
  b.set_grad(f64({1.0}));
  opt.step();
  EXPECT_NEAR(host(b.value())[0], 1.5, 1e-15);
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(b.grad().defined());
  EXPECT_EQ(host(b.grad())[0], 0.0);
  EXPECT_FALSE(a.grad().defined());
}

}  // namespace
}  // namespace coppice
