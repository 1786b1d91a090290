// The fused SGD step (optim/sgd_step.h) against Sgd's tensor-op path, bit for
// bit: every combination of momentum, dampening, Nesterov and weight decay,
// first step included, in f32 and f64; the values of a CSR parameter; the f32
// master weights of a bf16 parameter, with a loss scale (tensor ops around
// the f32 step) and without (the one-pass mixed step). Sgd takes the fused path (the fused
// step counter) where it applies, and fused_sgd_step declines, touching
// nothing, where it does not. The non-finite flag the fused steps take
// (optim/fused_step.h): an inf or NaN gradient element sets exactly its
// slot, finite gradients none, the outputs are the same bits with the flag
// or without; through Optimizer::step(1.0, &flag), one slot per parameter,
// with the tensor-op path (masked) folded in by NonfiniteFlag::add.
#include "optim/sgd_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/adam_step.h"
#include "optim/finite_check.h"
#include "optim/fused_step.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/masked.h"
#include "sparse/sparse_impl.h"
#include "tensor/op_profile.h"
#include "tensor/runtime_options.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

// The op profiler counts the fused steps (op_profile_calls): on for this
// binary.
const ScopedRuntimeOptions kProfiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });

using optim_test::flags_set;
using optim_test::host;
using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::raw_bytes;
using optim_test::SgdCase;
using optim_test::values_at;
using optim_test::with_element;

std::string describe(const SgdCase& c, DType dtype) { return str_cat(c.describe(), " ", dtype_name(dtype)); }

SgdOptions options(const SgdCase& c) { return c.options(0.05); }

// Bits, so that -0.0 vs 0.0 and NaNs would show too.
std::vector<double> bits(const Tensor& t) { return t.to(DType::kF64).to_vector<double>(); }

class SgdStepTest : public ::testing::TestWithParam<SgdCase> {};

// A dense parameter takes the fused step; the same values in the masked
// format (mask all true) take the tensor-op path. 20 steps, the first one
// creating the momentum buffer.
TEST_P(SgdStepTest, FusedEqualsTensorOpsBitForBit) {
  const SgdCase c = GetParam();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor p0 = random_tensor({257}, 1, dtype);
    Variable dense(p0.clone(), true, "dense");
    Variable masked(sparse_masked(p0.clone(), ne(p0, 1e9)), true, "masked");
    Sgd fused(std::vector<Variable>{dense}, options(c)), ops(std::vector<Variable>{masked}, options(c));
    const int64_t calls = op_profile_calls("sgd_step");
    for (int step = 0; step < 20; ++step) {
      const Tensor g = random_tensor({257}, 100 + step, dtype);
      dense.set_grad(g);
      masked.set_grad(with_values(masked.value(), g));
      fused.step();
      ops.step();
      ASSERT_EQ(bits(dense.value()), bits(values(masked.value()))) << describe(c, dtype) << " step " << step;
    }
    EXPECT_EQ(op_profile_calls("sgd_step") - calls, 20) << "the dense parameter took the tensor-op path";
    if (c.momentum != 0.0) {
      EXPECT_EQ(bits(fused.state(dense)->tensors.at("momentum_buffer")),
                bits(ops.state(masked)->tensors.at("momentum_buffer")))
          << describe(c, dtype);
    } else {
      EXPECT_TRUE(fused.state(dense)->tensors.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Options, SgdStepTest,
                         ::testing::Values(SgdCase{0, 0, 0, false}, SgdCase{0, 0, 0.01, false},
                                           SgdCase{0.9, 0, 0, false}, SgdCase{0.9, 0.1, 0, false},
                                           SgdCase{0.9, 0.1, 0.001, false}, SgdCase{0.9, 0, 0, true},
                                           SgdCase{0.9, 0, 0.01, true}, SgdCase{0.3, 0.7, 0.05, false}));

// The values of a CSR parameter take the fused step; a masked parameter with
// the same pattern takes the tensor-op path on dense-sized values. The
// stored values agree bit for bit.
TEST(SgdStepTest, CsrValuesEqualTensorOpsBitForBit) {
  const Shape shape = {24, 40};
  const Tensor keep = random_pattern(shape, 0.3, 2);
  const Tensor init = random_tensor(shape, 3);
  for (const SgdCase& c : {SgdCase{0.9, 0.1, 0.01, false}, SgdCase{0.9, 0, 0.01, true}, SgdCase{0, 0, 0.01, false}}) {
    Variable csr(sparse_from_mask(init, keep, "csr"), true, "csr");
    Variable masked(sparse_masked(init.clone(), keep), true, "masked");
    Sgd fused(std::vector<Variable>{csr}, options(c)), ops(std::vector<Variable>{masked}, options(c));
    const int64_t calls = op_profile_calls("sgd_step");
    for (int step = 0; step < 8; ++step) {
      const Tensor g = random_tensor(shape, 200 + step);
      csr.set_grad(with_values(csr.value(), values_at(csr.value(), g)));
      masked.set_grad(with_values(masked.value(), g));
      fused.step();
      ops.step();
    }
    EXPECT_EQ(op_profile_calls("sgd_step") - calls, 8);
    EXPECT_EQ(bits(values(csr.value())), bits(values_at(csr.value(), values(masked.value()))))
        << describe(c, DType::kF32);
    if (c.momentum != 0.0) {
      EXPECT_EQ(bits(fused.state(csr)->tensors.at("momentum_buffer")),
                bits(values_at(csr.value(), ops.state(masked)->tensors.at("momentum_buffer"))));
    }
  }
}

// A bf16 parameter's step runs on its f32 master weights: fused for a dense
// parameter, tensor ops for a masked one; master, buffer and the rounded
// parameter agree bit for bit.
TEST(SgdStepTest, Bf16MasterWeightsTakeTheFusedStep) {
  const SgdCase c{0.9, 0, 0.01, true};
  const Tensor p0 = random_tensor({129}, 4, DType::kBF16);
  Variable dense(p0.clone(), true, "dense");
  Variable masked(sparse_masked(p0.clone(), ne(p0, 1e9)), true, "masked");
  Sgd fused(std::vector<Variable>{dense}, options(c)), ops(std::vector<Variable>{masked}, options(c));
  const int64_t calls = op_profile_calls("sgd_step");
  for (int step = 0; step < 10; ++step) {
    const Tensor g = random_tensor({129}, 300 + step, DType::kBF16);
    dense.set_grad(g);
    masked.set_grad(with_values(masked.value(), g));
    fused.step(/*grad_scale=*/4.0);
    ops.step(/*grad_scale=*/4.0);
  }
  EXPECT_EQ(op_profile_calls("sgd_step") - calls, 10);
  for (const char* name : {kMasterWeightsState, "momentum_buffer"}) {
    const Tensor& t = fused.state(dense)->tensors.at(name);
    EXPECT_EQ(t.dtype(), DType::kF32) << name;
    EXPECT_EQ(bits(t), bits(ops.state(masked)->tensors.at(name))) << name;
  }
  EXPECT_EQ(dense.dtype(), DType::kBF16);
  EXPECT_EQ(bits(dense.value()), bits(values(masked.value())));
}

// With no loss scale, a 16-bit parameter's step is one pass over the master,
// the buffer and the 16-bit gradient and parameter (sgd_step_mixed): master,
// buffer and the rounded parameter agree bit for bit with the tensor-op
// path (a masked parameter), in bf16 and f16, with and without momentum.
TEST(SgdStepTest, SixteenBitParametersTakeTheMixedStep) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const SgdCase& c : {SgdCase{0.9, 0, 0.01, true}, SgdCase{0.9, 0.1, 0, false}, SgdCase{0, 0, 0.01, false}}) {
      const Tensor p0 = random_tensor({129}, 4, dtype);
      Variable dense(p0.clone(), true, "dense");
      Variable masked(sparse_masked(p0.clone(), ne(p0, 1e9)), true, "masked");
      Sgd fused(std::vector<Variable>{dense}, options(c)), ops(std::vector<Variable>{masked}, options(c));
      const int64_t mixed = op_profile_calls("sgd_step_mixed"), plain = op_profile_calls("sgd_step");
      for (int step = 0; step < 10; ++step) {
        const Tensor g = random_tensor({129}, 300 + step, dtype);
        dense.set_grad(g);
        masked.set_grad(with_values(masked.value(), g));
        fused.step();
        ops.step();
        ASSERT_EQ(bits(dense.value()), bits(values(masked.value()))) << describe(c, dtype) << " step " << step;
      }
      EXPECT_EQ(op_profile_calls("sgd_step_mixed") - mixed, 10) << describe(c, dtype);
      EXPECT_EQ(op_profile_calls("sgd_step"), plain) << describe(c, dtype);
      EXPECT_EQ(dense.dtype(), dtype);
      for (const auto& [name, t] : fused.state(dense)->tensors) {
        EXPECT_EQ(t.dtype(), DType::kF32) << name;
        EXPECT_EQ(bits(t), bits(ops.state(masked)->tensors.at(name))) << describe(c, dtype) << " " << name;
      }
    }
  }
}

// fused_sgd_step_mixed declines, touching nothing, what it does not take.
TEST(SgdStepTest, MixedStepDeclinesTouchingNothing) {
  SgdStepArgs args;
  args.lr = 0.1;
  args.momentum = 0.9;
  const Tensor master = random_tensor({4, 6}, 5), buf = random_tensor({4, 6}, 7);
  const Tensor g16 = random_tensor({4, 6}, 6, DType::kBF16), p16 = master.to(DType::kBF16);
  const std::vector<double> before = bits(master);
  EXPECT_FALSE(fused_sgd_step_mixed(master, g16, Tensor(), p16, args)) << "momentum without a buffer";
  EXPECT_FALSE(fused_sgd_step_mixed(master, g16.to(DType::kF16), buf, p16, args)) << "gradient and parameter differ";
  EXPECT_FALSE(fused_sgd_step_mixed(master, g16.to(DType::kF32), buf, master.clone(), args)) << "f32 gradient";
  EXPECT_FALSE(fused_sgd_step_mixed(master.to(DType::kF64), g16, buf.to(DType::kF64), p16, args)) << "f64 master";
  EXPECT_FALSE(fused_sgd_step_mixed(master, g16.reshape({6, 4}), buf, p16, args)) << "mixed shapes";
  EXPECT_EQ(bits(master), before);
  EXPECT_TRUE(fused_sgd_step_mixed(master, g16, buf, p16, args));
}

// The first step writes g (after weight decay) into the buffer without
// reading it: a buffer full of NaN comes out clean.
TEST(SgdStepTest, FirstStepDoesNotReadTheBuffer) {
  const Tensor p = from_vector<float>({1.0f, -2.0f, 0.5f}, {3}), g = from_vector<float>({0.5f, 0.25f, -1.0f}, {3});
  Tensor buf = full({3}, std::numeric_limits<double>::quiet_NaN(), DType::kF32);
  SgdStepArgs args;
  args.lr = 0.1;
  args.momentum = 0.9;
  args.weight_decay = 0.5;
  args.first = true;
  ASSERT_TRUE(fused_sgd_step(p, g, buf, args));
  // g + 0.5 p = {1, -0.75, -0.75}; p - 0.1 buf.
  EXPECT_EQ(buf.to_vector<float>(), (std::vector<float>{1.0f, -0.75f, -0.75f}));
  const std::vector<float> got = p.to_vector<float>();
  EXPECT_FLOAT_EQ(got[0], 0.9f);
  EXPECT_FLOAT_EQ(got[1], -1.925f);
  EXPECT_FLOAT_EQ(got[2], 0.575f);
}

// Where the fused step does not apply it returns false and writes nothing.
TEST(SgdStepTest, DeclinesTouchingNothing) {
  SgdStepArgs args;
  args.lr = 0.1;
  args.momentum = 0.9;
  const Tensor p = random_tensor({4, 6}, 5), g = random_tensor({4, 6}, 6), buf = random_tensor({4, 6}, 7);
  const std::vector<double> p_before = bits(p), buf_before = bits(buf);
  const int64_t calls = op_profile_calls("sgd_step");
  EXPECT_FALSE(fused_sgd_step(p, g, Tensor(), args)) << "momentum without a buffer";
  EXPECT_FALSE(fused_sgd_step(p, g.to(DType::kF64), buf, args)) << "mixed dtypes";
  EXPECT_FALSE(fused_sgd_step(p, g, buf.reshape({6, 4}), args)) << "mixed shapes";
  EXPECT_FALSE(fused_sgd_step(p, g.transpose(0, 1).contiguous().transpose(0, 1), buf, args)) << "strided g";
  const Tensor p16 = p.to(DType::kBF16);
  EXPECT_FALSE(fused_sgd_step(p16, g.to(DType::kBF16), buf.to(DType::kBF16), args)) << "bf16";
  EXPECT_EQ(bits(p), p_before);
  EXPECT_EQ(bits(buf), buf_before);
  EXPECT_EQ(op_profile_calls("sgd_step"), calls);
  args.momentum = 0.0;
  EXPECT_TRUE(fused_sgd_step(p, g, Tensor(), args)) << "no momentum needs no buffer";
}

// ---- the non-finite flag -------------------------------------------------

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// What a case's gradient holds: finite, or an inf, -inf or NaN at `at`.
struct Poison {
  const char* name;
  double value;  // 0: finite
};
const Poison kPoisons[] = {{"finite", 0.0}, {"inf", kInf}, {"-inf", -kInf}, {"nan", kNaN}};

// fused_sgd_step with flag slot 1 of 3 and without: the same bits in p and
// buf; slot 1 set exactly when the gradient is not finite, slots 0 and 2
// never. Each element position is tried at the start, the middle and the end.
TEST(SgdStepNonfiniteTest, FlagSetsExactlyItsSlotAndChangesNoBits) {
  const SgdCase cases[] = {{0, 0, 0, false}, {0.9, 0, 0.01, true}, {0.9, 0.1, 0.001, false}};
  const int64_t n = 1000;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const SgdCase& c : cases) {
      for (const Poison& poison : kPoisons) {
        for (int64_t at : {int64_t{0}, int64_t{517}, n - 1}) {
          for (bool first : {true, false}) {
            const std::string what =
                str_cat(describe(c, dtype), " ", poison.name, " at ", at, first ? " first step" : "");
            const Tensor g0 = random_tensor({n}, 5, dtype);
            const Tensor g = poison.value == 0.0 ? g0 : with_element(g0, at, poison.value);
            const Tensor p0 = random_tensor({n}, 6, dtype), b0 = random_tensor({n}, 7, dtype);
            Tensor pa = p0.clone(), ba = b0.clone(), pb = p0.clone(), bb = b0.clone();
            const bool has_buf = c.momentum != 0.0;
            const SgdStepArgs args = c.step_args(0.05, first);
            Tensor flags = zeros({3});
            ASSERT_TRUE(fused_sgd_step(pa, g, has_buf ? ba : Tensor(), args));
            ASSERT_TRUE(fused_sgd_step(pb, g, has_buf ? bb : Tensor(), args, flags.select(0, 1)));
            EXPECT_EQ(raw_bytes(pb), raw_bytes(pa)) << what;
            EXPECT_EQ(raw_bytes(bb), raw_bytes(ba)) << what;
            const int set = poison.value == 0.0 ? 0 : 1;
            EXPECT_EQ(flags_set(flags), (std::vector<int>{0, set, 0})) << what;
            if (set) { EXPECT_TRUE(std::isnan(host(flags)[1])) << what; }
          }
        }
      }
    }
  }
}

// The mixed step (bf16, f16): the 16-bit gradient's inf or NaN sets the
// flag; master, buffer and the 16-bit parameter are the same bits either way.
TEST(SgdStepNonfiniteTest, MixedStepFlagsSixteenBitGradients) {
  const int64_t n = 777;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const SgdCase& c : {SgdCase{0, 0, 0, false}, SgdCase{0.9, 0, 0.01, true}}) {
      for (const Poison& poison : kPoisons) {
        const std::string what = str_cat(describe(c, dtype), " ", poison.name);
        const Tensor g0 = random_tensor({n}, 8, dtype);
        const Tensor g = poison.value == 0.0 ? g0 : with_element(g0, 400, poison.value);
        const Tensor m0 = random_tensor({n}, 9), b0 = random_tensor({n}, 10);
        Tensor ma = m0.clone(), ba = b0.clone(), pa = m0.to(dtype);
        Tensor mb = m0.clone(), bb = b0.clone(), pb = m0.to(dtype);
        const bool has_buf = c.momentum != 0.0;
        const SgdStepArgs args = c.step_args(0.05, false);
        Tensor flags = zeros({2});
        ASSERT_TRUE(fused_sgd_step_mixed(ma, g, has_buf ? ba : Tensor(), pa, args));
        ASSERT_TRUE(fused_sgd_step_mixed(mb, g, has_buf ? bb : Tensor(), pb, args, flags.select(0, 0)));
        EXPECT_EQ(raw_bytes(mb), raw_bytes(ma)) << what;
        EXPECT_EQ(raw_bytes(bb), raw_bytes(ba)) << what;
        EXPECT_EQ(raw_bytes(pb), raw_bytes(pa)) << what;
        EXPECT_EQ(flags_set(flags), (std::vector<int>{poison.value == 0.0 ? 0 : 1, 0})) << what;
      }
    }
  }
}

// The fused Adam/AdamW step takes the flag the same way.
TEST(SgdStepNonfiniteTest, AdamStepFlagsItsGradient) {
  const int64_t n = 1000;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (bool decoupled : {false, true}) {
      for (const Poison& poison : kPoisons) {
        const std::string what = str_cat(dtype_name(dtype), decoupled ? " adamw " : " adam ", poison.name);
        AdamStepArgs args;
        args.lr = 0.01;
        args.weight_decay = 0.1;
        args.decoupled = decoupled;
        args.step = 3;
        const Tensor g0 = random_tensor({n}, 11, dtype);
        const Tensor g = poison.value == 0.0 ? g0 : with_element(g0, n - 1, poison.value);
        const Tensor p0 = random_tensor({n}, 12, dtype), m0 = random_tensor({n}, 13, dtype);
        const Tensor v0 = abs(random_tensor({n}, 14, dtype));
        Tensor pa = p0.clone(), ma = m0.clone(), va = v0.clone(), pb = p0.clone(), mb = m0.clone(), vb = v0.clone();
        Tensor flags = zeros({2});
        ASSERT_TRUE(fused_adam_step(pa, g, ma, va, args));
        ASSERT_TRUE(fused_adam_step(pb, g, mb, vb, args, flags.select(0, 1)));
        EXPECT_EQ(raw_bytes(pb), raw_bytes(pa)) << what;
        EXPECT_EQ(raw_bytes(mb), raw_bytes(ma)) << what;
        EXPECT_EQ(raw_bytes(vb), raw_bytes(va)) << what;
        EXPECT_EQ(flags_set(flags), (std::vector<int>{0, poison.value == 0.0 ? 0 : 1})) << what;
      }
    }
  }
}

// A flag of the wrong kind is refused, naming the op.
TEST(SgdStepNonfiniteTest, RefusesAFlagThatIsNotOneF32Element) {
  Tensor p = random_tensor({8}, 1), g = random_tensor({8}, 2);
  const SgdStepArgs args = SgdCase{0, 0, 0, false}.step_args(0.1, true);
  EXPECT_THROW(fused_sgd_step(p, g, Tensor(), args, zeros({2})), Error);
  EXPECT_THROW(fused_sgd_step(p, g, Tensor(), args, zeros({}, TensorOptions(DType::kF64))), Error);
}

// The parameters of an optimizer step, one of each path: dense f32 (fused
// sgd_step / adam_step), CSR (fused, on its values), masked (the tensor-op
// path: folded by NonfiniteFlag::add), bf16 (the mixed step for SGD; f32
// master weights through the fused step for Adam) and one without a
// gradient. Stepped with flags (one slot per parameter and a spare) and,
// as twins, without.
struct Params {
  std::vector<Variable> vars;
  explicit Params(uint64_t seed) {
    const Shape shape = {12, 20};
    const Tensor keep = random_pattern(shape, 0.4, seed);
    vars.emplace_back(random_tensor(shape, seed + 1), true, "dense");
    vars.emplace_back(sparse_from_mask(random_tensor(shape, seed + 2), keep, "csr"), true, "csr");
    vars.emplace_back(sparse_masked(random_tensor(shape, seed + 3), keep), true, "masked");
    vars.emplace_back(random_tensor(shape, seed + 4, DType::kBF16), true, "bf16");
    vars.emplace_back(random_tensor(shape, seed + 5), true, "no_grad");
  }
  // Gradients for every parameter but the last; `poisoned` (or -1) gets an
  // inf or NaN in a stored value.
  void set_grads(uint64_t seed, int poisoned, double bad) const {
    for (size_t i = 0; i + 1 < vars.size(); ++i) {
      const Tensor& v = vars[i].value();
      Tensor g = random_tensor(values(v).shape(), seed + i, values(v).dtype());
      if (static_cast<int>(i) == poisoned) {
        int64_t at = 7;
        if (v.layout() == Layout::kMasked) {  // a mask-true slot: the check reads those
          const std::vector<double> mask = host(masked_impl(v, "test").mask());
          while (mask[static_cast<size_t>(at)] == 0.0) ++at;
        }
        g = with_element(g, at, bad);
      }
      vars[i].set_grad(with_values(v, g));
    }
  }
};

template <typename Make>
void check_optimizer_flags(const char* name, Make make) {
  for (int poisoned = -1; poisoned < 4; ++poisoned) {
    for (double bad : {kInf, kNaN}) {
      const std::string what = str_cat(name, " poisoned ", poisoned, " with ", bad);
      Params with(40), without(40);
      auto a = make(with.vars), b = make(without.vars);
      std::vector<int> expected(6, 0);
      if (poisoned >= 0) expected[static_cast<size_t>(poisoned)] = 1;
      for (int step = 0; step < 3; ++step) {
        // Poisoned on the last step only: the outputs stay comparable.
        const int p = step == 2 ? poisoned : -1;
        with.set_grads(50 + step, p, bad);
        without.set_grads(50 + step, p, bad);
        NonfiniteFlag flags(6);
        const int64_t checks = op_profile_calls("nonfinite_flag");
        a->step(1.0, &flags);
        b->step();
        // Only the masked parameter's gradient is read by a pass of its own.
        EXPECT_EQ(op_profile_calls("nonfinite_flag") - checks, 1) << what;
        EXPECT_EQ(flags_set(flags.value()), step == 2 ? expected : std::vector<int>(6, 0)) << what << " step " << step;
        for (size_t i = 0; i < with.vars.size(); ++i) {
          EXPECT_EQ(raw_bytes(values(with.vars[i].value())), raw_bytes(values(without.vars[i].value())))
              << what << " " << with.vars[i].name();
        }
      }
    }
  }
}

TEST(SgdStepNonfiniteTest, OptimizerStepSetsEachParametersSlot) {
  check_optimizer_flags("sgd", [](const std::vector<Variable>& v) {
    return std::make_unique<Sgd>(v, SgdCase{0.9, 0, 0.01, true}.options(0.05));
  });
  check_optimizer_flags("sgd without momentum", [](const std::vector<Variable>& v) {
    return std::make_unique<Sgd>(v, SgdCase{0, 0, 0, false}.options(0.05));
  });
  check_optimizer_flags("adam", [](const std::vector<Variable>& v) {
    AdamOptions o;
    o.weight_decay = 0.01;
    return std::make_unique<Adam>(v, o);
  });
  check_optimizer_flags("adamw",
                        [](const std::vector<Variable>& v) { return std::make_unique<AdamW>(v, AdamWOptions{}); });
}

// Slots follow the parameters over groups, in param_groups() order; a
// gradient divided by a loss scale is still checked (the f32 step, fused).
TEST(SgdStepNonfiniteTest, SlotsRunOverGroupsAndALossScale) {
  Params ps(60);
  std::vector<ParamGroup> groups = {{{ps.vars[0], ps.vars[1]}, {}}, {{ps.vars[2], ps.vars[3], ps.vars[4]}, {}}};
  Sgd opt(groups, SgdCase{0.9, 0, 0, false}.options(0.05));
  for (int poisoned = 0; poisoned < 4; ++poisoned) {
    ps.set_grads(70, poisoned, kInf);
    NonfiniteFlag flags(5);
    opt.step(poisoned == 3 ? 256.0 : 1.0, &flags);
    std::vector<int> expected(5, 0);
    expected[static_cast<size_t>(poisoned)] = 1;
    EXPECT_EQ(flags_set(flags.value()), expected) << poisoned;
  }
  NonfiniteFlag too_few(4);
  EXPECT_THROW(opt.step(1.0, &too_few), Error);
}

}  // namespace
}  // namespace coppice
