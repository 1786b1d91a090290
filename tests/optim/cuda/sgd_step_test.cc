// The fused SGD step on CUDA (optim/cuda/sgd_step.cu) against its CPU twin,
// bit for bit (both round every product and sum on its own): directly, over
// every combination of momentum, dampening, Nesterov and weight decay in f32
// and f64, first step included; and through Sgd on dense, CSR and bf16
// parameters, which take the fused kernel on CUDA. The non-finite flag
// (optim/fused_step.h): set by the CUDA kernels exactly as by their CPU
// twins, the same bits with it or without, and one slot per parameter
// through Sgd::step on CUDA parameters. Every test skips, saying why, when
// no GPU is present.
#include "optim/sgd_step.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "optim/finite_check.h"
#include "optim/fused_step.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/masked.h"
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

using optim_test::flags_set;
using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::raw_bytes;
using optim_test::SgdCase;
using optim_test::with_element;

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
    const int64_t multi_calls = op_profile_calls("multi_tensor_step");
    for (int step = 0; step < 10; ++step) {
      const Tensor gv = random_tensor(values(cpu_value).shape(), 100 + step, init.dtype());
      cpu.set_grad(with_values(cpu.value(), gv));
      gpu.set_grad(with_values(gpu.value(), gv.to(kCuda)));
      oc.step();
      og.step();
    }
    // A bf16 parameter (no loss scale) steps in one pass: sgd_step_mixed. On
    // CUDA the step is the multi-tensor kernel's (optim/multi_tensor.h), one
    // launch a step for this one parameter, or the per-parameter kernel.
    const char* op = f == "bf16" ? "sgd_step_mixed" : "sgd_step";
    EXPECT_EQ(op_profile_calls(op) - (f == "bf16" ? mixed_calls : calls) + op_profile_calls("multi_tensor_step") -
                  multi_calls,
              20)
        << format << ": a step took the tensor-op path";
    EXPECT_EQ(values(gpu.value()).device(), kCuda);
    EXPECT_EQ(host_bits(values(gpu.value())), host_bits(values(cpu.value()))) << format;
    for (const auto& [name, t] : og.state(gpu)->tensors) {
      EXPECT_EQ(t.device(), kCuda) << name;
      EXPECT_EQ(host_bits(t), host_bits(oc.state(cpu)->tensors.at(name))) << format << " " << name;
    }
  }
}

// ---- the non-finite flag -------------------------------------------------

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A gradient of n elements: finite (bad empty), or with the listed elements
// replaced (in the first block, a late one, the very last).
Tensor poisoned(Tensor g, const std::vector<std::pair<int64_t, double>>& bad) {
  for (const auto& [at, value] : bad) g = with_element(g, at, value);
  return g;
}

const std::vector<std::vector<std::pair<int64_t, double>>> kPoisonings = {
    {}, {{5, kInf}}, {{99000, kNaN}}, {{100002, -kInf}}, {{3, kNaN}, {70001, kInf}}};

TEST(SgdStepCudaTest, NonfiniteFlagMatchesCpuTwinAndChangesNoBits) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 100003;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const SgdCase& c : {kCases[0], kCases[3], kCases[4]}) {
      for (size_t k = 0; k < kPoisonings.size(); ++k) {
        const std::string what = str_cat(dtype_name(dtype), " ", c.describe(), " poisoning ", k);
        const Tensor g = poisoned(random_tensor({n}, 21, dtype), kPoisonings[k]);
        const Tensor p0 = random_tensor({n}, 22, dtype), b0 = random_tensor({n}, 23, dtype);
        const bool has_buf = c.momentum != 0.0;
        const SgdStepArgs args = c.step_args(0.05, false);
        Tensor p = p0.clone(), b = b0.clone(), flags = zeros({3});
        Tensor pc = p0.to(kCuda), bc = b0.to(kCuda), flagsc = zeros({3}, TensorOptions(DType::kF32, kCuda));
        Tensor pn = p0.to(kCuda), bn = b0.to(kCuda);  // without a flag
        ASSERT_TRUE(fused_sgd_step(p, g, has_buf ? b : Tensor(), args, flags.select(0, 2)));
        ASSERT_TRUE(fused_sgd_step(pc, g.to(kCuda), has_buf ? bc : Tensor(), args, flagsc.select(0, 2)));
        ASSERT_TRUE(fused_sgd_step(pn, g.to(kCuda), has_buf ? bn : Tensor(), args));
        EXPECT_EQ(flags_set(flags), (std::vector<int>{0, 0, kPoisonings[k].empty() ? 0 : 1})) << what;
        EXPECT_EQ(flags_set(flagsc), flags_set(flags)) << what;
        EXPECT_EQ(raw_bytes(pc), raw_bytes(pn)) << what;
        EXPECT_EQ(raw_bytes(bc), raw_bytes(bn)) << what;
        // Against the CPU where everything is finite (a NaN's bits are the
        // device's own: x86 keeps the input's payload, CUDA makes its
        // canonical one).
        if (kPoisonings[k].empty()) {
          EXPECT_EQ(raw_bytes(pc), raw_bytes(p)) << what;
          if (has_buf) { EXPECT_EQ(raw_bytes(bc), raw_bytes(b)) << what; }
        }
      }
    }
  }
}

TEST(SgdStepCudaTest, MixedNonfiniteFlagMatchesCpuTwinAndChangesNoBits) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 100003;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const SgdCase& c : {kCases[0], kCases[4]}) {
      for (size_t k = 0; k < kPoisonings.size(); ++k) {
        const std::string what = str_cat(dtype_name(dtype), " ", c.describe(), " poisoning ", k);
        const Tensor g = poisoned(random_tensor({n}, 24, dtype), kPoisonings[k]);
        const Tensor m0 = random_tensor({n}, 25), b0 = random_tensor({n}, 26);
        const bool has_buf = c.momentum != 0.0;
        const SgdStepArgs args = c.step_args(0.05, false);
        Tensor m = m0.clone(), b = b0.clone(), p = m0.to(dtype), flags = zeros({2});
        Tensor mc = m0.to(kCuda), bc = b0.to(kCuda), pc = p.to(kCuda);
        Tensor flagsc = zeros({2}, TensorOptions(DType::kF32, kCuda));
        Tensor mn = m0.to(kCuda), bn = b0.to(kCuda), pn = p.to(kCuda);
        ASSERT_TRUE(fused_sgd_step_mixed(m, g, has_buf ? b : Tensor(), p, args, flags.select(0, 0)));
        ASSERT_TRUE(fused_sgd_step_mixed(mc, g.to(kCuda), has_buf ? bc : Tensor(), pc, args, flagsc.select(0, 0)));
        ASSERT_TRUE(fused_sgd_step_mixed(mn, g.to(kCuda), has_buf ? bn : Tensor(), pn, args));
        EXPECT_EQ(flags_set(flags), (std::vector<int>{kPoisonings[k].empty() ? 0 : 1, 0})) << what;
        EXPECT_EQ(flags_set(flagsc), flags_set(flags)) << what;
        EXPECT_EQ(raw_bytes(mc), raw_bytes(mn)) << what;
        EXPECT_EQ(raw_bytes(pc), raw_bytes(pn)) << what;
        EXPECT_EQ(raw_bytes(bc), raw_bytes(bn)) << what;
        if (kPoisonings[k].empty()) {  // NaN bits are the device's own
          EXPECT_EQ(raw_bytes(mc), raw_bytes(m)) << what;
          EXPECT_EQ(raw_bytes(pc), raw_bytes(p)) << what;
        }
      }
    }
  }
}

// Sgd::step(1.0, &flags) on CUDA parameters: dense and bf16 checked by the
// fused kernels, masked by a pass of its own (the op path), one slot each,
// as on the CPU; the flags stay on the device.
TEST(SgdStepCudaTest, SgdStepOnCudaSetsEachParametersSlot) {
  SKIP_WITHOUT_CUDA();
  const Shape shape = {32, 48};
  const Tensor keep = random_pattern(shape, 0.3, 2);
  for (int poisoned_param = -1; poisoned_param < 3; ++poisoned_param) {
    std::vector<Variable> cpu, gpu;
    const Tensor inits[] = {random_tensor(shape, 3), sparse_masked(random_tensor(shape, 4), keep),
                            random_tensor(shape, 5, DType::kBF16)};
    for (const Tensor& v : inits) {
      cpu.emplace_back(with_values(v, values(v).clone()), true, "w");
      gpu.emplace_back(to_device(with_values(v, values(v).clone()), kCuda), true, "w");
    }
    Sgd oc(cpu, SgdCase{0.9, 0, 0.01, true}.options(0.05)), og(gpu, SgdCase{0.9, 0, 0.01, true}.options(0.05));
    for (size_t i = 0; i < cpu.size(); ++i) {
      Tensor gv = random_tensor(shape, 30 + i, values(inits[i]).dtype());
      if (static_cast<int>(i) == poisoned_param) {
        int64_t at = 11;
        const std::vector<double> mask = optim_test::host(keep);
        while (mask[static_cast<size_t>(at)] == 0.0) ++at;
        gv = with_element(gv, at, kNaN);
      }
      cpu[i].set_grad(with_values(cpu[i].value(), gv));
      gpu[i].set_grad(with_values(gpu[i].value(), gv.to(kCuda)));
    }
    NonfiniteFlag fc(4), fg(4);
    const int64_t checks = op_profile_calls("nonfinite_flag");
    oc.step(1.0, &fc);
    og.step(1.0, &fg);
    EXPECT_EQ(op_profile_calls("nonfinite_flag") - checks, 2) << "the masked parameter's pass, on each device";
    EXPECT_EQ(fg.value().device(), kCuda);
    std::vector<int> expected(4, 0);
    if (poisoned_param >= 0) expected[static_cast<size_t>(poisoned_param)] = 1;
    EXPECT_EQ(flags_set(fg.value()), expected) << poisoned_param;
    EXPECT_EQ(flags_set(fc.value()), expected) << poisoned_param;
    for (size_t i = 0; i < cpu.size() && poisoned_param < 0; ++i) {  // NaN bits are the device's own
      // (the masked parameter's tensor ops may differ in a last bit)
      EXPECT_LE(max_abs_diff(values(gpu[i].value()).to(Device::cpu()).to(DType::kF64),
                             values(cpu[i].value()).to(DType::kF64)),
                1e-5)
          << i;
    }
  }
}

}  // namespace
}  // namespace coppice
