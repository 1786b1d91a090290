// rigl: what a block-RigL mask update costs (issue 17), against an ordinary
// step of the same model in the same call.
//
// The model is bench train's MLP H-H-H-H-10 at batch B, its three HxH
// weights BSR in 32x32 blocks at --sparsity (0.9), SGD with momentum, in each
// --modes numeric mode (bf16 as the trainer's precision.dtype bf16). An
// update step is what the trainer runs on a mask-update step of a RigL job:
// forward and backward through the dense-gradient view
// (models/dense_gradient_view.h), the optimizer step, then the
// prune-and-regrow update of the three layers (magnitude prune, gradient
// growth, drop fraction 0.3, every step an update) with the optimizer's
// state remapped through the run's ParameterStore. Two ways:
//   probe  block scores formed from the gradient's factors (one rank, the
//          trainer's default there): no dense gradient, no dense product;
//   swap   the weights swapped for dense leaves for the step (what several
//          ranks do, and what one rank did before the probe).
// Rows: "mlp step" (an ordinary eager step), "mlp rigl update" and
// "mlp rigl update swap"; the update rows carry steps_per_update (their time
// over the ordinary step's) and the split into forward+backward and the
// mask update proper.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "models/dense_gradient_view.h"
#include "models/zoo.h"
#include "optim/mask_schedule.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "tensor/backend.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tools/bench/suites.h"
#include "tools/bench/train_step_util.h"
#include "train/mixed_precision.h"
#include "train/model_parameters.h"

namespace coppice::bench {

namespace {

constexpr int64_t kClasses = 10;
constexpr uint64_t kModelSeed = 20261125;

struct Mode {
  std::string name;
  bool allow_tf32;
  DType dtype;
};

// One model, optimizer and mask schedule, as a RigL job on one rank holds them.
struct RiglRun {
  std::shared_ptr<MLP> model;
  std::unique_ptr<Sgd> optimizer;
  std::unique_ptr<MaskUpdater> updater;
  std::unique_ptr<MaskSchedule> schedule;
  Tensor x, y;
  int64_t t = 0;

  void forward_backward() {
    const Variable logits = (*model)(Variable(x));
    cross_entropy(logits_for_loss(logits), y).backward();
  }
};

RiglRun make_run(Device device, int64_t hidden, int64_t batch, double sparsity, const Mode& mode, MaskCache* masks) {
  RiglRun r;
  Generator gen(kModelSeed);
  LayerOptions lo;
  lo.device = device;
  r.model = std::make_shared<MLP>(std::vector<int64_t>{hidden, hidden, hidden, hidden, kClasses}, lo, gen);
  const std::vector<std::string> sparse = {"fc1.weight", "fc2.weight", "fc3.weight"};
  WeightPattern pattern;
  pattern.format = "bsr";
  pattern.sparsity = sparsity;
  uint64_t purpose = 1;
  for (const std::string& name : sparse) sparsify_parameter(*r.model, name, pattern, purpose++, masks);
  if (mode.dtype != DType::kF32) cast_parameters(*r.model, mode.dtype);
  SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  r.optimizer = std::make_unique<Sgd>(trainable_parameters(*r.model), so);
  MaskUpdaterConfig mc;
  mc.start_step = 0;
  mc.end_step = int64_t{1} << 40;
  mc.interval = 1;
  mc.drop_fraction = 0.3;
  mc.schedule = DropSchedule::kConstant;
  mc.growth = "gradient";
  r.updater = std::make_unique<MaskUpdater>(mc);
  for (const std::string& name : sparse) r.updater->add_layer(name, r.model->parameter(name).value());
  r.schedule = make_prune_and_regrow_schedule(*r.updater, std::make_shared<ModelParameters>(*r.model, *r.optimizer));
  Generator data = Generator::keyed(0xDA7Aull, 1, 0, 0);
  r.x = cast_inputs(randn({batch, hidden}, TensorOptions(DType::kF32, device), data), mode.dtype);
  r.y = randint(0, kClasses, {batch}, TensorOptions(DType::kI64, device), data);
  return r;
}

Result base(const std::string& op, const DeviceCase& dc, const Mode& mode, double sparsity, int64_t hidden,
            int64_t batch) {
  Result r;
  r.suite = "rigl";
  r.op = op;
  r.device = dc.label;
  r.dtype = mode.name;
  r.format = "bsr";
  r.sparsity = sparsity;
  r.shape = {batch, hidden, hidden, hidden, hidden, kClasses};
  describe_device(dc.cuda, mode.dtype, "gflops", &r);
  return r;
}

void run_mode(const DeviceCase& dc, const Config& config, const Mode& mode, MaskCache* masks,
              std::vector<Result>* results) {
  const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
  const int64_t hidden = config.hidden > 0 ? config.hidden : (dc.cuda ? kTrainHidden : kTrainCpuHidden);
  const int64_t batch = config.batch > 0 ? config.batch : (dc.cuda ? kTrainBatch : kTrainCpuBatch);
  const int steps = config.steps > 0 ? config.steps : (dc.cuda ? kTrainSteps : kTrainCpuSteps);
  const int warmup = config.warmup_given ? config.warmup : (dc.cuda ? kTrainWarmup : kTrainCpuWarmup);
  const double sparsity = config.sparsity;

  Result step = base("mlp step", dc, mode, sparsity, hidden, batch);
  RiglRun run = make_run(device, hidden, batch, sparsity, mode, masks);
  const std::vector<double> step_ms = time_steps(
      [&] {
        run.optimizer->zero_grad();
        run.forward_backward();
        run.optimizer->step();
      },
      device, warmup, steps);
  fill_step_timing(step_ms, &step);
  step.status = "ok";
  results->push_back(step);
  std::fprintf(stderr, "rigl %-6s %-4s mlp step                %8.3f ms\n", dc.label.c_str(), mode.name.c_str(),
               step.median_ms);

  for (const bool probe : {true, false}) {
    Result u = base(probe ? "mlp rigl update" : "mlp rigl update swap", dc, mode, sparsity, hidden, batch);
    std::vector<double> fwd_bwd, mask;
    auto update = [&] {
      run.optimizer->zero_grad();
      const double t0 = now_ms();
      DenseGradientView view;
      view.open(*run.model, run.updater->layers(), nullptr, probe);
      run.forward_backward();
      const std::map<std::string, GrowthSignal> grads = view.close(1.0);
      synchronize(device);
      const double t1 = now_ms();
      run.optimizer->step();
      run.schedule->update(run.t++, grads);
      synchronize(device);
      fwd_bwd.push_back(t1 - t0);
      mask.push_back(now_ms() - t1);
    };
    try {
      const std::vector<double> ms = time_steps(update, device, 1, steps);
      fwd_bwd.erase(fwd_bwd.begin());  // the warm-up's
      mask.erase(mask.begin());
      fill_step_timing(ms, &u);
      u.status = "ok";
      u.extra.emplace_back("step_ms", step.median_ms);
      u.extra.emplace_back("steps_per_update", u.median_ms / step.median_ms);
      u.extra.emplace_back("forward_backward_ms", median(fwd_bwd));
      u.extra.emplace_back("optimizer_and_mask_update_ms", median(mask));
      std::fprintf(stderr, "rigl %-6s %-4s %-23s %8.3f ms = %.1f steps (fwd+bwd %.3f, opt+masks %.3f)\n",
                   dc.label.c_str(), mode.name.c_str(), u.op.c_str(), u.median_ms, u.median_ms / step.median_ms,
                   median(fwd_bwd), median(mask));
    } catch (const std::exception& e) { u.status = std::string("error: ") + e.what(); }
    results->push_back(u);
  }
}

}  // namespace

void run_rigl(const Config& config, std::vector<Result>* results) {
  std::vector<std::string> names = config.train_modes;
  if (names.empty()) names = {"f32", "tf32", "bf16"};
  for (const DeviceCase& dc : devices_to_run(config)) {
    const std::string skip = dc.cuda ? cuda_skip_reason() : "";
    MaskCache masks;
    for (const std::string& n : names) {
      const Mode mode{n, n == "tf32", n == "bf16" ? DType::kBF16 : DType::kF32};
      if (!skip.empty() || (mode.allow_tf32 && !dc.cuda)) {
        Result r = base("mlp step", dc, mode, config.sparsity, 0, 0);
        r.status = !skip.empty() ? skip : "skipped: TF32 is a CUDA mode";
        results->push_back(r);
        continue;
      }
      const bool tf32_before = allow_tf32();
      set_allow_tf32(mode.allow_tf32);
      try {
        run_mode(dc, config, mode, &masks, results);
      } catch (const std::exception& e) {
        Result r = base("mlp step", dc, mode, config.sparsity, 0, 0);
        r.status = std::string("error: ") + e.what();
        results->push_back(r);
      }
      set_allow_tf32(tf32_before);
    }
  }
}

}  // namespace coppice::bench
