// Learning-rate schedules (optim/lr_schedule.h) against torch's closed forms.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "optim/sgd.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

const double kPi = std::acos(-1.0);

TEST(LrScheduleTest, ClosedForms) {
  EXPECT_EQ(constant_lr()->lr(0.1, 1000), 0.1);
  // StepLR(step_size=3, gamma=0.5): 0.1, 0.1, 0.1, 0.05, ..., 0.025 at 6.
  const LrSchedulePtr s = step_lr(3, 0.5);
  EXPECT_DOUBLE_EQ(s->lr(0.1, 0), 0.1);
  EXPECT_DOUBLE_EQ(s->lr(0.1, 2), 0.1);
  EXPECT_DOUBLE_EQ(s->lr(0.1, 3), 0.05);
  EXPECT_DOUBLE_EQ(s->lr(0.1, 7), 0.025);
  // CosineAnnealingLR(T_max=10, eta_min=0.001).
  const LrSchedulePtr c = cosine_lr(10, 0.001);
  EXPECT_DOUBLE_EQ(c->lr(0.1, 0), 0.1);
  EXPECT_DOUBLE_EQ(c->lr(0.1, 5), 0.001 + 0.099 * 0.5);
  EXPECT_DOUBLE_EQ(c->lr(0.1, 3), 0.001 + 0.099 * (1 + std::cos(kPi * 3 / 10)) / 2);
  EXPECT_NEAR(c->lr(0.1, 10), 0.001, 1e-15);
  // LinearLR(start_factor=0.1, total_iters=4) then cosine(T_max=8).
  const LrSchedulePtr w = linear_warmup(4, 0.1, cosine_lr(8));
  EXPECT_DOUBLE_EQ(w->lr(1.0, 0), 0.1);
  EXPECT_DOUBLE_EQ(w->lr(1.0, 2), 0.1 + 0.9 * 2 / 4);
  EXPECT_DOUBLE_EQ(w->lr(1.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(w->lr(1.0, 6), (1 + std::cos(kPi * 2 / 8)) / 2);
  EXPECT_NEAR(w->lr(1.0, 12), 0.0, 1e-15);
  EXPECT_DOUBLE_EQ(linear_warmup(2, 0.5)->lr(0.2, 1), 0.2 * 0.75);
  EXPECT_DOUBLE_EQ(linear_warmup(2, 0.5)->lr(0.2, 50), 0.2);
}

// A ramp of 4 steps from step 10 over a cosine: 1/4, 2/4, 3/4 and 4/4 of the
// cosine at steps 10-13, the cosine itself, bit for bit, everywhere else.
TEST(LrScheduleTest, LinearRampMultipliesItsStepsOnly) {
  const LrSchedulePtr c = cosine_lr(20, 0.001);
  const LrSchedulePtr r = linear_ramp(10, 4, c);
  for (int64_t step : {0, 1, 9, 14, 15, 19, 20, 40}) EXPECT_EQ(r->lr(0.1, step), c->lr(0.1, step)) << step;
  EXPECT_DOUBLE_EQ(r->lr(0.1, 10), c->lr(0.1, 10) / 4);
  EXPECT_DOUBLE_EQ(r->lr(0.1, 11), c->lr(0.1, 11) * 2 / 4);
  EXPECT_DOUBLE_EQ(r->lr(0.1, 12), c->lr(0.1, 12) * 3 / 4);
  EXPECT_DOUBLE_EQ(r->lr(0.1, 13), c->lr(0.1, 13));
  // One step: the schedule's at once.
  EXPECT_EQ(linear_ramp(3, 1, c)->lr(0.1, 3), c->lr(0.1, 3));
}

TEST(LrScheduleTest, RejectsBadArguments) {
  EXPECT_THROW(step_lr(0), Error);
  EXPECT_THROW(cosine_lr(0), Error);
  EXPECT_THROW(linear_warmup(3, 0.0), Error);
  EXPECT_THROW(linear_ramp(3, 0, constant_lr()), Error);
  EXPECT_THROW(linear_ramp(-1, 2, constant_lr()), Error);
  EXPECT_THROW(linear_ramp(3, 2, nullptr), Error);
}

TEST(LrSchedulerTest, SetsEveryGroupsLr) {
  Variable a(optim_test::f64({1.0}), true, "a"), b(optim_test::f64({1.0}), true, "b");
  Sgd opt({ParamGroup{{a}, {}}, ParamGroup{{b}, {{"lr", 0.5}}}}, SgdOptions{0.1});
  LrScheduler sched(opt, linear_warmup(2, 0.5, step_lr(2, 0.1)));
  EXPECT_DOUBLE_EQ(opt.option(0, "lr"), 0.05);  // step 0 at once
  EXPECT_DOUBLE_EQ(opt.option(1, "lr"), 0.25);
  sched.step();
  EXPECT_DOUBLE_EQ(opt.option(0, "lr"), 0.075);
  sched.step();
  sched.step();
  sched.step();  // step 4: warm-up done, step_lr at 2 -> gamma once
  EXPECT_EQ(sched.current_step(), 4);
  EXPECT_DOUBLE_EQ(opt.option(0, "lr"), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(opt.option(1, "lr"), 0.5 * 0.1);
  sched.set_step(1);
  ASSERT_EQ(sched.last_lrs().size(), 2u);
  EXPECT_DOUBLE_EQ(sched.last_lrs()[0], 0.075);
  EXPECT_DOUBLE_EQ(sched.last_lrs()[1], 0.375);
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{0.1, 0.5}));
}

// The ramp scales every group by the same factor; set_step into it sets
// what stepping there did.
TEST(LrSchedulerTest, RampsEveryGroupAlike) {
  Variable a(optim_test::f64({1.0}), true, "a"), b(optim_test::f64({1.0}), true, "b");
  Sgd opt({ParamGroup{{a}, {}}, ParamGroup{{b}, {{"lr", 0.5}}}}, SgdOptions{0.1});
  LrScheduler sched(opt, linear_ramp(2, 4, constant_lr()));
  std::vector<std::vector<double>> stepped;
  for (int i = 0; i < 7; ++i) {
    stepped.push_back(sched.last_lrs());
    sched.step();
  }
  const std::vector<double> factors = {1, 1, 0.25, 0.5, 0.75, 1, 1};
  for (size_t s = 0; s < factors.size(); ++s) {
    EXPECT_DOUBLE_EQ(stepped[s][0], 0.1 * factors[s]) << "step " << s;
    EXPECT_DOUBLE_EQ(stepped[s][1], 0.5 * factors[s]) << "step " << s;
  }
  sched.set_step(3);
  EXPECT_EQ(sched.last_lrs(), stepped[3]);
}

}  // namespace
}  // namespace coppice
