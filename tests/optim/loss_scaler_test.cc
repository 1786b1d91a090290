// The loss scaler (optim/loss_scaler.h): an overflowing gradient skips the
// step (parameters and state untouched) and backs the scale off; the scale
// grows after growth_interval finite steps; a scaled f16 run takes the same
// steps as the unscaled f32 computation; options are validated.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/autograd.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::host;

TEST(LossScaler, DefaultsAreGradScalers) {
  const LossScaler s = LossScaler::dynamic();
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.options().growth_factor, 2.0);
  EXPECT_EQ(s.options().backoff_factor, 0.5);
  EXPECT_EQ(s.options().growth_interval, 2000);
  EXPECT_FALSE(LossScaler::none().enabled());
  EXPECT_EQ(LossScaler::none().scale(), 1.0);
}

TEST(LossScaler, OverflowSkipsTheStepAndBacksOff) {
  Variable w(full({3}, 1.0, DType::kF16), true, "w");
  Adam opt({w}, AdamOptions{0.1});
  LossScaler scaler = LossScaler::dynamic();
  std::vector<double> g = {1.0, std::numeric_limits<double>::infinity(), 0.5};
  w.set_grad(from_vector(g).to(DType::kF16));
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(opt.state(w), nullptr);  // no state, no step count
  EXPECT_EQ(host(w.value()), (std::vector<double>{1.0, 1.0, 1.0}));
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  g[1] = std::nan("");
  w.set_grad(from_vector(g).to(DType::kF16));
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(scaler.scale(), 16384.0);
  w.set_grad(full({3}, 16384.0, DType::kF16));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(opt.state(w)->step, 1);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(LossScaler, GrowsAfterTheIntervalOfFiniteSteps) {
  LossScalerOptions o;
  o.mode = LossScaleMode::kDynamic;
  o.init_scale = 8.0;
  o.growth_interval = 3;
  LossScaler s(o);
  for (int i = 0; i < 2; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 8.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false);
  s.update(true);  // an overflow restarts the run
  EXPECT_EQ(s.scale(), 8.0);
  for (int i = 0; i < 2; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 8.0);
  // A static scale never moves.
  LossScaler fixed = LossScaler::fixed(128.0);
  for (int i = 0; i < 5000; ++i) fixed.update(i % 7 == 0);
  EXPECT_EQ(fixed.scale(), 128.0);
}

TEST(LossScaler, ScaledF16StepsEqualTheUnscaledRun) {
  // loss = 1e-7 * sum(w * a): its gradient 1e-7 * a is subnormal in f16 and
  // loses most of its digits there. Scaled by 2^16 it is a normal f16
  // number, and the step (which divides the scale out in f32) lands where
  // the f32 run does; the unscaled f16 run does not.
  const std::vector<double> a = {1.0, -2.0, 3.0};
  auto run = [&](DType dtype, LossScaler scaler) {
    Variable w(full({3}, 0.25, dtype), true, "w");
    Sgd opt({w}, SgdOptions{1000.0});
    // The loss in f32, as the training loop computes it (2^16 itself is
    // not an f16 number: the scaled seed must not pass through f16).
    Variable loss = mul(to_dtype(sum(mul(w, Variable(from_vector(a).to(dtype)))), DType::kF32), 1e-7);
    scaler.scale_loss(loss).backward();
    EXPECT_TRUE(scaler.step(opt));
    const ParamState* st = opt.state(w);
    return host(dtype == DType::kF32 ? w.value() : st->tensors.at(kMasterWeightsState));
  };
  const std::vector<double> ref = run(DType::kF32, LossScaler::none());
  const std::vector<double> scaled = run(DType::kF16, LossScaler::dynamic());
  const std::vector<double> unscaled = run(DType::kF16, LossScaler::none());
  double unscaled_err = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double step = 1000.0 * 1e-7 * std::abs(a[i]);
    EXPECT_NEAR(scaled[i], ref[i], step * 1e-2) << i;
    unscaled_err = std::max(unscaled_err, std::abs(unscaled[i] - ref[i]) / step);
  }
  EXPECT_GT(unscaled_err, 0.05);  // what scaling prevents
}

TEST(LossScaler, ChecksSparseGradientsToo) {
  const Tensor dense = from_vector(std::vector<float>{1, 0, 0, 2, 0, 3}, {2, 3});
  Variable w(with_values(to_format(dense, "csr"), values(to_format(dense, "csr")).to(DType::kF16)), true, "w");
  Sgd opt({w}, SgdOptions{0.1});
  LossScaler scaler = LossScaler::dynamic();
  Tensor gv = from_vector(std::vector<double>{1.0, std::numeric_limits<double>::infinity(), 1.0}).to(DType::kF16);
  w.set_grad(with_values(w.value(), gv));
  EXPECT_FALSE(all_gradients_finite({w}));
  EXPECT_FALSE(scaler.step(opt));
  w.set_grad(with_values(w.value(), ones({3}, DType::kF16)));
  EXPECT_TRUE(all_gradients_finite({w}));
  // A large but finite bf16 gradient is finite (no overflowing sum).
  Variable b(full({4}, 1.0, DType::kBF16), true, "b");
  b.set_grad(full({4}, 3e38, DType::kBF16));
  EXPECT_TRUE(all_gradients_finite({b}));
}

TEST(LossScaler, RejectsBadOptions) {
  LossScalerOptions o;
  o.mode = LossScaleMode::kDynamic;
  o.init_scale = 0.0;
  EXPECT_THROW(LossScaler{o}, Error);
  o.init_scale = 1.0;
  o.growth_factor = 1.0;
  EXPECT_THROW(LossScaler{o}, Error);
  o.growth_factor = 2.0;
  o.backoff_factor = 1.0;
  EXPECT_THROW(LossScaler{o}, Error);
  o.backoff_factor = 0.5;
  o.growth_interval = 0;
  EXPECT_THROW(LossScaler{o}, Error);
  LossScaler s = LossScaler::dynamic();
  EXPECT_THROW(s.restore(-1.0, 0), Error);
  s.restore(1024.0, 5);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 5);
}

}  // namespace
}  // namespace coppice
