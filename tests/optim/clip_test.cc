// clip_grad_norm (optim/clip.h) over dense and sparse gradients, and its
// device form: clip_grad_norm_on_device's norm and factor against the host
// norm, its non-finite flags, and Optimizer::step with the factor against
// clipping then stepping (the same bits in f32; within rounding with bf16
// master weights), a non-finite norm changing nothing.
#include "optim/clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/masked.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::f64;
using optim_test::flags_set;
using optim_test::host;
using optim_test::make_optimizer;
using optim_test::optimizer_kind;
using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::raw_bytes;
using optim_test::snapshot;
using optim_test::with_element;

TEST(ClipTest, GlobalNormOverDenseAndSparse) {
  Variable a(f64({0.0, 0.0}), true, "a");
  a.set_grad(f64({3.0, 0.0}));
  // CSR gradient with stored values {4, 0} (an explicit zero) and 12 on a masked one.
  const Tensor keep = ne(f64({1, 1, 0, 0}, {2, 2}), 0.0);
  Variable b(sparse_from_mask(f64({1, 1, 0, 0}, {2, 2}), keep, "csr"), true, "b");
  b.set_grad(with_values(b.value(), f64({4.0, 0.0})));
  const Tensor mkeep = ne(f64({1, 0}), 0.0);
  Variable c(sparse_masked(f64({1.0, 1.0}), mkeep), true, "c");
  c.set_grad(with_values(c.value(), f64({12.0, 1000.0})));  // 1000 is off the mask
  Variable none(f64({1.0}), true, "none");
  const double norm = clip_grad_norm({a, b, c, none}, 6.5);
  EXPECT_NEAR(norm, 13.0, 1e-12);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(host(a.grad())[0], 3.0 * coef, 1e-12);
  EXPECT_NEAR(host(values(b.grad()))[0], 4.0 * coef, 1e-12);
  EXPECT_EQ(pattern_version(b.grad()), pattern_version(b.value()));
  EXPECT_NEAR(host(values(c.grad()))[0], 12.0 * coef, 1e-12);
  EXPECT_NEAR(grad_norm({a, b, c}), 6.5, 1e-6);
}

// The norm's host reads name the first parameter whose gradient is not
// finite (the trainer's check when it clips); finite gradients name none.
TEST(ClipTest, TheCheckedNormNamesTheFirstNonfiniteGradient) {
  Variable a(f64({0.0, 0.0}), true, "a");
  a.set_grad(f64({3.0, 4.0}));
  Variable b(f64({0.0, 0.0}), true, "b");
  b.set_grad(f64({1.0, std::numeric_limits<double>::quiet_NaN()}));
  Variable c(f64({0.0}), true);  // unnamed
  c.set_grad(f64({std::numeric_limits<double>::infinity()}));
  EXPECT_EQ(grad_norm_checked({a}).first_nonfinite, "");
  EXPECT_NEAR(grad_norm_checked({a}).total, 5.0, 1e-12);
  EXPECT_EQ(grad_norm_checked({a, c}).first_nonfinite, "parameter 1");
  EXPECT_TRUE(std::isinf(grad_norm_checked({a, c}).total));
  EXPECT_EQ(clip_grad_norm_checked({a, b, c}, 1.0).first_nonfinite, "b");  // then scales all by NaN, as torch
}

TEST(ClipTest, BelowMaxLeavesGradientsAlone) {
  Variable a(f64({0.0, 0.0}), true, "a");
  const Tensor g = f64({0.3, 0.4});
  a.set_grad(g);
  EXPECT_NEAR(clip_grad_norm({a}, 1.0), 0.5, 1e-12);
  EXPECT_TRUE(a.grad().is_same(g));
}

TEST(ClipTest, OtherNorms) {
  Variable a(f64({0.0, 0.0}), true, "a");
  a.set_grad(f64({-3.0, 1.0}));
  Variable b(f64({0.0}), true, "b");
  b.set_grad(f64({2.0}));
  EXPECT_NEAR(grad_norm({a, b}, 1.0), 6.0, 1e-12);
  EXPECT_NEAR(grad_norm({a, b}, std::numeric_limits<double>::infinity()), 3.0, 1e-12);
  EXPECT_NEAR(clip_grad_norm({a, b}, 1.5, std::numeric_limits<double>::infinity()), 3.0, 1e-12);
  EXPECT_NEAR(host(a.grad())[0], -3.0 * 1.5 / (3.0 + 1e-6), 1e-12);
  EXPECT_THROW(grad_norm({a}, 0.0), Error);
}

// ---- clip_grad_norm_on_device -------------------------------------------------

constexpr double kInf = std::numeric_limits<double>::infinity();

// Parameters of `dtype` with sizes that are not multiples of 4 (one of a
// single element), gradients large enough to be clipped; with `sparse`, a
// CSR weight (the fused kernels on its values) and a masked one (the
// tensor-op path) too.
std::vector<Variable> make_params(DType dtype, bool sparse, uint64_t seed) {
  std::vector<Variable> out;
  const std::vector<Shape> shapes = {{1}, {7}, {3, 5}, {33}, {4, 9}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.emplace_back(random_tensor(shapes[i], seed + i, dtype), true, str_cat("p", i));
  }
  if (sparse) {
    const Tensor w = random_tensor({6, 10}, seed + 20, dtype);
    out.emplace_back(sparse_from_mask(w, random_pattern({6, 10}, 0.4, seed + 21), "csr"), true, "csr");
    out.emplace_back(sparse_masked(random_tensor({5, 3}, seed + 22, dtype), random_pattern({5, 3}, 0.5, seed + 23)),
                     true, "masked");
  }
  return out;
}

// Fresh gradients (in each parameter's format and pattern), scaled by
// `scale` so that the norm is well above 1.
void set_grads(const std::vector<Variable>& params, uint64_t seed, double scale) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& v = params[i].value();
    const Tensor g = mul(random_tensor(values(v).shape(), seed * 100 + i, DType::kF64), scale).to(v.dtype());
    params[i].set_grad(v.is_dense() ? g : with_values(v, g));
  }
}

// Independent copies of `params` (values and gradients), same names.
std::vector<Variable> copy_params(const std::vector<Variable>& params) {
  std::vector<Variable> out;
  for (const Variable& p : params) {
    const Tensor& v = p.value();
    out.emplace_back(v.is_dense() ? v.clone() : with_values(v, values(v).clone()), true, p.name());
    const Tensor& g = p.grad();
    if (g.defined()) out.back().set_grad(g.is_dense() ? g.clone() : with_values(g, values(g).clone()));
  }
  return out;
}

TEST(DeviceClipTest, NormAndFactorAreTheHostOnes) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    const bool sparse = dtype == DType::kF32 || dtype == DType::kF64;
    std::vector<Variable> params = make_params(dtype, sparse, 3);
    set_grads(params, 5, 2.0);
    params.emplace_back(f64({1.0}).to(dtype), true, "no_grad");
    for (double p : {2.0, 1.0, 3.0, kInf}) {
      for (double max_norm : {1.0, 1e6}) {
        const double want = grad_norm(params, p);
        const DeviceClip c = clip_grad_norm_on_device(params, max_norm, p);
        ASSERT_EQ(c.norm.dtype(), DType::kF32);
        ASSERT_EQ(c.norm.dim(), 0);
        EXPECT_NEAR(c.norm.item(), want, want * 1e-6) << dtype_name(dtype) << " p " << p;
        const double coef = max_norm / (want + 1e-6);
        EXPECT_EQ(c.factor.item(), static_cast<double>(static_cast<float>(coef < 1.0 ? coef : 1.0)))
            << dtype_name(dtype) << " p " << p << " max " << max_norm;
      }
    }
  }
  // No gradient at all: norm 0, factor 1.
  Variable a(f64({1.0}), true, "a");
  const DeviceClip none = clip_grad_norm_on_device({a}, 1.0);
  EXPECT_EQ(none.norm.item(), 0.0);
  EXPECT_EQ(none.factor.item(), 1.0);
}

// An inf or a NaN gradient sets its parameter's slot (so the one read of the
// flags names the first), makes the factor NaN, and touches no gradient.
TEST(DeviceClipTest, NonfiniteGradientsSetTheirSlotsAndTheFactorIsNaN) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<Variable> params = make_params(dtype, dtype == DType::kF32, 7);
    set_grads(params, 9, 1.0);
    params[2].set_grad(with_element(params[2].grad(), 4, std::nan("")));
    params[4].set_grad(with_element(params[4].grad(), 0, kInf));
    if (dtype == DType::kF32) {  // and a masked gradient's inf under its mask
      const Variable& m = params.back();
      const std::vector<double> keep = host(masked_impl(m.value(), "test").mask());
      int64_t at = 0;
      while (keep[static_cast<size_t>(at)] == 0.0) ++at;
      m.set_grad(with_values(m.grad(), with_element(values(m.grad()), at, -kInf)));
    }
    std::vector<std::vector<uint8_t>> before;
    for (const Variable& p : params) before.push_back(raw_bytes(values(p.grad())));
    NonfiniteFlag flags(static_cast<int64_t>(params.size()) + 1);
    const DeviceClip c = clip_grad_norm_on_device(params, 1.0, 2.0, &flags);
    std::vector<int> want(params.size() + 1, 0);
    want[2] = want[4] = 1;
    if (dtype == DType::kF32) want[params.size() - 1] = 1;
    EXPECT_EQ(flags_set(flags.value()), want) << dtype_name(dtype);
    EXPECT_TRUE(std::isnan(c.factor.item()));
    EXPECT_FALSE(std::isfinite(c.norm.item()));
    for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(raw_bytes(values(params[i].grad())), before[i]) << i;
  }
  // inf alone: the norm is inf, the factor NaN all the same (skip).
  Variable a(f64({1.0, 2.0}).to(DType::kF32), true, "a");
  a.set_grad(f64({kInf, 1.0}).to(DType::kF32));
  NonfiniteFlag flags(1);
  const DeviceClip c = clip_grad_norm_on_device({a}, 1.0, 2.0, &flags);
  EXPECT_TRUE(std::isinf(c.norm.item()));
  EXPECT_TRUE(std::isnan(c.factor.item()));
  EXPECT_EQ(flags_set(flags.value()), std::vector<int>{1});
}

// clip_grad_norm then step() against the device factor handed to step():
// f32 the same bits (the factor is the f32 coefficient clip_grad_norm's
// mul multiplies by, applied with one rounding); bf16 with f32 master
// weights within the rounding of the clipped bf16 gradient that clipping
// first writes.
TEST(DeviceClipTest, TheFactorInTheStepIsClipThenStep) {
  for (int kind = 0; kind < optim_test::kOptimizerKinds; ++kind) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::vector<Variable> a = make_params(dtype, dtype == DType::kF32, 11);
      const std::vector<Variable> b = copy_params(a);
      auto opt_a = make_optimizer(kind, a, true);
      auto opt_b = make_optimizer(kind, b, true);
      for (uint64_t step = 1; step <= 3; ++step) {
        set_grads(a, step, step == 2 ? 1e-3 : 3.0);  // step 2 is not clipped: factor 1
        set_grads(b, step, step == 2 ? 1e-3 : 3.0);
        const double norm = clip_grad_norm(a, 1.0);
        opt_a->step();
        const DeviceClip c = clip_grad_norm_on_device(b, 1.0);
        EXPECT_NEAR(c.norm.item(), norm, norm * 1e-6);
        opt_b->step(1.0, nullptr, c.factor);
      }
      const std::string what = str_cat(optimizer_kind(kind, true), " ", dtype_name(dtype));
      if (dtype == DType::kF32) {
        EXPECT_EQ(snapshot(*opt_a, a), snapshot(*opt_b, b)) << what;
      } else {
        for (size_t i = 0; i < a.size(); ++i) {
          const Tensor ma = opt_a->state(a[i])->tensors.at(kMasterWeightsState);
          const Tensor mb = opt_b->state(b[i])->tensors.at(kMasterWeightsState);
          EXPECT_LE(max_abs_diff(ma, mb), 2e-3) << what << " " << a[i].name();
        }
      }
    }
  }
}

// A factor that is not finite (the norm was not) leaves every parameter and
// every state tensor as it was: the fused kernels, the 16-bit masters and
// the tensor-op path (masked) alike.
TEST(DeviceClipTest, ANonfiniteNormChangesNoParameterAndNoState) {
  for (int kind = 0; kind < optim_test::kOptimizerKinds; ++kind) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::vector<Variable> params = make_params(dtype, dtype == DType::kF32, 13);
      auto opt = make_optimizer(kind, params, true);
      set_grads(params, 1, 3.0);
      opt->step(1.0, nullptr, clip_grad_norm_on_device(params, 1.0).factor);  // state made
      const auto before = snapshot(*opt, params);
      set_grads(params, 2, 3.0);
      params[1].set_grad(with_element(params[1].grad(), 3, std::nan("")));
      NonfiniteFlag flags(static_cast<int64_t>(params.size()));
      const DeviceClip c = clip_grad_norm_on_device(params, 1.0, 2.0, &flags);
      opt->step(1.0, nullptr, c.factor);
      EXPECT_EQ(snapshot(*opt, params), before) << optimizer_kind(kind, true) << " " << dtype_name(dtype);
      EXPECT_EQ(flags_set(flags.value())[1], 1);
    }
  }
}

TEST(DeviceClipTest, RefusesBadArguments) {
  Variable a(f64({1.0}).to(DType::kF32), true, "a");
  a.set_grad(f64({1.0}).to(DType::kF32));
  EXPECT_THROW(clip_grad_norm_on_device({a}, 1.0, 0.0), Error);
  NonfiniteFlag one(1);
  EXPECT_THROW(clip_grad_norm_on_device({a, Variable(f64({1.0}), true)}, 1.0, 2.0, &one), Error);
  Sgd opt({a}, SgdOptions{0.1});
  EXPECT_THROW(opt.step(1.0, nullptr, f64({1.0, 1.0}).to(DType::kF32)), Error);
  EXPECT_THROW(opt.step(1.0, nullptr, f64({1.0})), Error);  // f64
}

}  // namespace
}  // namespace coppice
