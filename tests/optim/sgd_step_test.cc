// The fused SGD step (optim/sgd_step.h) against Sgd's tensor-op path, bit for
// bit: every combination of momentum, dampening, Nesterov and weight decay,
// first step included, in f32 and f64; the values of a CSR parameter; the f32
// master weights of a bf16 parameter, with a loss scale (tensor ops around
// the f32 step) and without (the one-pass mixed step). Sgd takes the fused path (the fused
// step counter) where it applies, and fused_sgd_step declines, touching
// nothing, where it does not.
#include "optim/sgd_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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

using optim_test::random_pattern;
using optim_test::random_tensor;
using optim_test::SgdCase;
using optim_test::values_at;

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

}  // namespace
}  // namespace coppice
