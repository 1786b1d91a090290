// Trains a 3-layer MLP on synthetic data through autograd and prints the loss
// falling. The data: x ~ N(0, 1) in 32 dimensions, labelled by which of 8
// random directions it points along most, so a small MLP can learn it well.
//
//   mlp_demo [--device cpu|cuda|auto] [--steps N] [--lr X] [--seed S]
// Exit status 0 when the loss fell by more than 5x, 1 otherwise, 2 on bad flags.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

struct Flags {
  std::string device = "auto";
  int steps = 300;
  double lr = 0.1;
  uint64_t seed = 1;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      COPPICE_CHECK(i + 1 < argc, "mlp_demo: flag ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--device") {
      f.device = value();
    } else if (a == "--steps") {
      f.steps = std::atoi(value().c_str());
      COPPICE_CHECK(f.steps > 0, "mlp_demo: --steps must be positive");
    } else if (a == "--lr") {
      f.lr = std::atof(value().c_str());
      COPPICE_CHECK(f.lr > 0, "mlp_demo: --lr must be positive");
    } else if (a == "--seed") {
      f.seed = std::strtoull(value().c_str(), nullptr, 10);
    } else {
      fail("mlp_demo: unknown flag '", a, "' (expected --device, --steps, --lr, --seed)");
    }
  }
  return f;
}

// A weight initialised like PyTorch's Linear (uniform in +-1/sqrt(fan_in)).
Variable init_weight(const Shape& shape, Device device, Generator& gen, const char* name) {
  double bound = 1.0 / std::sqrt(static_cast<double>(shape.back()));
  Tensor w = rand(shape, TensorOptions(DType::kF32, device), gen) * (2 * bound) - bound;
  return Variable(w, /*requires_grad=*/true, name);
}

int run(const Flags& flags) {
  Device device =
      flags.device == "auto" ? (cuda_available() ? Device::cuda(0) : Device::cpu()) : Device::parse(flags.device);
  Generator gen(flags.seed);
  constexpr int64_t kSamples = 2048, kIn = 32, kHidden = 128, kClasses = 8;

  // Synthetic, learnable data, drawn the same on every device.
  Tensor x = randn({kSamples, kIn}, TensorOptions(DType::kF32, device), gen);
  Tensor directions = randn({kIn, kClasses}, TensorOptions(DType::kF32, device), gen);
  Tensor y = argmax(matmul(x, directions), 1);

  std::vector<Variable> params = {
      init_weight({kHidden, kIn}, device, gen, "fc1.weight"),
      Variable(zeros({kHidden}, TensorOptions(DType::kF32, device)), true, "fc1.bias"),
      init_weight({kHidden, kHidden}, device, gen, "fc2.weight"),
      Variable(zeros({kHidden}, TensorOptions(DType::kF32, device)), true, "fc2.bias"),
      init_weight({kClasses, kHidden}, device, gen, "fc3.weight"),
      Variable(zeros({kClasses}, TensorOptions(DType::kF32, device)), true, "fc3.bias"),
  };
  std::vector<Tensor> momentum;
  for (const Variable& p : params) momentum.push_back(zeros_like(p.value()));

  std::printf("mlp_demo: %lld samples, MLP %lld-%lld-%lld-%lld, SGD momentum 0.9, lr %g, on %s\n",
              static_cast<long long>(kSamples), static_cast<long long>(kIn), static_cast<long long>(kHidden),
              static_cast<long long>(kHidden), static_cast<long long>(kClasses), flags.lr, device.to_string().c_str());
  Variable input(x);
  double first = 0, last = 0;
  auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < flags.steps; ++step) {
    Variable h = relu(linear(input, params[0], params[1]));
    h = relu(linear(h, params[2], params[3]));
    Variable loss = cross_entropy(linear(h, params[4], params[5]), y);
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        momentum[i].copy_(momentum[i] * 0.9 + params[i].grad());
        Tensor weight = params[i].value();  // a handle: updating it updates the parameter
        weight.copy_(weight - momentum[i] * flags.lr);
        params[i].set_grad(Tensor());
      }
    }
    last = loss.item();
    if (step == 0) first = last;
    if (step == 0 || (step + 1) % 25 == 0) {
      double acc = mean(eq(argmax(linear(h, params[4], params[5]).value(), 1), y).to(DType::kF32)).item();
      std::printf("step %4d  loss %.4f  accuracy %.3f\n", step + 1, last, acc);
    }
  }
  synchronize(device);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double ratio = first / last;
  std::printf("loss fell from %.4f to %.4f (%.1fx) in %d steps, %.2f s on %s\n", first, last, ratio, flags.steps,
              seconds, device.to_string().c_str());
  return ratio > 5.0 ? 0 : 1;
}

}  // namespace
}  // namespace coppice

int main(int argc, char** argv) {
  try {
    return coppice::run(coppice::parse_flags(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_demo: %s\n", e.what());
    return 2;
  }
}
