// The optimizers on CUDA tensors against the same on the CPU: the fused
// Adam/AdamW kernel (optim/cuda/adam_step.cu) against its CPU twin, directly
// and through Adam/AdamW on dense and CSR parameters; SGD with momentum and
// the masked format through tensor ops; the fused kernel's non-finite flag
// against its CPU twin's (the same slot set, the same bits with or without
// it). Every test skips, saying why, when no GPU is present.
#include "optim/adam_step.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/masked.h"
#include "tensor/backend.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the optimizers' CUDA paths cannot run here"

using optim_test::flags_set;
using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::raw_bytes;
using optim_test::with_element;

const Device kCuda = Device::cuda(0);

double tol(DType d) { return d == DType::kF64 ? 1e-12 : 1e-5; }

TEST(OptimCudaTest, FusedKernelMatchesCpuTwin) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (bool decoupled : {false, true}) {
      const int64_t n = 100003;  // more than one block, not a multiple of it
      Tensor p = random_tensor({n}, 1, dtype), m = zeros({n}, dtype), v = zeros({n}, dtype);
      Tensor pc = p.to(kCuda), mc = m.to(kCuda), vc = v.to(kCuda);
      AdamStepArgs args;
      args.lr = 0.01;
      args.weight_decay = 0.1;
      args.decoupled = decoupled;
      for (int64_t step = 1; step <= 5; ++step) {
        args.step = step;
        const Tensor g = random_tensor({n}, 10 + step, dtype);
        const Tensor gc = g.to(kCuda);
        ASSERT_TRUE(fused_adam_step(p, g, m, v, args));
        ASSERT_TRUE(fused_adam_step(pc, gc, mc, vc, args));
      }
      EXPECT_LE(max_abs_diff(pc.to(Device::cpu()), p), tol(dtype)) << dtype_name(dtype);
      EXPECT_LE(max_abs_diff(mc.to(Device::cpu()), m), tol(dtype));
      EXPECT_LE(max_abs_diff(vc.to(Device::cpu()), v), tol(dtype));
    }
  }
}

std::unique_ptr<Optimizer> make(int kind, const Variable& w) {
  if (kind == 0) {
    AdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.01;
    return std::make_unique<Adam>(std::vector<Variable>{w}, o);
  }
  if (kind == 1) {
    AdamWOptions o;
    o.lr = 0.01;
    return std::make_unique<AdamW>(std::vector<Variable>{w}, o);
  }
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  return std::make_unique<Sgd>(std::vector<Variable>{w}, o);
}

TEST(OptimCudaTest, OptimizersOnCudaMatchCpu) {
  SKIP_WITHOUT_CUDA();
  const Shape shape = {32, 48};
  const Tensor keep = random_pattern(shape, 0.3, 2);
  const Tensor init = random_tensor(shape, 3);
  for (const char* format : {"dense", "csr", "masked"}) {
    for (int kind = 0; kind < 3; ++kind) {
      const Tensor cpu_value = std::string(format) == "dense"    ? init.clone()
                               : std::string(format) == "masked" ? sparse_masked(init.clone(), keep)
                                                                 : sparse_from_mask(init, keep, format);
      Variable cpu(cpu_value, true, "w");
      Variable gpu(to_device(with_values(cpu_value, values(cpu_value).clone()), kCuda), true, "w");
      std::unique_ptr<Optimizer> oc = make(kind, cpu), og = make(kind, gpu);
      for (int step = 0; step < 10; ++step) {
        const Tensor gv = random_tensor(values(cpu_value).shape(), 100 + step);
        cpu.set_grad(with_values(cpu.value(), gv));
        gpu.set_grad(with_values(gpu.value(), gv.to(kCuda)));
        oc->step();
        og->step();
      }
      EXPECT_EQ(values(gpu.value()).device(), kCuda);
      EXPECT_LE(max_abs_diff(values(gpu.value()).to(Device::cpu()), values(cpu.value())), 1e-5)
          << format << " kind " << kind;
      for (const auto& [name, t] : og->state(gpu)->tensors) {
        EXPECT_EQ(t.device(), kCuda) << name;
        EXPECT_LE(max_abs_diff(t.to(Device::cpu()), oc->state(cpu)->tensors.at(name)), 1e-5) << name;
      }
    }
  }
}

TEST(OptimCudaTest, RemapStateOnCuda) {
  SKIP_WITHOUT_CUDA();
  const Tensor keep = random_pattern({8, 8}, 0.5, 4);
  Variable w(to_device(sparse_from_mask(random_tensor({8, 8}, 5), keep, "csr"), kCuda), true, "w");
  Adam opt({w}, AdamOptions{});
  w.set_grad(with_values(w.value(), random_tensor(values(w.value()).shape(), 6).to(kCuda)));
  opt.step();
  const int64_t n = nnz(w.value());
  std::vector<int64_t> keep_from(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) keep_from[static_cast<size_t>(j)] = j % 2 == 0 ? n - 1 - j : -1;
  const std::vector<float> before = opt.state(w)->tensors.at("exp_avg").to(Device::cpu()).to_vector<float>();
  opt.remap_state(w, from_vector(keep_from).to(kCuda));
  const std::vector<float> after = opt.state(w)->tensors.at("exp_avg").to(Device::cpu()).to_vector<float>();
  for (size_t j = 0; j < after.size(); ++j) {
    EXPECT_EQ(after[j], keep_from[j] < 0 ? 0.0f : before[static_cast<size_t>(keep_from[j])]) << j;
  }
}

TEST(OptimCudaTest, FusedKernelNonfiniteFlagMatchesCpuTwin) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 100003;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (bool decoupled : {false, true}) {
      for (double bad : {0.0, inf, nan}) {
        const std::string what = str_cat(dtype_name(dtype), decoupled ? " adamw " : " adam ", bad);
        AdamStepArgs args;
        args.lr = 0.01;
        args.weight_decay = 0.1;
        args.decoupled = decoupled;
        args.step = 2;
        Tensor g = random_tensor({n}, 40, dtype);
        if (bad != 0.0) g = with_element(g, 88888, bad);
        const Tensor p0 = random_tensor({n}, 41, dtype), m0 = random_tensor({n}, 42, dtype);
        const Tensor v0 = abs(random_tensor({n}, 43, dtype));
        Tensor p = p0.clone(), m = m0.clone(), v = v0.clone(), flags = zeros({2});
        Tensor pc = p0.to(kCuda), mc = m0.to(kCuda), vc = v0.to(kCuda);
        Tensor pn = p0.to(kCuda), mn = m0.to(kCuda), vn = v0.to(kCuda);
        Tensor flagsc = zeros({2}, TensorOptions(DType::kF32, kCuda));
        ASSERT_TRUE(fused_adam_step(p, g, m, v, args, flags.select(0, 1)));
        ASSERT_TRUE(fused_adam_step(pc, g.to(kCuda), mc, vc, args, flagsc.select(0, 1)));
        ASSERT_TRUE(fused_adam_step(pn, g.to(kCuda), mn, vn, args));
        EXPECT_EQ(flags_set(flags), (std::vector<int>{0, bad != 0.0 ? 1 : 0})) << what;
        EXPECT_EQ(flags_set(flagsc), flags_set(flags)) << what;
        EXPECT_EQ(raw_bytes(pc), raw_bytes(pn)) << what;
        EXPECT_EQ(raw_bytes(mc), raw_bytes(mn)) << what;
        EXPECT_EQ(raw_bytes(vc), raw_bytes(vn)) << what;
      }
    }
  }
}

}  // namespace
}  // namespace coppice
