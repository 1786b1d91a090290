// The multi-tensor launches on CUDA (optim/multi_tensor.h): the step of many
// parameters in one launch against each parameter's own fused kernel (the
// same optimizer with set_multi_tensor(false)): the same bits, for SGD
// (momentum, weight decay) and Adam/AdamW, f32 and bf16/f16 with f32 master
// weights, sizes that are not multiples of 4, one element, and 200
// parameters (several tables); the non-finite flags the same; the clip
// factor the same as clipping then stepping; the device norm against the
// host's and its CPU twin's, its flags, and a norm that is not finite
// changing nothing. Every test skips, saying why, when no GPU is present.
#include "optim/multi_tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/masked.h"
#include "tensor/backend.h"
#include "tensor/op_profile.h"
#include "tensor/runtime_options.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the multi-tensor kernels cannot run here"

using optim_test::flags_set;
using optim_test::make_optimizer;
using optim_test::optimizer_kind;
using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::raw_bytes;
using optim_test::snapshot;
using optim_test::with_element;

const Device kCuda = Device::cuda(0);
constexpr double kInf = std::numeric_limits<double>::infinity();

// The op profiler counts the multi-tensor launches (op_profile_calls).
const ScopedRuntimeOptions kProfiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });

// Sizes for a parameter set: `many` gives 200 parameters of 1 to ~300
// elements (more than one table of a launch) and a few large ones;
// otherwise one element, odd sizes, and sizes across a chunk (4096).
std::vector<int64_t> sizes(bool many) {
  if (!many) return {1, 3, 5, 4095, 4097, 100003};
  std::vector<int64_t> out;
  for (int i = 0; i < 200; ++i) out.push_back(1 + (i * 37) % 301);
  out[17] = 70001;
  out[150] = 8193;
  return out;
}

std::vector<Variable> make_params(DType dtype, bool many, uint64_t seed) {
  std::vector<Variable> out;
  const std::vector<int64_t> n = sizes(many);
  for (size_t i = 0; i < n.size(); ++i) {
    out.emplace_back(random_tensor({n[i]}, seed + i, dtype).to(kCuda), true, str_cat("p", i));
  }
  return out;
}

std::vector<Variable> copy_params(const std::vector<Variable>& params) {
  std::vector<Variable> out;
  for (const Variable& p : params) {
    out.emplace_back(p.value().clone(), true, p.name());
    if (p.grad().defined()) out.back().set_grad(p.grad().clone());
  }
  return out;
}

// The same gradients on both sets, scaled by `scale`.
void set_grads(const std::vector<Variable>& a, const std::vector<Variable>& b, uint64_t seed, double scale) {
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor g = mul(random_tensor(a[i].value().shape(), seed * 1000 + i, DType::kF64), scale)
                         .to(a[i].value().dtype())
                         .to(kCuda);
    a[i].set_grad(g);
    b[i].set_grad(g.clone());
  }
}

// Multi-tensor against per-parameter kernels over three steps (the first
// makes the state), with non-finite flags, and a NaN and an inf in two
// gradients of the last step: the same values, state and flags, bit for bit.
TEST(MultiTensorCudaTest, TheMultiTensorStepIsThePerParameterKernels) {
  SKIP_WITHOUT_CUDA();
  for (int kind = 0; kind < optim_test::kOptimizerKinds; ++kind) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (bool many : {false, true}) {
        const std::string what = str_cat(optimizer_kind(kind), " ", dtype_name(dtype), many ? " 200 params" : "");
        const std::vector<Variable> a = make_params(dtype, many, 3);
        const std::vector<Variable> b = copy_params(a);
        auto multi = make_optimizer(kind, a);
        auto single = make_optimizer(kind, b);
        single->set_multi_tensor(false);
        const auto slots = static_cast<int64_t>(a.size());
        NonfiniteFlag fa(slots), fb(slots);
        for (uint64_t step = 1; step <= 3; ++step) {
          set_grads(a, b, step, 1.0);
          if (step == 3) {
            for (const std::vector<Variable>* set : {&a, &b}) {
              (*set)[1].set_grad(with_element((*set)[1].grad(), 2, std::nan("")));
              (*set)[set->size() - 2].set_grad(with_element((*set)[set->size() - 2].grad(), 0, -kInf));
            }
          }
          const int64_t launches = op_profile_calls("multi_tensor_step");
          multi->step(1.0, &fa);
          EXPECT_GT(op_profile_calls("multi_tensor_step"), launches) << what;
          const int64_t before = op_profile_calls("multi_tensor_step");
          single->step(1.0, &fb);
          EXPECT_EQ(op_profile_calls("multi_tensor_step"), before) << what;
        }
        EXPECT_TRUE(snapshot(*multi, a) == snapshot(*single, b)) << what;
        const std::vector<int> flags = flags_set(fa.value());
        EXPECT_EQ(flags, flags_set(fb.value())) << what;
        EXPECT_EQ(flags[1], 1) << what;
        EXPECT_EQ(flags[a.size() - 2], 1) << what;
        EXPECT_EQ(flags[0], 0) << what;
      }
    }
  }
}

// With the clip factor: the multi-tensor step, the per-parameter kernels
// and clip_grad_norm then step() (f32: the same bits; 16-bit: the clipped
// gradient that clipping rounds to 16 bits first, so within rounding).
TEST(MultiTensorCudaTest, TheFactorStepIsClipThenStep) {
  SKIP_WITHOUT_CUDA();
  for (int kind = 0; kind < optim_test::kOptimizerKinds; ++kind) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (bool many : {false, true}) {
        const std::string what = str_cat(optimizer_kind(kind), " ", dtype_name(dtype), many ? " 200 params" : "");
        const std::vector<Variable> a = make_params(dtype, many, 5);
        const std::vector<Variable> b = copy_params(a);
        const std::vector<Variable> c = copy_params(a);
        auto multi = make_optimizer(kind, a);
        auto single = make_optimizer(kind, b);
        single->set_multi_tensor(false);
        auto clipped = make_optimizer(kind, c);
        for (uint64_t step = 1; step <= 3; ++step) {
          const double scale = step == 2 ? 1e-4 : 2.0;  // step 2 is not clipped: factor 1
          set_grads(a, b, step, scale);
          set_grads(a, c, step, scale);
          const DeviceClip clip = clip_grad_norm_on_device(a, 1.0);
          EXPECT_EQ(clip.factor.device(), kCuda);
          multi->step(1.0, nullptr, clip.factor);
          single->step(1.0, nullptr, clip_grad_norm_on_device(b, 1.0).factor);
          const double norm = clip_grad_norm(c, 1.0);
          EXPECT_NEAR(clip.norm.item(), norm, norm * 1e-6) << what;
          clipped->step();
        }
        EXPECT_TRUE(snapshot(*multi, a) == snapshot(*single, b)) << what;
        if (dtype == DType::kF32) {
          EXPECT_TRUE(snapshot(*multi, a) == snapshot(*clipped, c)) << what;
        } else {
          // Adam's first step moves each weight by lr times the sign of its
          // gradient (plus decay), so where the two gradients' rounding
          // straddles zero the masters differ by 2 lr: allow that on a few
          // elements in a thousand, and rounding elsewhere.
          for (size_t i = 0; i < a.size(); ++i) {
            const Tensor ma = multi->state(a[i])->tensors.at(kMasterWeightsState).to(Device::cpu());
            const Tensor mc = clipped->state(c[i])->tensors.at(kMasterWeightsState).to(Device::cpu());
            const std::vector<double> va = ma.to(DType::kF64).to_vector<double>();
            const std::vector<double> vc = mc.to(DType::kF64).to_vector<double>();
            int64_t apart = 0;
            for (size_t e = 0; e < va.size(); ++e) {
              const double d = std::abs(va[e] - vc[e]);
              ASSERT_LE(d, 0.061) << what << " " << a[i].name() << " element " << e;  // 3 steps of 2 lr
              if (d > 2e-3) ++apart;
            }
            EXPECT_LE(apart, std::max<int64_t>(1, static_cast<int64_t>(va.size()) / 250))
                << what << " " << a[i].name() << ": elements apart by more than rounding";
          }
        }
      }
    }
  }
}

// A factor that is not finite: neither path changes a parameter or a state.
TEST(MultiTensorCudaTest, ANonfiniteNormChangesNothing) {
  SKIP_WITHOUT_CUDA();
  for (int kind = 0; kind < optim_test::kOptimizerKinds; ++kind) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::vector<Variable> a = make_params(dtype, true, 7);
      const std::vector<Variable> b = copy_params(a);
      auto multi = make_optimizer(kind, a);
      auto single = make_optimizer(kind, b);
      single->set_multi_tensor(false);
      set_grads(a, b, 1, 1.0);
      multi->step(1.0, nullptr, clip_grad_norm_on_device(a, 1.0).factor);
      single->step(1.0, nullptr, clip_grad_norm_on_device(b, 1.0).factor);
      const auto before_a = snapshot(*multi, a), before_b = snapshot(*single, b);
      set_grads(a, b, 2, 1.0);
      a[120].set_grad(with_element(a[120].grad(), 0, std::nan("")));
      b[120].set_grad(with_element(b[120].grad(), 0, std::nan("")));
      NonfiniteFlag flags(static_cast<int64_t>(a.size()));
      multi->step(1.0, nullptr, clip_grad_norm_on_device(a, 1.0, 2.0, &flags).factor);
      single->step(1.0, nullptr, clip_grad_norm_on_device(b, 1.0).factor);
      const std::string what = str_cat(optimizer_kind(kind), " ", dtype_name(dtype));
      EXPECT_TRUE(snapshot(*multi, a) == before_a) << what;
      EXPECT_TRUE(snapshot(*single, b) == before_b) << what;
      std::vector<int> want(a.size(), 0);
      want[120] = 1;
      EXPECT_EQ(flags_set(flags.value()), want) << what;
    }
  }
}

// The device norm over 200 gradients (four tables) and a large one, dense,
// CSR and masked: the host norm (clip's grad_norm) and the CPU twin's to
// f32 rounding; the same bits on a second run; its flags where a gradient
// is not finite.
TEST(MultiTensorCudaTest, TheDeviceNormIsTheHostNorm) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    std::vector<Variable> params = make_params(dtype, true, 11);
    std::vector<Variable> unused = copy_params(params);
    set_grads(params, unused, 4, 0.5);
    if (dtype == DType::kF32 || dtype == DType::kF64) {  // stored values only
      const Tensor keep = random_pattern({40, 30}, 0.3, 12);
      const Tensor w = random_tensor({40, 30}, 13, dtype);
      Variable csr(to_device(sparse_from_mask(w, keep, "csr"), kCuda), true, "csr");
      csr.set_grad(with_values(csr.value(), random_tensor(values(csr.value()).shape(), 14, dtype).to(kCuda)));
      Variable masked(to_device(sparse_masked(w, keep), kCuda), true, "masked");
      masked.set_grad(with_values(masked.value(), random_tensor({40, 30}, 15, dtype).to(kCuda)));
      params.push_back(csr);
      params.push_back(masked);
    }
    std::vector<Variable> on_cpu;
    for (const Variable& p : params) {
      on_cpu.emplace_back(to_device(p.value(), Device::cpu()), true, p.name());
      on_cpu.back().set_grad(to_device(p.grad(), Device::cpu()));
    }
    for (double p : {2.0, 1.0, 3.0, kInf}) {
      const std::string what = str_cat(dtype_name(dtype), " p ", p);
      const DeviceClip c = clip_grad_norm_on_device(params, 1.0, p);
      const DeviceClip again = clip_grad_norm_on_device(params, 1.0, p);
      const DeviceClip twin = clip_grad_norm_on_device(on_cpu, 1.0, p);
      const double want = grad_norm(on_cpu, p);
      EXPECT_NEAR(c.norm.item(), want, want * 1e-6) << what;
      EXPECT_NEAR(c.norm.item(), twin.norm.item(), want * 1e-6) << what;
      EXPECT_NEAR(c.factor.item(), twin.factor.item(), 1e-6) << what;
      EXPECT_EQ(raw_bytes(c.norm), raw_bytes(again.norm)) << what;
    }
    params[70].set_grad(with_element(params[70].grad(), 0, kInf));
    params[150].set_grad(with_element(params[150].grad(), 8000, std::nan("")));
    NonfiniteFlag flags(static_cast<int64_t>(params.size()));
    const DeviceClip c = clip_grad_norm_on_device(params, 1.0, 2.0, &flags);
    std::vector<int> want(params.size(), 0);
    want[70] = want[150] = 1;
    EXPECT_EQ(flags_set(flags.value()), want) << dtype_name(dtype);
    EXPECT_TRUE(std::isnan(c.factor.item())) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace coppice
