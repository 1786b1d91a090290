// The fused SGD step on CUDA (optim/cuda/sgd_step.cu) against its CPU twin,
// bit for bit (both round every product and sum on its own): directly, over
// every combination of momentum, dampening, Nesterov and weight decay in f32
// and f64, first step included; and through Sgd on dense, CSR and bf16
// parameters, which take the fused kernel on CUDA. Every test skips, saying
// why, when no GPU is present.
#include "optim/sgd_step.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "optim/fused_step.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/op_profile.h"
#include "tensor/runtime_options.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

// The op profiler counts the fused steps (op_profile_calls): on for this
// binary.
const ScopedRuntimeOptions kProfiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the fused SGD step's CUDA kernel cannot run here"

using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::SgdCase;

const Device kCuda = Device::cuda(0);

std::vector<double> host_bits(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64).to_vector<double>(); }

const SgdCase kCases[] = {{0, 0, 0, false},         {0, 0, 0.01, false},  {0.9, 0, 0, false},
                          {0.9, 0.1, 0.001, false}, {0.9, 0, 0.01, true}, {0.3, 0.7, 0.05, false}};

TEST(SgdStepCudaTest, KernelMatchesCpuTwinBitForBit) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const SgdCase& c : kCases) {
      const int64_t n = 100003;  // more than one block, not a multiple of it
      Tensor p = random_tensor({n}, 1, dtype), buf = empty({n}, dtype);
      Tensor pc = p.to(kCuda), bufc = empty({n}, TensorOptions(dtype, kCuda));
      const bool has_buf = c.momentum != 0.0;
      for (int step = 0; step < 5; ++step) {
        const SgdStepArgs args = c.step_args(0.05, step == 0);
        const Tensor g = random_tensor({n}, 10 + step, dtype);
        ASSERT_TRUE(fused_sgd_step(p, g, has_buf ? buf : Tensor(), args));
        ASSERT_TRUE(fused_sgd_step(pc, g.to(kCuda), has_buf ? bufc : Tensor(), args));
      }
      const std::string what = str_cat(dtype_name(dtype), " ", c.describe());
      EXPECT_EQ(host_bits(pc), host_bits(p)) << what;
      if (has_buf) { EXPECT_EQ(host_bits(bufc), host_bits(buf)) << what; }
    }
  }
}

// The mixed-precision kernel against its CPU twin: bf16 and f16, every case,
// the first step included.
TEST(SgdStepCudaTest, MixedKernelMatchesCpuTwinBitForBit) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const SgdCase& c : kCases) {
      const int64_t n = 100003;
      Tensor master = random_tensor({n}, 1, DType::kF32), buf = empty({n}, DType::kF32), p16 = master.to(dtype);
      Tensor mc = master.to(kCuda), bc = empty({n}, TensorOptions(DType::kF32, kCuda)), pc = p16.to(kCuda);
      const bool has_buf = c.momentum != 0.0;
      for (int step = 0; step < 5; ++step) {
        const SgdStepArgs args = c.step_args(0.05, step == 0);
        const Tensor g = random_tensor({n}, 10 + step, dtype);
        ASSERT_TRUE(fused_sgd_step_mixed(master, g, has_buf ? buf : Tensor(), p16, args));
        ASSERT_TRUE(fused_sgd_step_mixed(mc, g.to(kCuda), has_buf ? bc : Tensor(), pc, args));
      }
      const std::string what = str_cat(dtype_name(dtype), " ", c.describe());
      EXPECT_EQ(host_bits(mc), host_bits(master)) << what;
      EXPECT_EQ(host_bits(pc), host_bits(p16)) << what;
      if (has_buf) { EXPECT_EQ(host_bits(bc), host_bits(buf)) << what; }
    }
  }
}

// Sgd on CUDA parameters takes the fused kernel (the counter moves) and
// matches the CPU bit for bit: dense f32, CSR f32, and bf16 (f32 master).
TEST(SgdStepCudaTest, SgdOnCudaTakesTheKernelAndMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const Shape shape = {32, 48};
  const Tensor keep = random_pattern(shape, 0.3, 2);
  for (const char* format : {"dense", "csr", "bf16"}) {
    const std::string f = format;
    const Tensor init = random_tensor(shape, 3, f == "bf16" ? DType::kBF16 : DType::kF32);
    const Tensor cpu_value = f == "csr" ? sparse_from_mask(init, keep, "csr") : init.clone();
    Variable cpu(cpu_value, true, "w");
    Variable gpu(to_device(with_values(cpu_value, values(cpu_value).clone()), kCuda), true, "w");
    SgdOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.nesterov = true;
    Sgd oc(std::vector<Variable>{cpu}, o), og(std::vector<Variable>{gpu}, o);
    const int64_t calls = op_profile_calls("sgd_step"), mixed_calls = op_profile_calls("sgd_step_mixed");
    for (int step = 0; step < 10; ++step) {
      const Tensor gv = random_tensor(values(cpu_value).shape(), 100 + step, init.dtype());
      cpu.set_grad(with_values(cpu.value(), gv));
      gpu.set_grad(with_values(gpu.value(), gv.to(kCuda)));
      oc.step();
      og.step();
    }
    // A bf16 parameter (no loss scale) steps in one pass: sgd_step_mixed.
    const char* op = f == "bf16" ? "sgd_step_mixed" : "sgd_step";
    EXPECT_EQ(op_profile_calls(op) - (f == "bf16" ? mixed_calls : calls), 20)
        << format << ": a step took the tensor-op path";
    EXPECT_EQ(values(gpu.value()).device(), kCuda);
    EXPECT_EQ(host_bits(values(gpu.value())), host_bits(values(cpu.value()))) << format;
    for (const auto& [name, t] : og.state(gpu)->tensors) {
      EXPECT_EQ(t.device(), kCuda) << name;
      EXPECT_EQ(host_bits(t), host_bits(oc.state(cpu)->tensors.at(name))) << format << " " << name;
    }
  }
}

}  // namespace
}  // namespace coppice
