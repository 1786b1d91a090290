// A hand-run benchmark (not a test): what the trainer's per-step non-finite
// check adds to a step (train/trainer.cc, watch_for_nonfinite and the read in
// measure_batch): one flag per gradient folded on the device, then the flags
// and the loss in one host read, against the loss read alone (what a step
// read before). Gradients shaped like a model's, dense or at a density.
//   finite_check_bench [cpu|cuda] [lenet300|mlp4096|gpt] [density]
// With "step" after them, an SGD step with momentum (f32 parameters, or
// bf16 ones on f32 master weights: the fused sgd_step_mixed) on parameters
// of those shapes (dense; the density is ignored), three ways: without the
// check, with it folded into the fused step (Optimizer::step's `nonfinite`,
// what the trainer does under on_nonfinite: stop) and with a pass of its own
// before the step (what it does with a loss scaler or skip_step); each rep
// ends with the host read of the loss (and the flags).
//   finite_check_bench cuda mlp4096 1 step bf16
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "optim/finite_check.h"
#include "optim/sgd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

using namespace coppice;

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu";
  const std::string model = argc > 2 ? argv[2] : "lenet300";
  const double density = argc > 3 ? std::stod(argv[3]) : 1.0;
  const Device device = where == "cuda" ? Device::cuda(0) : Device::cpu();
  std::vector<Shape> shapes;
  if (model == "lenet300") shapes = {{300, 784}, {300}, {100, 300}, {100}, {10, 100}, {10}};
  // The MLP-4096 (4096-4096-4096-4096-10) and the GPT job (configs/gpt_dense.yaml:
  // d 1024, 8 blocks, MLP 4096, 256 bytes of vocabulary tied, 512 positions).
  if (model == "mlp4096") shapes = {{4096, 4096}, {4096}, {4096, 4096}, {4096}, {4096, 4096}, {4096}, {10, 4096}, {10}};
  if (model == "gpt") {
    shapes = {{256, 1024}, {512, 1024}};
    for (int b = 0; b < 8; ++b) {
      for (const Shape& s : std::vector<Shape>{{1024},
                                               {1024},
                                               {3072, 1024},
                                               {3072},
                                               {1024, 1024},
                                               {1024},
                                               {1024},
                                               {1024},
                                               {4096, 1024},
                                               {4096},
                                               {1024, 4096},
                                               {1024}})
        shapes.push_back(s);
    }
    shapes.push_back({1024});
    shapes.push_back({1024});
  }
  std::vector<Tensor> grads;
  int64_t values = 0;
  for (const Shape& s : shapes) {
    const int64_t n =
        s.size() == 2 ? static_cast<int64_t>(static_cast<double>(shape_numel(s)) * density) : shape_numel(s);
    grads.push_back(randn({n}, TensorOptions(DType::kF32, device)));
    values += n;
  }
  const Tensor loss = scalar_tensor(2.3, TensorOptions(DType::kF32, device));
  if (argc > 4 && std::string(argv[4]) == "step") {
    const DType dtype = argc > 5 && std::string(argv[5]) == "bf16" ? DType::kBF16 : DType::kF32;
    std::vector<Variable> params;
    int64_t n = 0;
    for (const Shape& s : shapes) {
      params.emplace_back(mul(randn(s, TensorOptions(DType::kF32, device)), 0.01).to(dtype), true);
      params.back().set_grad(mul(randn(s, TensorOptions(DType::kF32, device)), 0.01).to(dtype));
      n += shape_numel(s);
    }
    SgdOptions o;
    o.lr = 1e-4;
    o.momentum = 0.9;
    Sgd opt(params, o);
    const int64_t slots = static_cast<int64_t>(params.size()) + 1;
    enum Mode { kNone, kFolded, kPass };
    auto time_step = [&](Mode mode) {
      const int reps = 100;
      double sink = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) {
        if (mode == kNone) {
          opt.step();
          sink += loss.item();
          continue;
        }
        NonfiniteFlag flag(slots);
        if (mode == kPass) {
          for (size_t i = 0; i < params.size(); ++i) flag.add(params[i].grad(), static_cast<int64_t>(i));
          opt.step();
        } else {
          opt.step(1.0, &flag);
        }
        sink += cat({loss.reshape({1}), flag.value()}).to(Device::cpu()).to(DType::kF64).to_vector<double>()[0];
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (sink < 0) std::printf("?");
      return s / reps;
    };
    for (int warm = 0; warm < 2; ++warm) time_step(kNone), time_step(kFolded), time_step(kPass);
    const double none = time_step(kNone), folded = time_step(kFolded), pass = time_step(kPass);
    std::printf(
        "%s %s %s sgd momentum step: %zu parameters, %lld values; step + loss read %.1f us, check folded into the "
        "step %.1f us (%+.1f us), a pass of its own %.1f us (%+.1f us)\n",
        where.c_str(), model.c_str(), std::string(dtype_name(dtype)).c_str(), params.size(), static_cast<long long>(n),
        none * 1e6, folded * 1e6, (folded - none) * 1e6, pass * 1e6, (pass - none) * 1e6);
    return 0;
  }
  auto time = [&](bool check) {
    const int reps = 200;
    double sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      if (!check) {
        sink += loss.item();
        continue;
      }
      NonfiniteFlag flag(static_cast<int64_t>(grads.size()) + 1);
      for (size_t i = 0; i < grads.size(); ++i) flag.add(grads[i], static_cast<int64_t>(i));
      sink += cat({loss.reshape({1}), flag.value()}).to(Device::cpu()).to(DType::kF64).to_vector<double>()[0];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink < 0) std::printf("?");
    return s / reps;
  };
  for (int warm = 0; warm < 2; ++warm) time(true), time(false);
  const double with = time(true), without = time(false);
  std::printf(
      "%s %s density %g: %zu gradients, %lld values; loss read %.1f us, with the check %.1f us: +%.1f us a step\n",
      where.c_str(), model.c_str(), density, grads.size(), static_cast<long long>(values), without * 1e6, with * 1e6,
      (with - without) * 1e6);
  return 0;
}
