// Optimizers over sparse parameters (optim/optimizer.h): the update lands in
// the parameter's own values; over 100 steps a CSR parameter equals the same
// parameter held dense under a fixed pattern (gradient multiplied by the
// pattern, parameter re-zeroed off it) for SGD with momentum, Adam and AdamW;
// every format matches the dense reference; masked parameters move only
// under their mask; mismatched gradients are clear errors.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "autograd/autograd.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/masked.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::random_pattern;
using optim_test::random_tensor;

enum class Kind { kSgdMomentum, kSgdNesterov, kAdam, kAdamW };

std::unique_ptr<Optimizer> make(Kind kind, const Variable& w) {
  switch (kind) {
    case Kind::kSgdMomentum: {
      SgdOptions o;
      o.lr = 0.05;
      o.momentum = 0.9;
      o.dampening = 0.1;
      o.weight_decay = 1e-3;
      return std::make_unique<Sgd>(std::vector<Variable>{w}, o);
    }
    case Kind::kSgdNesterov: {
      SgdOptions o;
      o.lr = 0.05;
      o.momentum = 0.9;
      o.nesterov = true;
      return std::make_unique<Sgd>(std::vector<Variable>{w}, o);
    }
    case Kind::kAdam: {
      AdamOptions o;
      o.lr = 0.01;
      o.weight_decay = 1e-2;
      return std::make_unique<Adam>(std::vector<Variable>{w}, o);
    }
    case Kind::kAdamW: {
      AdamWOptions o;
      o.lr = 0.01;
      o.weight_decay = 0.1;
      return std::make_unique<AdamW>(std::vector<Variable>{w}, o);
    }
  }
  return nullptr;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSgdMomentum: return "sgd_momentum";
    case Kind::kSgdNesterov: return "sgd_nesterov";
    case Kind::kAdam: return "adam";
    case Kind::kAdamW: return "adamw";
  }
  return "?";
}

class EquivalenceTest : public ::testing::TestWithParam<Kind> {};

// "Over 100 steps on random data, <optimizer> on a CSR parameter equals the
// same parameter held dense under a fixed mask, to 1e-6."
TEST_P(EquivalenceTest, CsrEqualsDenseUnderFixedPatternFor100Steps) {
  const Shape shape = {24, 40};
  const Tensor keep = random_pattern(shape, 0.2, 7);
  const Tensor keepf = keep.to(DType::kF32);
  const Tensor init = mul(random_tensor(shape, 8), keepf);
  Variable sparse(sparse_from_mask(init, keep, "csr"), true, "w");
  Variable dense(init.clone(), true, "w");
  std::unique_ptr<Optimizer> so = make(GetParam(), sparse), dopt = make(GetParam(), dense);
  for (int step = 0; step < 100; ++step) {
    const Tensor g = random_tensor(shape, 1000 + step);
    sparse.set_grad(with_values(sparse.value(), values(sparse_from_mask(g, keep, "csr"))));
    dense.set_grad(mul(g, keepf));
    so->step();
    dopt->step();
    values(dense.value()).copy_(mul(dense.value(), keepf));  // re-masked
  }
  const Tensor at_pattern = values(sparse_from_mask(dense.value(), keep, "csr"));
  EXPECT_LE(max_abs_diff(values(sparse.value()), at_pattern), 1e-6);
  EXPECT_EQ(nnz(sparse.value()), at_pattern.numel());
  // The state is nnz-sized.
  for (const auto& [name, t] : so->state(sparse)->tensors) EXPECT_EQ(t.numel(), nnz(sparse.value())) << name;
  EXPECT_EQ(so->state(sparse)->step, 100);
  // Something moved.
  EXPECT_GT(max_abs_diff(to_dense(sparse.value()), init), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, EquivalenceTest,
                         ::testing::Values(Kind::kSgdMomentum, Kind::kSgdNesterov, Kind::kAdam, Kind::kAdamW),
                         [](const auto& info) { return std::string(kind_name(info.param)); });

struct FormatCase {
  std::string format;
  FormatOptions options;
};

class FormatTest : public ::testing::TestWithParam<FormatCase> {};

// Every format: 10 steps of each optimizer match the dense reference at the
// stored positions, and stay zero elsewhere.
TEST_P(FormatTest, EveryFormatMatchesDenseReference) {
  const FormatCase c = GetParam();
  const Shape shape = {8, 16};
  // 2:4 per row group of 4 columns, in 4x4 blocks where a block format needs them.
  Tensor keep = random_pattern(shape, 0.4, 3);
  if (c.format == "nm") {
    std::vector<double> k(128, 0.0);
    for (int64_t i = 0; i < 128; ++i) k[static_cast<size_t>(i)] = (i % 4 == (i / 16) % 4 || i % 4 == 3) ? 1.0 : 0.0;
    keep = ne(from_vector(k, shape, TensorOptions(DType::kF64)), 0.0);
  }
  const Tensor init = mul(random_tensor(shape, 4, DType::kF64), keep.to(DType::kF64));
  for (Kind kind : {Kind::kSgdMomentum, Kind::kAdam, Kind::kAdamW}) {
    const Tensor sp = c.format == "masked" ? sparse_masked(init.clone(), keep)
                                           : to_format(sparse_from_mask(init, keep, "coo"), c.format, c.options);
    const Tensor stored = ne(to_dense(with_values(sp, ones_like(values(sp)))), 0.0).to(DType::kF64);
    Variable sparse(sp, true, "w");
    Variable dense(mul(init, stored), true, "w");
    std::unique_ptr<Optimizer> so = make(kind, sparse), dopt = make(kind, dense);
    for (int step = 0; step < 10; ++step) {
      const Tensor g = random_tensor(shape, 50 + step, DType::kF64);
      // The gradient at the stored positions, in the parameter's pattern.
      const Tensor gs = with_values(sp, optim_test::values_at(sp, g));
      sparse.set_grad(gs);
      dense.set_grad(mul(g, stored));
      so->step();
      dopt->step();
      values(dense.value()).copy_(mul(dense.value(), stored));
    }
    EXPECT_LE(max_abs_diff(to_dense(sparse.value()), dense.value()), 1e-12) << c.format << " " << kind_name(kind);
    EXPECT_EQ(pattern_version(sparse.value()), pattern_version(sp));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, FormatTest,
                         ::testing::Values(FormatCase{"csr", {}}, FormatCase{"csc", {}}, FormatCase{"coo", {}},
                                           FormatCase{"bsr", FormatOptions::block(4, 4)},
                                           FormatCase{"blocked_ell", FormatOptions::block(4)},
                                           FormatCase{"nm", FormatOptions::nm(2, 4)}, FormatCase{"masked", {}}),
                         [](const auto& info) { return info.param.format; });

TEST(SparseParamTest, UpdateIsVisibleThroughEveryHandle) {
  const Tensor keep = random_pattern({4, 4}, 0.5, 1);
  const Tensor w0 = sparse_from_mask(random_tensor({4, 4}, 2), keep, "csr");
  Variable w(w0, true, "w");
  const Tensor handle = w.value();
  const std::vector<float> before = values(w0).to_vector<float>();
  Sgd opt({w}, SgdOptions{0.5});
  w.set_grad(with_values(w.value(), ones_like(values(w.value()))));
  opt.step();
  const std::vector<float> after = values(handle).to_vector<float>();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5f);
  EXPECT_TRUE(w.value().is_same(w0));
}

TEST(SparseParamTest, MaskedMovesOnlyUnderItsMask) {
  const Tensor keep = random_pattern({6, 6}, 0.5, 11);
  const Tensor v0 = random_tensor({6, 6}, 12);  // values under a false mask too
  Variable w(sparse_masked(v0.clone(), keep), true, "w");
  Adam opt({w}, AdamOptions{});
  for (int step = 0; step < 3; ++step) {
    w.set_grad(with_values(w.value(), random_tensor({6, 6}, 13 + step)));  // garbage off the mask
    opt.step();
  }
  const std::vector<float> got = values(w.value()).to_vector<float>(), orig = v0.to_vector<float>();
  const std::vector<float> mask = keep.to(DType::kF32).to_vector<float>();
  const std::vector<float> m = opt.state(w)->tensors.at("exp_avg").to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    if (mask[i] == 0.0f) {
      EXPECT_EQ(got[i], orig[i]) << i;
      EXPECT_EQ(m[i], 0.0f) << i;
    } else {
      EXPECT_NE(got[i], orig[i]) << i;
    }
  }
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) { return e.what(); }
  return "(no error)";
}

TEST(SparseParamTest, OtherPatternVersionIsAClearError) {
  const Tensor keep = random_pattern({4, 4}, 0.5, 1);
  const Tensor init = random_tensor({4, 4}, 2);
  Variable w(sparse_from_mask(init, keep, "csr"), true, "fc.weight");
  Adam opt({w}, AdamOptions{});
  // The same positions under a fresh pattern version (as after a mask update):
  // a gradient of it never reaches the optimizer (autograd refuses it) ...
  const Tensor other = sparse_from_mask(init, keep, "csr");
  ASSERT_NE(pattern_version(other), pattern_version(w.value()));
  EXPECT_THROW(w.set_grad(other), Error);
  // ... and state aligned with another version than the parameter's is refused by step().
  w.set_grad(with_values(w.value(), ones_like(values(w.value()))));
  opt.step();
  opt.mutable_state(w).pattern_version = pattern_version(other);
  const std::string msg = message_of([&] { opt.step(); });
  EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("remap_state"), std::string::npos) << msg;
}

TEST(SparseParamTest, WrongDtypeIsAClearError) {
  Variable w(random_tensor({3}, 1, DType::kF64), true, "bias");
  Sgd opt({w}, SgdOptions{});
  w.set_grad(random_tensor({3}, 2, DType::kF32));
  const std::string msg = message_of([&] { opt.step(); });
  EXPECT_NE(msg.find("'bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;
}

// The gradient autograd accumulates into a CSR weight arrives in its
// pattern; Adam trains it in place and the loss falls.
TEST(SparseParamTest, TrainsACsrWeightThroughAutograd) {
  const Tensor keep = random_pattern({8, 8}, 0.4, 21);
  const Tensor target = sparse_from_mask(random_tensor({8, 8}, 22), keep, "csr");
  const Tensor x = random_tensor({8, 16}, 23), y = matmul(target, x);
  Variable w(sparse_from_mask(zeros({8, 8}), keep, "csr"), true, "w");
  const uint64_t version = pattern_version(w.value());
  AdamOptions o;
  o.lr = 0.05;
  Adam opt({w}, o);
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    Variable diff = sub(matmul(w, Variable(x)), Variable(y));
    Variable loss = mean(mul(diff, diff));
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    ASSERT_EQ(w.grad().layout(), Layout::kCsr);
    opt.step();
  }
  EXPECT_EQ(pattern_version(w.value()), version);
  EXPECT_LT(last, 0.05 * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace coppice
