#include "autograd/variable.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <type_traits>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;

static_assert(!std::is_convertible_v<Tensor, Variable>, "Variables must not be made implicitly from Tensors");

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(VariableTest, LeafBasics) {
  Variable x(from_vector<double>({1, 2, 3}), true, "x");
  EXPECT_TRUE(x.defined());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_EQ(x.name(), "x");
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(x.shape(), (Shape{3}));
  Variable copy = x;
  EXPECT_TRUE(copy.is_same(x));
  EXPECT_FALSE(Variable().defined());
  EXPECT_THROW(Variable().value(), Error);
}

TEST(VariableTest, ResultsPointAtTheirNode) {
  Variable x = param(randn64({3}));
  Variable y = exp(x);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "ExpBackward");
  EXPECT_EQ(y.grad_fn()->next_edges().size(), 1u);
  Variable c(randn64({3}));
  Variable z = exp(c);
  EXPECT_TRUE(z.is_leaf());
  EXPECT_FALSE(z.requires_grad());
}

TEST(VariableTest, OnlyFloatingLeavesRequireGrad) {
  try {
    Variable(from_vector<int64_t>({1, 2}), true, "ids");
    FAIL() << "expected an error";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("'ids' holds i64"), std::string::npos) << e.what(); }
  Variable x = param(randn64({2}));
  Variable y = mul(x, 2.0);
  EXPECT_THROW(y.set_requires_grad(false), Error);
}

TEST(VariableTest, GradientAccumulatesOverTwoBackwardCalls) {
  Variable x = param(from_vector<double>({1, 2, 3}));
  sum(mul(x, x)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4, 6}));
  sum(mul(x, 3.0)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5, 7, 9}));
  x.zero_grad();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0, 0}));
  sum(x).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 1}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
}

TEST(VariableTest, GradDoesNotAliasTheSeed) {
  Variable x = param(from_vector<double>({1, 2}));
  Tensor seed = from_vector<double>({5, 6});
  add(x, 1.0).backward(seed);
  Tensor g = x.grad();
  g.fill_(0.0);
  EXPECT_EQ(values(seed), (std::vector<double>{5, 6}));
}

TEST(VariableTest, BackwardWithSeed) {
  Variable x = param(from_vector<double>({1, 2, 3}));
  Variable y = mul(x, x);
  y.backward(from_vector<double>({1, 0, 2}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 0, 12}));
}

TEST(VariableTest, BackwardOnNonScalarWithoutSeedFails) {
  Variable x = param(randn64({2, 3}), "x");
  Variable y = mul(x, 2.0);
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("has shape [2, 3] (6 elements)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs a one-element value"), std::string::npos) << msg;
  }
  // A one-element, non-0-d value is fine.
  Variable s = sum(x, {0, 1}, /*keepdim=*/true);
  s.backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(6, 1.0));
}

TEST(VariableTest, BackwardWithWrongSeedShapeFails) {
  Variable x = param(randn64({2, 3}));
  EXPECT_THROW(mul(x, 2.0).backward(ones({3}, DType::kF64)), Error);
}

TEST(VariableTest, BackwardOnVariableWithoutGradFails) {
  Variable c(randn64({}), false, "c");
  try {
    c.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'c' does not require grad"), std::string::npos) << e.what();
  }
}

TEST(VariableTest, SecondBackwardWithoutRetainGraphFails) {
  Variable x = param(randn64({3}));
  Variable loss = sum(exp(x));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("second time"), std::string::npos) << msg;
    EXPECT_NE(msg.find("retain_graph=true"), std::string::npos) << msg;
  }
}

TEST(VariableTest, RetainGraphAllowsASecondBackward) {
  Variable x = param(from_vector<double>({0.5, -1.0}));
  Variable loss = sum(mul(x, x));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2.0, -4.0}));
  loss.backward();  // the last one may free the graph
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3.0, -6.0}));
  EXPECT_THROW(loss.backward(), Error);
}

TEST(VariableTest, Detach) {
  Variable x = param(from_vector<double>({1, 2}), "x");
  Variable y = mul(x, 3.0);
  Variable d = y.detach();
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.value().is_same(y.value()));
  // Gradient flows through y, but not through the detached copy.
  sum(add(mul(y, 1.0), mul(d, x))).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3 + 3, 3 + 6}));
}

TEST(VariableTest, NoGradGuard) {
  Variable x = param(randn64({3}));
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradMode::is_enabled());
    Variable y = exp(x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    {
      NoGradGuard nested;
      EXPECT_FALSE(GradMode::is_enabled());
    }
    EXPECT_FALSE(GradMode::is_enabled());
    // Other threads keep recording.
    bool other = false;
    std::thread([&] { other = GradMode::is_enabled() && exp(x).requires_grad(); }).join();
    EXPECT_TRUE(other);
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE(exp(x).requires_grad());
}

TEST(VariableTest, HookReplacesLeafGradient) {
  Variable x = param(from_vector<double>({1, 2, 3}), "x");
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 10.0);
  });
  sum(mul(x, x)).backward();
  EXPECT_EQ(seen, (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{20, 40, 60}));
}

TEST(VariableTest, HookOnNonLeafChangesWhatFlowsOn) {
  Variable x = param(from_vector<double>({1, 2}));
  Variable y = mul(x, 2.0);
  std::vector<double> seen;
  HookId id = y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return zeros_like(g);  // e.g. a sparsifier that drops everything
  });
  // y is used twice: the hook sees the total.
  sum(add(y, mul(y, 3.0))).backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(seen, (std::vector<double>{4, 4}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0}));
  EXPECT_TRUE(y.remove_hook(id));
  EXPECT_FALSE(y.remove_hook(id));
  x.set_grad(Tensor());
  sum(add(y, mul(y, 3.0))).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{8, 8}));
}

TEST(VariableTest, HookReturningUndefinedKeepsTheGradient) {
  Variable x = param(from_vector<double>({1, 2}));
  int calls = 0;
  x.register_hook([&](const Tensor&) {
    ++calls;
    return Tensor();
  });
  sum(mul(x, 2.0)).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2}));
}

TEST(VariableTest, HookMustKeepTheShape) {
  Variable x = param(from_vector<double>({1, 2}), "w");
  x.register_hook([](const Tensor&) { return ones({3}, DType::kF64); });
  try {
    sum(x).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what(); }
}

// A post-accumulate hook sees grad() once the pass has accumulated it: the
// total over the pass's uses plus what the leaf held before, once a pass.
TEST(VariableTest, PostAccumulateHookSeesTheAccumulatedGradient) {
  Variable x = param(from_vector<double>({1, 2}), "x");
  std::vector<std::vector<double>> seen;
  HookId id = x.register_post_accumulate_hook([&](const Tensor& g) {
    EXPECT_EQ(g.data_ptr(), x.grad().data_ptr());
    seen.push_back(g.to_vector<double>());
  });
  // The pre-hook runs first and may replace the gradient.
  x.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  sum(add(mul(x, 2.0), mul(x, 3.0))).backward();
  sum(mul(x, 1.0)).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<double>{50, 50}));
  EXPECT_EQ(seen[1], (std::vector<double>{60, 60}));
  EXPECT_TRUE(x.remove_hook(id));
  EXPECT_FALSE(x.remove_hook(id));
  sum(x).backward();
  EXPECT_EQ(seen.size(), 2u);
}

TEST(VariableTest, PostAccumulateHookNeedsALeafThatRequiresGrad) {
  auto message = [](const Variable& v, AccumulatedGradHook hook) {
    try {
      v.register_post_accumulate_hook(std::move(hook));
    } catch (const Error& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  auto noop = [](const Tensor&) {};
  EXPECT_NE(message(Variable(randn64({2}), false, "c"), noop).find("'c' does not require grad"), std::string::npos);
  EXPECT_NE(message(mul(param(randn64({2})), 2.0), noop).find("is not a leaf"), std::string::npos);
  EXPECT_NE(message(param(randn64({2})), nullptr).find("empty hook"), std::string::npos);
}

TEST(VariableTest, HookNeedsRequiresGrad) {
  Variable c(randn64({2}));
  EXPECT_THROW(c.register_hook([](const Tensor& g) { return g; }), Error);
}

// set_value (a mask update's new pattern, in place): every handle sees the
// new value, the gradient is cleared, name, requires_grad and hooks stay; a
// graph recorded before it refuses to backward into the variable, a new one
// accumulates as usual.
TEST(VariableTest, SetValueKeepsTheVariable) {
  Variable w = param(from_vector<double>({1, 2, 3}), "w");
  const Variable held = w;  // another holder (a model's slot, an optimizer's group)
  int hook_calls = 0;
  w.register_hook([&](const Tensor&) {
    ++hook_calls;
    return Tensor();
  });
  const Variable stale = sum(mul(w, 2.0));  // recorded under the old value
  sum(mul(w, 3.0)).backward();
  ASSERT_TRUE(w.grad().defined());
  const void* id = w.identity();

  w.set_value(from_vector<double>({10, 20, 30}));
  EXPECT_EQ(held.identity(), id);
  EXPECT_TRUE(held.is_same(w));
  EXPECT_EQ(values(held.value()), (std::vector<double>{10, 20, 30}));
  EXPECT_FALSE(held.grad().defined());
  EXPECT_EQ(held.name(), "w");
  EXPECT_TRUE(held.requires_grad());

  try {
    stale.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w' was given a new value"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(w.grad().defined());
  sum(mul(w, w)).backward();  // a new graph: d/dw of w . w at the new value
  EXPECT_EQ(values(held.grad()), (std::vector<double>{20, 40, 60}));
  EXPECT_EQ(hook_calls, 2);  // the hook stayed
}

TEST(VariableTest, SetValueRefusesAnotherShapeDtypeOrANonLeaf) {
  Variable w = param(from_vector<double>({1, 2, 3}), "w");
  auto refused = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      FAIL() << "expected an error containing " << part;
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what(); }
  };
  refused([&] { w.set_value(from_vector<double>({1, 2})); }, "set_value: a value of shape [2] for 'w' of shape [3]");
  refused([&] { w.set_value(from_vector<float>({1, 2, 3})); }, "set_value: a value of dtype f32 for 'w' of dtype f64");
  refused([&] { w.set_value(Tensor()); }, "set_value: the new value of 'w' is an undefined Tensor");
  const Variable y = mul(w, 2.0);
  refused([&] { y.set_value(from_vector<double>({1, 2, 3})); }, "set_value: a variable is not a leaf");
  EXPECT_EQ(values(w.value()), (std::vector<double>{1, 2, 3}));
}

}  // namespace
}  // namespace coppice
