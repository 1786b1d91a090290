#include "autograd/engine.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(EngineTest, DiamondSumsBothPaths) {
  Variable x = param(from_vector<double>({2.0}));
  Variable a = mul(x, 3.0), b = mul(x, x);
  Variable y = mul(a, b);  // 3 x^3
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 9.0 * 4.0);
}

TEST(EngineTest, SeveralRoots) {
  Variable x = param(from_vector<double>({1.0, 2.0}));
  Variable y1 = sum(mul(x, 2.0)), y2 = sum(mul(x, x));
  run_backward({y1, y2}, {Tensor(), scalar_tensor(0.5, DType::kF64)});
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2 + 1, 2 + 2}));
}

TEST(EngineTest, ARootThatFeedsAnotherRoot) {
  Variable x = param(from_vector<double>({3.0}));
  Variable y = mul(x, 2.0);
  Variable z = mul(y, y);
  run_backward({z, y}, {Tensor(), Tensor()});
  EXPECT_DOUBLE_EQ(x.grad().item(), 2.0 * 2.0 * 6.0 + 2.0);
}

TEST(EngineTest, LeafAsRoot) {
  Variable x = param(from_vector<double>({1.0, 2.0}));
  x.backward(from_vector<double>({3.0, 4.0}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 4}));
}

TEST(EngineTest, LeafUsedInTwoGraphs) {
  Variable w = param(from_vector<double>({1.0}));
  sum(mul(w, 2.0)).backward();
  sum(mul(w, 5.0)).backward();  // the accumulator runs again without retain_graph
  EXPECT_DOUBLE_EQ(w.grad().item(), 7.0);
}

struct ChainResult {
  double grad = 0.0;
  std::string error;
};

// 100,000 ops in a chain, run on a thread with a 1 MiB stack: any recursion
// over the graph (building, backward or freeing it) would overflow.
void* run_deep_chain(void* arg) {
  auto* result = static_cast<ChainResult*>(arg);
  try {
    Variable x = param(from_vector<double>({1.0}));
    {
      Variable y = x;
      for (int i = 0; i < 100000; ++i) y = add(y, 1e-6);
      sum(y).backward();
    }  // the graph is freed here
    result->grad = x.grad().item();
  } catch (const std::exception& e) { result->error = e.what(); }
  return nullptr;
}

TEST(EngineTest, DeepChainDoesNotOverflowTheStack) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t thread;
  ChainResult result;
  ASSERT_EQ(pthread_create(&thread, &attr, run_deep_chain, &result), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(result.error, "");
  EXPECT_DOUBLE_EQ(result.grad, 1.0);
}

TEST(EngineTest, SavedTensorsAreFreedAfterBackward) {
  Variable x = param(randn64({1000}));
  Variable y = exp(x);
  std::weak_ptr<TensorImpl> saved = y.value().impl_ptr();  // ExpBackward saves its output
  Variable loss = sum(y);
  y = Variable();
  EXPECT_FALSE(saved.expired());
  loss.backward();
  EXPECT_TRUE(saved.expired());
}

TEST(EngineTest, RetainGraphKeepsSavedTensors) {
  Variable x = param(randn64({10}));
  Variable y = exp(x);
  std::weak_ptr<TensorImpl> saved = y.value().impl_ptr();
  Variable loss = sum(y);
  y = Variable();
  loss.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_FALSE(saved.expired());
}

TEST(EngineTest, BranchesThatNeedNoGradientAreSkipped) {
  Variable x = param(randn64({3}));
  Variable c(randn64({3}));
  Variable y = mul(x, c);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_TRUE(y.grad_fn()->needs_input_grad(0));
  EXPECT_FALSE(y.grad_fn()->needs_input_grad(1));
  sum(y).backward();
  EXPECT_TRUE(allclose(x.grad(), c.value()));
  EXPECT_FALSE(c.grad().defined());
}

}  // namespace
}  // namespace coppice
