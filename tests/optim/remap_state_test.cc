// Optimizer::remap_state / replace_value / set_value (optim/optimizer.h):
// after a pattern change, survivors keep their state bit for bit, new entries
// start at zero, dropped ones leave, the step count stays; bad keep_from is
// refused. set_value keeps the Variable and gives the bits replace_value does.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::random_tensor;

// A 4x4 CSR with stored entries at flat positions `pos` and values 1..n.
Tensor csr_at(const std::vector<int64_t>& pos, DType dtype = DType::kF32) {
  std::vector<double> dense(16, 0.0), m(16, 0.0);
  for (size_t i = 0; i < pos.size(); ++i) {
    dense[static_cast<size_t>(pos[i])] = static_cast<double>(i + 1);
    m[static_cast<size_t>(pos[i])] = 1.0;
  }
  return sparse_from_mask(from_vector(dense, {4, 4}, TensorOptions(DType::kF64)).to(dtype),
                          ne(from_vector(m, {4, 4}, TensorOptions(DType::kF64)), 0.0), "csr");
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(RemapStateTest, SurvivorsKeepStateBitForBitNewStartAtZero) {
  // Old pattern: positions 1, 4, 6, 9, 15 (slots 0..4). New: 1, 2, 9, 12, 15
  // -> keep_from = {0, -1, 3, -1, 4}: 4 and 6 dropped, 2 and 12 new.
  Variable w(csr_at({1, 4, 6, 9, 15}), true, "w");
  AdamW opt({w}, AdamWOptions{});
  for (int step = 0; step < 5; ++step) {
    w.set_grad(with_values(w.value(), random_tensor({5}, 10 + step)));
    opt.step();
  }
  const ParamState before = *opt.state(w);
  const Tensor new_value = csr_at({1, 2, 9, 12, 15});
  const Tensor keep_from = from_vector(std::vector<int64_t>{0, -1, 3, -1, 4});
  Variable w2 = opt.replace_value(w, new_value, keep_from);
  EXPECT_EQ(w2.name(), "w");
  EXPECT_TRUE(w2.requires_grad());
  EXPECT_TRUE(opt.param_groups()[0].params[0].is_same(w2));
  EXPECT_EQ(opt.state(w), nullptr);  // no longer a parameter
  const ParamState* after = opt.state(w2);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->step, 5);
  EXPECT_EQ(after->pattern_version, pattern_version(new_value));
  ASSERT_EQ(after->tensors.size(), 2u);
  const std::vector<int64_t> keep = {0, -1, 3, -1, 4};
  for (const char* name : {"exp_avg", "exp_avg_sq"}) {
    const std::vector<float> old = before.tensors.at(name).to_vector<float>();
    const std::vector<float> now = after->tensors.at(name).to_vector<float>();
    ASSERT_EQ(now.size(), 5u);
    for (size_t j = 0; j < keep.size(); ++j) {
      if (keep[j] < 0) {
        EXPECT_TRUE(same_bits(now[j], 0.0f)) << name << " slot " << j;
      } else {
        EXPECT_TRUE(same_bits(now[j], old[static_cast<size_t>(keep[j])])) << name << " slot " << j;
        EXPECT_NE(now[j], 0.0f);
      }
    }
  }
  // Training goes on with the new pattern.
  w2.set_grad(with_values(w2.value(), random_tensor({5}, 99)));
  opt.step();
  EXPECT_EQ(opt.state(w2)->step, 6);
}

TEST(RemapStateTest, ChangesNnzAndKeepsMomentum) {
  Variable w(csr_at({0, 5, 10}), true, "w");
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  Sgd opt({w}, o);
  w.set_grad(with_values(w.value(), random_tensor({3}, 1)));
  opt.step();
  const std::vector<float> buf = opt.state(w)->tensors.at("momentum_buffer").to_vector<float>();
  // Grow to 5 entries: 0, 3, 5, 10, 11 -> {0, -1, 1, 2, -1}.
  Variable w2 = opt.replace_value(w, csr_at({0, 3, 5, 10, 11}), from_vector(std::vector<int64_t>{0, -1, 1, 2, -1}));
  const std::vector<float> now = opt.state(w2)->tensors.at("momentum_buffer").to_vector<float>();
  EXPECT_EQ(now, (std::vector<float>{buf[0], 0.0f, buf[1], buf[2], 0.0f}));
  // Shrink to 1 entry.
  Variable w3 = opt.replace_value(w2, csr_at({11}), from_vector(std::vector<int64_t>{4}));
  EXPECT_EQ(opt.state(w3)->tensors.at("momentum_buffer").to_vector<float>(), (std::vector<float>{0.0f}));
}

TEST(RemapStateTest, InPlaceRemapOnTheSameVariable) {
  Variable w(csr_at({2, 7}), true, "w");
  Adam opt({w}, AdamOptions{});
  w.set_grad(with_values(w.value(), random_tensor({2}, 3)));
  opt.step();
  const std::vector<float> m = opt.state(w)->tensors.at("exp_avg").to_vector<float>();
  opt.remap_state(w, from_vector(std::vector<int64_t>{1, 0}));  // a permutation
  EXPECT_EQ(opt.state(w)->tensors.at("exp_avg").to_vector<float>(), (std::vector<float>{m[1], m[0]}));
}

TEST(RemapStateTest, WithoutStateOnlyChecks) {
  Variable w(csr_at({2, 7}), true, "w");
  Adam opt({w}, AdamOptions{});
  Variable w2 = opt.replace_value(w, csr_at({1, 2, 7}), from_vector(std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(opt.state(w2), nullptr);
}

TEST(RemapStateTest, RefusesBadKeepFrom) {
  Variable w(csr_at({2, 7}), true, "w");
  Adam opt({w}, AdamOptions{});
  w.set_grad(with_values(w.value(), random_tensor({2}, 3)));
  opt.step();
  EXPECT_THROW(opt.remap_state(w, from_vector(std::vector<int64_t>{0})), Error);      // size
  EXPECT_THROW(opt.remap_state(w, from_vector(std::vector<int32_t>{0, 1})), Error);   // dtype
  EXPECT_THROW(opt.remap_state(w, from_vector(std::vector<int64_t>{0, 2})), Error);   // out of range
  EXPECT_THROW(opt.remap_state(w, from_vector(std::vector<int64_t>{-2, 0})), Error);  // below -1
  Variable stranger(csr_at({2, 7}), true, "stranger");
  EXPECT_THROW(opt.remap_state(stranger, from_vector(std::vector<int64_t>{0, 1})), Error);  // not a parameter
  // Nothing changed.
  EXPECT_EQ(opt.state(w)->tensors.at("exp_avg").numel(), 2);
}

// set_value (in place, what a mask update does now) against replace_value (a
// new Variable, what it did before): the same state bits after the change and
// the same weights after more steps, for SGD with momentum and AdamW; the
// Variable every holder has is the parameter still, with the new pattern.
TEST(RemapStateTest, SetValueKeepsTheVariableAndGivesReplaceValuesBits) {
  for (const bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adamw" : "sgd");
    auto make = [&](const Variable& w) -> std::unique_ptr<Optimizer> {
      if (adam) return std::make_unique<AdamW>(std::vector<Variable>{w}, AdamWOptions{});
      SgdOptions o;
      o.lr = 0.1;
      o.momentum = 0.9;
      return std::make_unique<Sgd>(std::vector<Variable>{w}, o);
    };
    Variable a(csr_at({1, 4, 6, 9, 15}), true, "w"), b(csr_at({1, 4, 6, 9, 15}), true, "w");
    const Variable held = a;
    std::unique_ptr<Optimizer> oa = make(a), ob = make(b);
    for (int step = 0; step < 3; ++step) {
      a.set_grad(with_values(a.value(), random_tensor({5}, 10 + step)));
      b.set_grad(with_values(b.value(), random_tensor({5}, 10 + step)));
      oa->step();
      ob->step();
    }
    const Tensor keep_from = from_vector(std::vector<int64_t>{0, -1, 3, -1, 4});
    oa->set_value(a, csr_at({1, 2, 9, 12, 15}), keep_from);
    const Variable b2 = ob->replace_value(b, csr_at({1, 2, 9, 12, 15}), keep_from);
    EXPECT_TRUE(oa->param_groups()[0].params[0].is_same(held));
    EXPECT_EQ(to_dense(held.value()).to_vector<float>(), to_dense(b2.value()).to_vector<float>());
    EXPECT_FALSE(held.grad().defined());
    for (const auto& [key, t] : oa->state(held)->tensors) {
      EXPECT_EQ(t.to_vector<float>(), ob->state(b2)->tensors.at(key).to_vector<float>()) << key;
    }
    EXPECT_EQ(oa->state(held)->step, ob->state(b2)->step);
    for (int step = 0; step < 2; ++step) {
      held.set_grad(with_values(held.value(), random_tensor({5}, 20 + step)));
      b2.set_grad(with_values(b2.value(), random_tensor({5}, 20 + step)));
      oa->step();
      ob->step();
    }
    const std::vector<float> va = values(held.value()).to_vector<float>(), vb = values(b2.value()).to_vector<float>();
    ASSERT_EQ(va.size(), vb.size());
    for (size_t i = 0; i < va.size(); ++i) EXPECT_TRUE(same_bits(va[i], vb[i])) << i;
  }
}

TEST(RemapStateTest, SetValueRefusesBeforeChanging) {
  Variable w(csr_at({2, 7}), true, "w");
  Adam opt({w}, AdamOptions{});
  w.set_grad(with_values(w.value(), random_tensor({2}, 3)));
  opt.step();
  const Tensor before = w.value();
  auto refused = [&](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      FAIL() << "expected an error containing " << part;
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what(); }
    EXPECT_TRUE(w.value().is_same(before));
    EXPECT_TRUE(w.grad().defined());
  };
  refused(
      [&] {
        opt.set_value(w, csr_at({1, 2, 7}), from_vector(std::vector<int64_t>{0, 1}));
      },
      "adam.set_value: keep_from for 'w' has 2 entries");
  refused([&] { opt.set_value(w, Tensor(), from_vector(std::vector<int64_t>{0, 1})); }, "is an undefined Tensor");
  Variable stranger(csr_at({2, 7}), true, "stranger");
  EXPECT_THROW(opt.set_value(stranger, csr_at({1, 7}), from_vector(std::vector<int64_t>{-1, 1})), Error);
  refused(
      [&] {
        opt.set_value(w, csr_at({1, 7}, DType::kF64), from_vector(std::vector<int64_t>{-1, 1}));
      },
      "set_value: a value of dtype f64");
}

}  // namespace
}  // namespace coppice
