// f32 master weights of bf16/f16 parameters (optim/optimizer.h): updates too
// small for a 16-bit weight accumulate in the master instead of rounding
// away; a bf16 run tracks the f32 run; the state is f32 and the parameter is
// the master rounded; sparse (CSR, BSR) bf16 parameters keep their master
// aligned through RigL mask updates, regrown entries starting at their value;
// the master round-trips through state_io; gradients scaled by a loss scale
// are unscaled by step(grad_scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "optim/adam.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "optim/state_io.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tests/optim/mask_test_util.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::host;
using optim_test::random_tensor;

// The gradient of 0.5 * |p - target|^2 at p, in p's dtype.
Tensor pull_gradient(const Tensor& p, const Tensor& target) { return sub(p.to(DType::kF32), target).to(p.dtype()); }

TEST(MasterWeights, SmallUpdatesAccumulateInsteadOfRoundingAway) {
  // lr * grad = 1e-4 is far below bf16's spacing at 1 (2^-8 below it):
  // without a master every step would round back to 1.
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Variable w(full({4}, 1.0, dtype), true, "w");
    Sgd opt({w}, SgdOptions{1e-4});
    for (int i = 0; i < 100; ++i) {
      w.set_grad(ones({4}, dtype));
      opt.step();
    }
    const ParamState* st = opt.state(w);
    ASSERT_NE(st, nullptr);
    const Tensor& master = st->tensors.at(kMasterWeightsState);
    EXPECT_EQ(master.dtype(), DType::kF32);
    EXPECT_NEAR(host(master)[0], 0.99, 1e-5) << dtype_name(dtype);
    EXPECT_EQ(w.dtype(), dtype);
    // The parameter is the master rounded to its dtype.
    EXPECT_EQ(host(w.value()), host(master.to(dtype))) << dtype_name(dtype);
    EXPECT_NEAR(host(w.value())[0], 0.99, 4e-3) << dtype_name(dtype);
  }
}

enum class Kind { kSgdMomentum, kAdam, kAdamW };

std::unique_ptr<Optimizer> make(Kind kind, const Variable& w) {
  switch (kind) {
    case Kind::kSgdMomentum: {
      SgdOptions o;
      o.lr = 0.01;
      o.momentum = 0.9;
      o.weight_decay = 1e-3;
      return std::make_unique<Sgd>(std::vector<Variable>{w}, o);
    }
    case Kind::kAdam: return std::make_unique<Adam>(std::vector<Variable>{w}, AdamOptions{1e-3});
    case Kind::kAdamW: return std::make_unique<AdamW>(std::vector<Variable>{w}, AdamWOptions{});
  }
  return nullptr;
}

class MasterTracksF32 : public ::testing::TestWithParam<Kind> {};

TEST_P(MasterTracksF32, Bf16RunStaysCloseToTheF32Run) {
  const Tensor start = random_tensor({256}, 1);
  const Tensor target = random_tensor({256}, 2);
  Variable w32(start.clone(), true, "w");
  Variable w16(start.to(DType::kBF16), true, "w");
  auto opt32 = make(GetParam(), w32);
  auto opt16 = make(GetParam(), w16);
  for (int i = 0; i < 300; ++i) {
    w32.set_grad(pull_gradient(w32.value(), target));
    w16.set_grad(pull_gradient(w16.value(), target));
    opt32->step();
    opt16->step();
  }
  const std::vector<double> a = host(w32.value());
  const std::vector<double> m = host(opt16->state(w16)->tensors.at(kMasterWeightsState));
  const std::vector<double> start_h = host(start);
  double max_diff = 0.0, moved = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(a[i] - m[i]));
    moved = std::max(moved, std::abs(a[i] - start_h[i]));
  }
  EXPECT_GT(moved, 0.1);      // the runs went somewhere
  EXPECT_LT(max_diff, 2e-2);  // bf16 gradients (8-bit mantissa) cost a little, not the run
  for (const auto& [key, t] : opt16->state(w16)->tensors) EXPECT_EQ(t.dtype(), DType::kF32) << key;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, MasterTracksF32, ::testing::Values(Kind::kSgdMomentum, Kind::kAdam, Kind::kAdamW));

TEST(MasterWeights, GradScaleIsDividedOutInF32) {
  // An f16 gradient of 1e-6 * 2^16 is representable; 1e-6 itself is not
  // normal in f16. Stepping with grad_scale 2^16 equals an f32 step on 1e-6.
  Variable w(full({3}, 0.5, DType::kF16), true, "w");
  Sgd opt({w}, SgdOptions{1.0});
  w.set_grad(full({3}, 1e-6 * 65536.0, DType::kF16));
  opt.step(65536.0);
  const double master = host(opt.state(w)->tensors.at(kMasterWeightsState))[0];
  EXPECT_NEAR(master, 0.5 - 1e-6, 6e-8);  // f32 spacing at 0.5
  // And an f32 parameter with a scaled gradient.
  Variable v(full({2}, 0.5), true, "v");
  Sgd opt32({v}, SgdOptions{0.5});
  v.set_grad(full({2}, 8.0));
  opt32.step(4.0);
  EXPECT_DOUBLE_EQ(host(v.value())[0], 0.5 - 0.5 * 2.0);
  EXPECT_THROW(opt32.step(0.0), Error);
}

TEST(MasterWeights, StateRoundTripsThroughStateIo) {
  Variable w(random_tensor({8}, 3, DType::kBF16), true, "w");
  Adam opt({w}, AdamOptions{1e-3});
  for (int i = 0; i < 3; ++i) {
    w.set_grad(random_tensor({8}, 10 + i, DType::kBF16));
    opt.step();
  }
  auto bytes = serialize_optimizer_state(opt);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Variable w2(w.value().clone(), true, "w");
  Adam opt2({w2}, AdamOptions{1e-3});
  ASSERT_TRUE(parse_optimizer_state(opt2, *bytes).ok());
  for (const char* key : {kMasterWeightsState, "exp_avg", "exp_avg_sq"}) {
    EXPECT_EQ(host(opt2.state(w2)->tensors.at(key)), host(opt.state(w)->tensors.at(key))) << key;
  }
  // Both go on identically.
  w.set_grad(random_tensor({8}, 20, DType::kBF16));
  w2.set_grad(w.grad().clone());
  opt.step();
  opt2.step();
  EXPECT_EQ(host(w.value()), host(w2.value()));
  // A state saved for an f32 parameter does not load into a bf16 one.
  Variable f(random_tensor({8}, 3), true, "w");
  Adam opt32({f}, AdamOptions{1e-3});
  f.set_grad(random_tensor({8}, 4));
  opt32.step();
  auto bytes32 = serialize_optimizer_state(opt32);
  ASSERT_TRUE(bytes32.ok());
  Variable w3(w.value().clone(), true, "w");
  Adam opt3({w3}, AdamOptions{1e-3});
  const absl::Status s = parse_optimizer_state(opt3, *bytes32);
  EXPECT_FALSE(s.ok());
}

TEST(MasterWeights, MaskedBf16MovesOnlyUnderItsMask) {
  const Tensor dense = random_tensor({6, 5}, 7);
  const Tensor mask = optim_test::random_pattern({6, 5}, 0.5, 8);
  Variable w(sparse_from_mask(dense, mask, "masked"), true, "w");
  w = Variable(with_values(w.value(), values(w.value()).to(DType::kBF16)), true, "w");
  const std::vector<double> before = host(values(w.value()));
  Sgd opt({w}, SgdOptions{1e-4});
  for (int i = 0; i < 50; ++i) {
    w.set_grad(with_values(w.value(), ones(values(w.value()).shape(), DType::kBF16)));
    opt.step();
  }
  const std::vector<double> after = host(values(w.value()));
  const std::vector<double> master = host(opt.state(w)->tensors.at(kMasterWeightsState));
  const std::vector<double> on = host(mask.to(DType::kF64));
  for (size_t i = 0; i < after.size(); ++i) {
    if (on[i] != 0.0) {
      EXPECT_NEAR(master[i], before[i] - 50 * 1e-4, 1e-5) << i;
    } else {
      EXPECT_EQ(after[i], before[i]) << i;
    }
  }
}

// RigL on a bf16 sparse weight with Adam: the master follows the pattern;
// survivors keep theirs bit for bit, regrown entries start at their (zero)
// value, and the parameter stays the master rounded.
void rigl_with_master(const std::string& format) {
  const bool block = format == "bsr";
  const Tensor dense0 = testing_mask::random_dense({16, 16}, 5);
  Tensor start = block ? to_format(mul(dense0, gt(abs(dense0), 0.8).to(DType::kF32)), "bsr", FormatOptions::block(2))
                       : testing_mask::random_param({16, 16}, 64, 1, "csr");
  start = with_values(start, values(start).to(DType::kBF16));
  Variable w(start, true, "fc.weight");
  Adam opt({w}, AdamOptions{1e-2});
  MaskUpdaterConfig c;
  c.start_step = 2;
  c.end_step = 40;
  c.interval = 4;
  c.drop_fraction = 0.3;
  c.growth = "gradient";
  MaskUpdater u(c);
  u.add_layer("fc.weight", w.value());
  u.set_state_remap([&](const std::string&, const Tensor& new_param, const Tensor& keep_from) {
    w = opt.replace_value(w, new_param, keep_from);
  });
  int changes = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const Tensor dense_grad = testing_mask::random_dense({16, 16}, 700 + step).to(DType::kBF16);
    w.set_grad(project_grad(dense_grad, w.value(), "test"));
    opt.step();
    if (!u.is_update_step(step)) continue;
    const std::vector<double> old_master = host(opt.state(w)->tensors.at(kMasterWeightsState));
    const LayerUpdate l =
        u.update(step, {{"fc.weight", {w.value(), GrowthSignal::dense_gradient(dense_grad), Tensor()}}}).layers[0];
    if (!l.changed) continue;
    ++changes;
    EXPECT_EQ(w.value().format(), format);
    EXPECT_EQ(w.dtype(), DType::kBF16);
    const std::vector<int64_t> keep = l.keep_from.to_vector<int64_t>();
    const std::vector<double> master = host(opt.state(w)->tensors.at(kMasterWeightsState));
    const std::vector<double> now = host(values(w.value()));
    ASSERT_EQ(master.size(), keep.size());
    for (size_t j = 0; j < keep.size(); ++j) {
      const double expect = keep[j] < 0 ? now[j] : old_master[static_cast<size_t>(keep[j])];
      EXPECT_EQ(master[j], expect) << format << " slot " << j << " step " << step;
    }
    EXPECT_EQ(host(values(w.value())), host(opt.state(w)->tensors.at(kMasterWeightsState).to(DType::kBF16)));
  }
  EXPECT_GT(changes, 3) << format;
}

TEST(MasterWeights, CsrBf16ThroughRigL) { rigl_with_master("csr"); }
TEST(MasterWeights, BsrBf16ThroughRigL) { rigl_with_master("bsr"); }

}  // namespace
}  // namespace coppice
