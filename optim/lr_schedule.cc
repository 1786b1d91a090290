#include "optim/lr_schedule.h"

#include <cmath>
#include <utility>

namespace coppice {
namespace {

class ConstantLr final : public LrSchedule {
 public:
  double lr(double base_lr, int64_t) const override { return base_lr; }
};

class StepLr final : public LrSchedule {
 public:
  StepLr(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {}
  double lr(double base_lr, int64_t step) const override {
    return base_lr * std::pow(gamma_, static_cast<double>(step / step_size_));
  }

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineLr final : public LrSchedule {
 public:
  CosineLr(int64_t t_max, double eta_min) : t_max_(t_max), eta_min_(eta_min) {}
  double lr(double base_lr, int64_t step) const override {
    const double pi = std::acos(-1.0);
    return eta_min_ +
           (base_lr - eta_min_) * (1.0 + std::cos(pi * static_cast<double>(step) / static_cast<double>(t_max_))) / 2.0;
  }

 private:
  int64_t t_max_;
  double eta_min_;
};

class LinearWarmup final : public LrSchedule {
 public:
  LinearWarmup(int64_t steps, double start, LrSchedulePtr then)
      : steps_(steps), start_(start), then_(then ? std::move(then) : constant_lr()) {}
  double lr(double base_lr, int64_t step) const override {
    if (step < steps_) {
      return base_lr * (start_ + (1.0 - start_) * static_cast<double>(step) / static_cast<double>(steps_));
    }
    return then_->lr(base_lr, step - steps_);
  }

 private:
  int64_t steps_;
  double start_;
  LrSchedulePtr then_;
};

class LinearRamp final : public LrSchedule {
 public:
  LinearRamp(int64_t start, int64_t steps, LrSchedulePtr inner)
      : start_(start), steps_(steps), inner_(std::move(inner)) {}
  double lr(double base_lr, int64_t step) const override {
    const double lr = inner_->lr(base_lr, step);
    if (step < start_ || step - start_ >= steps_) return lr;
    return lr * static_cast<double>(step - start_ + 1) / static_cast<double>(steps_);
  }

 private:
  int64_t start_;
  int64_t steps_;
  LrSchedulePtr inner_;
};

}  // namespace

LrSchedulePtr constant_lr() { return std::make_shared<ConstantLr>(); }

LrSchedulePtr step_lr(int64_t step_size, double gamma) {
  COPPICE_CHECK(step_size > 0, "step_lr: step_size must be positive, got ", step_size);
  return std::make_shared<StepLr>(step_size, gamma);
}

LrSchedulePtr cosine_lr(int64_t t_max, double eta_min) {
  COPPICE_CHECK(t_max > 0, "cosine_lr: t_max must be positive, got ", t_max);
  return std::make_shared<CosineLr>(t_max, eta_min);
}

LrSchedulePtr linear_warmup(int64_t warmup_steps, double start_factor, LrSchedulePtr then) {
  COPPICE_CHECK(warmup_steps >= 0, "linear_warmup: warmup_steps must not be negative, got ", warmup_steps);
  COPPICE_CHECK(start_factor > 0.0 && start_factor <= 1.0, "linear_warmup: start_factor must be in (0, 1], got ",
                start_factor);
  return std::make_shared<LinearWarmup>(warmup_steps, start_factor, std::move(then));
}

LrSchedulePtr linear_ramp(int64_t start_step, int64_t ramp_steps, LrSchedulePtr inner) {
  COPPICE_CHECK(start_step >= 0, "linear_ramp: start_step must not be negative, got ", start_step);
  COPPICE_CHECK(ramp_steps > 0, "linear_ramp: ramp_steps must be positive, got ", ramp_steps);
  COPPICE_CHECK(inner != nullptr, "linear_ramp: no schedule to ramp");
  return std::make_shared<LinearRamp>(start_step, ramp_steps, std::move(inner));
}

LrScheduler::LrScheduler(Optimizer& optimizer, LrSchedulePtr schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  COPPICE_CHECK(schedule_ != nullptr, "LrScheduler: no schedule");
  for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) base_lrs_.push_back(optimizer_.option(g, "lr"));
  apply();
}

void LrScheduler::step() {
  ++step_;
  apply();
}

void LrScheduler::set_step(int64_t step) {
  COPPICE_CHECK(step >= 0, "LrScheduler: step must not be negative, got ", step);
  step_ = step;
  apply();
}

std::vector<double> LrScheduler::last_lrs() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(optimizer_.option(g, "lr"));
  return out;
}

void LrScheduler::apply() {
  COPPICE_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), "LrScheduler: the optimizer has ",
                optimizer_.param_groups().size(), " groups but the scheduler was made with ", base_lrs_.size());
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set_option(g, "lr", schedule_->lr(base_lrs_[g], step_));
}

}  // namespace coppice
