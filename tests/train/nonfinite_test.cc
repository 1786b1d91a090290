// Numerical health of a run (train/nonfinite_guard.h, the trainer's step):
// a batch whose examples hold a NaN makes that step's loss NaN. By default
// the run stops there with one line naming the step, the loss and the last
// finite checkpoint; a gradient that is not finite while the loss is names
// its parameter; a mask update that would rank an inf names its layer. Under
// skip_step the step changes nothing (parameters, optimizer state, masks)
// and the run goes on, up to max_consecutive_skips in a row, and cannot end
// on a skipped step. With a loss scaler, overflowing gradients stay the
// scaler's (not divergence), a NaN loss is the guard's; a skip counts once.
// Under stop the gradients are checked by the optimizer's fused step as it
// reads them (no pass of their own); with clipping, before it.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "gtest/gtest.h"
#include "optim/loss_scaler.h"
#include "optim/sgd.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/op_profile.h"
#include "tensor/runtime_options.h"
#include "tests/train/train_test_util.h"
#include "train/loop.h"
#include "train/trainer.h"

namespace coppice {
namespace {

using testing_train::make_mlp;
using testing_train::parameter_bits;
using testing_train::sparsify_weights;
using testing_train::temp_dir;

constexpr int64_t kBatch = 16;

// The op profiler counts the non-finite passes (op_profile_calls): on for
// this binary.
const ScopedRuntimeOptions kProfiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });

// 128 blob examples of 20 features in 3 classes, in order (no shuffle: batch
// b of every epoch is examples [16 b, 16 b + 16)), with a NaN feature in
// one example of each batch listed in `poisoned` (within the first epoch).
DataLoader loader_with_nan_batches(const std::vector<int64_t>& poisoned) {
  BlobsOptions o;
  o.n = 128;
  o.features = 20;
  o.classes = 3;
  o.seed = 4;
  const Blobs blobs = make_blobs(o);
  Tensor inputs = blobs.dataset->inputs().contiguous().to(DType::kF32);
  inputs = inputs.to(DType::kF64).to(DType::kF32);  // a copy of its own, to write into
  for (int64_t b : poisoned) inputs.data<float>()[(b * kBatch + 3) * 20 + 7] = std::nanf("");
  DataLoaderOptions lo;
  lo.batch_size = kBatch;
  lo.shuffle = false;
  lo.drop_last = true;
  return DataLoader(std::make_shared<TensorDataset>(inputs, blobs.dataset->targets()), lo);
}

struct Job {
  std::shared_ptr<MLP> model = make_mlp({20, 16, 3}, 1);
  std::unique_ptr<Sgd> opt = std::make_unique<Sgd>(model->parameters(), SgdOptions{0.05, 0.9});
  TrainComponents c;
  explicit Job(const std::vector<int64_t>& poisoned, int64_t steps)
      : c(*model, loader_with_nan_batches(poisoned), *opt) {
    c.steps = steps;
  }
};

std::string error_of(TrainComponents& c) {
  try {
    run_training(c);
  } catch (const Error& e) { return e.what(); }
  return "(no error)";
}

TEST(Nonfinite, ANanLossStopsTheRunNamingTheStepAndTheLastCheckpoint) {
  Job r({2}, 6);
  EXPECT_EQ(
      error_of(r.c),
      "run_training: step 2: the loss is nan (training.on_nonfinite: stop); last finite checkpoint: none written");
  Job with_checkpoints({2}, 6);
  with_checkpoints.c.checkpoint_dir = temp_dir("nonfinite_stop");
  with_checkpoints.c.checkpoint_every = 1;
  const std::string e = error_of(with_checkpoints.c);
  EXPECT_NE(e.find("run_training: step 2: the loss is nan"), std::string::npos) << e;
  EXPECT_NE(e.find("last finite checkpoint: " + with_checkpoints.c.checkpoint_dir + "/ckpt-0000000002-"),
            std::string::npos)
      << e;
}

TEST(Nonfinite, SkipStepLeavesTheStepOutAndGoesOn) {
  Job r({2}, 6);
  r.c.nonfinite.policy = NonfinitePolicy::kSkipStep;
  std::vector<std::vector<std::string>> bits;  // the parameters after each step
  r.c.on_step_end = [&](int64_t) { bits.push_back(parameter_bits(*r.model)); };
  const TrainingSummary s = run_training(r.c);
  EXPECT_EQ(s.skipped_steps, std::vector<int64_t>{2});
  ASSERT_EQ(s.losses.size(), 6u);
  EXPECT_TRUE(std::isnan(s.losses[2]));
  EXPECT_TRUE(std::isfinite(s.losses[5]));
  ASSERT_EQ(bits.size(), 6u);
  EXPECT_EQ(bits[2], bits[1]) << "a skipped step changes no parameter";
  EXPECT_NE(bits[3], bits[2]);
  for (const auto& [name, p] : r.model->named_parameters()) {
    EXPECT_TRUE(std::isfinite(sum(abs(p.value())).item())) << name;
  }
}

TEST(Nonfinite, SkipStepStopsAtItsLimitAndCannotEndARun) {
  Job r({1, 2, 3, 4}, 8);
  r.c.nonfinite = {NonfinitePolicy::kSkipStep, 3};
  EXPECT_EQ(error_of(r.c),
            "run_training: step 4: the loss is nan after 3 skipped steps in a row (training.max_consecutive_skips: "
            "3); last finite checkpoint: none written");
  Job at_the_end({4, 5}, 6);
  at_the_end.c.nonfinite.policy = NonfinitePolicy::kSkipStep;
  EXPECT_EQ(error_of(at_the_end.c),
            "run_training: steps 4 to 5 were skipped as non-finite and the run ended there (training.on_nonfinite: "
            "skip_step); last finite checkpoint: none written");
}

// Runs step 0's phases up to the optimizer step by hand.
void forward_backward(Trainer& t) {
  t.begin_step(0);
  t.forward_backward();
  t.synchronize();
}

TEST(Nonfinite, AGradientThatIsNotFiniteIsNamed) {
  Job r({}, 4);
  name_parameters(*r.model);
  Trainer t(r.c);
  forward_backward(t);
  Variable b = r.model->parameter("fc2.bias");
  b.set_grad(with_values(b.grad(), full({3}, std::numeric_limits<double>::infinity())));
  try {
    t.step();
    FAIL() << "no stop";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "run_training: step 0: the gradient of 'fc2.bias' is not finite (training.on_nonfinite: stop); last "
              "finite checkpoint: none written");
  }
}

// Under stop (no loss scaler) no pass of its own reads the gradients: the
// fused step kernels check the gradients they read, or, with grad_clip, the
// norm that clipping reads anyway names the parameter (before its NaN norm
// would make every gradient NaN); either way the one that was is named.
TEST(Nonfinite, TheStepChecksTheGradientsItReadsOrClippingComesAfterTheCheck) {
  for (double clip : {0.0, 1.0}) {
    Job r({}, 4);
    name_parameters(*r.model);
    r.c.grad_clip = clip;
    Trainer t(r.c);
    forward_backward(t);
    Variable w = r.model->parameter("fc2.weight");
    w.set_grad(with_values(w.grad(), where(gt(w.grad(), 0.0), full_like(w.grad(), std::nan("")), w.grad())));
    const int64_t passes = op_profile_calls("nonfinite_flag");
    try {
      t.step();
      FAIL() << "no stop";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "run_training: step 0: the gradient of 'fc2.weight' is not finite (training.on_nonfinite: stop); "
                "last finite checkpoint: none written")
          << "clip " << clip;
    }
    EXPECT_EQ(op_profile_calls("nonfinite_flag") - passes, 0) << "clip " << clip;
  }
  // A finite step under stop reads no gradient a second time either.
  for (double clip : {0.0, 1.0}) {
    Job r({}, 4);
    r.c.grad_clip = clip;
    Trainer t(r.c);
    forward_backward(t);
    const int64_t passes = op_profile_calls("nonfinite_flag");
    t.step();
    EXPECT_EQ(op_profile_calls("nonfinite_flag") - passes, 0) << "clip " << clip;
  }
}

TEST(Nonfinite, AMaskUpdateThatWouldRankAnInfNamesItsLayer) {
  for (NonfinitePolicy policy : {NonfinitePolicy::kStop, NonfinitePolicy::kSkipStep}) {
    Job r({}, 4);
    sparsify_weights(*r.model, 0.5, 3);
    r.opt = std::make_unique<Sgd>(r.model->parameters(), SgdOptions{0.05, 0.9});
    TrainComponents c(*r.model, loader_with_nan_batches({}), *r.opt);
    c.steps = 4;
    c.nonfinite.policy = policy;
    MaskUpdaterConfig u;
    u.end_step = 4;
    u.interval = 1;
    u.growth = "random";
    MaskUpdater updater(u);
    for (const char* name : {"fc1.weight", "fc2.weight"}) updater.add_layer(name, r.model->parameter(name).value());
    c.mask_updater = &updater;
    Trainer t(c);
    forward_backward(t);
    t.step();
    // The update made a weight infinite (as lr 10000 can): its magnitudes have no order.
    values(r.model->parameter("fc2.weight").value()).data<float>()[1] = std::numeric_limits<float>::infinity();
    const Tensor before = r.model->parameter("fc1.weight").value();
    if (policy == NonfinitePolicy::kStop) {
      try {
        t.update_sparsity();
        FAIL() << "no stop";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "run_training: step 0: mask update (layer fc2.weight, step 0): the weight holds non-finite values "
                  "(inf or NaN); refusing to rank by them (training.on_nonfinite: stop); last finite checkpoint: "
                  "none written");
      }
    } else {
      t.update_sparsity();  // left out
    }
    EXPECT_TRUE(r.model->parameter("fc1.weight").value().is_same(before)) << "no layer changed";
  }
}

TEST(Nonfinite, WithALossScalerOverflowIsTheScalersAndANanLossTheGuards) {
  // Gradients that overflow under the scale, with a finite loss: the
  // scaler's skip (it backs off), not a stop, and listed once.
  Job r({}, 4);
  name_parameters(*r.model);
  LossScaler scaler = LossScaler::dynamic();
  r.c.loss_scaler = &scaler;
  {
    Trainer t(r.c);
    forward_backward(t);
    Variable b = r.model->parameter("fc1.bias");
    b.set_grad(with_values(b.grad(), full({16}, std::numeric_limits<double>::infinity())));
    const std::vector<std::string> before = parameter_bits(*r.model);
    t.step();
    EXPECT_EQ(parameter_bits(*r.model), before);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.scale(), 32768.0);
    t.record();
    t.end_step();
  }
  // A NaN loss is divergence whatever the scale: the run stops, the scale
  // untouched; under skip_step it is skipped once and the scaler not told.
  Job nan_loss({0}, 4);
  LossScaler s2 = LossScaler::dynamic();
  nan_loss.c.loss_scaler = &s2;
  EXPECT_NE(error_of(nan_loss.c).find("run_training: step 0: the loss is nan (training.on_nonfinite: stop)"),
            std::string::npos);
  EXPECT_EQ(s2.skipped_steps(), 0);
  Job skip({0}, 4);
  LossScaler s3 = LossScaler::dynamic();
  skip.c.loss_scaler = &s3;
  skip.c.nonfinite.policy = NonfinitePolicy::kSkipStep;
  const TrainingSummary s = run_training(skip.c);
  EXPECT_EQ(s.skipped_steps, std::vector<int64_t>{0});
  EXPECT_EQ(s3.skipped_steps(), 0);
  EXPECT_EQ(s3.scale(), 65536.0);
}

}  // namespace
}  // namespace coppice
