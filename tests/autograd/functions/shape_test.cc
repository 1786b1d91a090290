#include "autograd/functions/shape.h"

#include <gtest/gtest.h>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

TEST(ShapeTest, Cat) {
  Variable a = param(randn64({2, 3})), b = constant(randn64({2, 1})), c = param(randn64({2, 2}));
  EXPECT_GRADCHECK([](const V& v) { return cat(v, 1); }, {a, b, c});
  Variable d = param(randn64({1, 3}));
  EXPECT_GRADCHECK([](const V& v) { return cat(v, 0); }, {a, d});
  EXPECT_GRADCHECK([](const V& v) { return cat(v, -2); }, {a, d});
}

TEST(ShapeTest, Stack) {
  Variable a = param(randn64({2, 3})), b = param(randn64({2, 3})), c = constant(randn64({2, 3}));
  for (int64_t dim : {0, 1, 2, -1}) {
    EXPECT_GRADCHECK([dim](const V& v) { return stack(v, dim); }, {a, b, c});
  }
}

TEST(ShapeTest, IndexSelect) {
  Variable x = param(randn64({4, 3, 2}));
  Tensor idx = from_vector<int64_t>({3, 0, 3, 1});  // a repeat accumulates
  for (int64_t dim : {0, 1, 2}) {
    Tensor i = dim == 0 ? idx : from_vector<int64_t>({1, 0, 1});
    EXPECT_GRADCHECK([dim, i](const V& v) { return index_select(v[0], dim, i); }, {x});
  }
}

TEST(ShapeTest, Gather) {
  Variable x = param(randn64({3, 4}));
  Tensor idx = from_vector<int64_t>({0, 3, 3, 1, 2, 0}, {3, 2});
  EXPECT_GRADCHECK([idx](const V& v) { return gather(v[0], 1, idx); }, {x});
  Tensor idx0 = from_vector<int64_t>({2, 0, 1, 1, 0, 0}, {2, 3});
  EXPECT_GRADCHECK([idx0](const V& v) { return gather(v[0], 0, idx0); }, {x});
}

TEST(ShapeTest, ScatterAdd) {
  Variable x = param(randn64({3, 4})), src = param(randn64({3, 2}));
  Tensor idx = from_vector<int64_t>({0, 3, 3, 3, 2, 0}, {3, 2});
  EXPECT_GRADCHECK([idx](const V& v) { return scatter_add(v[0], 1, idx, v[1]); }, {x, src});
  // src larger than index: only its leading part is read.
  Variable big = param(randn64({3, 3}));
  EXPECT_GRADCHECK([idx](const V& v) { return scatter_add(v[0], 1, idx, v[1]); }, {x, big});
}

TEST(ShapeTest, Views) {
  Variable x = param(randn64({2, 3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return reshape(v[0], {4, -1}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return view(v[0], {6, 4}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return flatten(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return flatten(v[0], 1); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return transpose(v[0], 0, 2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return permute(v[0], {2, 0, 1}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return slice(v[0], 2, 1, 4, 2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return slice(v[0], -1, -3, 100); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return narrow(v[0], 1, 1, 2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return select(v[0], 1, -1); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return unsqueeze(v[0], 1); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return unsqueeze(v[0], -1); }, {x});
  Variable m = param(randn64({3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return t(v[0]); }, {m});
  // A transposed view feeding another op (non-contiguous gradients flow back).
  EXPECT_GRADCHECK([](const V& v) { return mul(transpose(v[0], 0, 1), 2.0); }, {m});
}

TEST(ShapeTest, ExpandAndSqueeze) {
  Variable x = param(randn64({3, 1}));
  EXPECT_GRADCHECK([](const V& v) { return expand(v[0], {3, 4}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return expand(v[0], {2, 3, 4}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return expand(v[0], {2, -1, 5}); }, {x});
  Variable y = param(randn64({1, 3, 1, 2}));
  EXPECT_GRADCHECK([](const V& v) { return squeeze(v[0]); }, {y});
  EXPECT_GRADCHECK([](const V& v) { return squeeze(v[0], 2); }, {y});
  EXPECT_GRADCHECK([](const V& v) { return squeeze(v[0], 1); }, {y});  // not size 1: unchanged
}

TEST(ShapeTest, ViewsShareStorage) {
  Variable x = param(randn64({2, 3}));
  Variable y = transpose(x, 0, 1);
  EXPECT_EQ(y.value().storage().data(), x.value().storage().data());
  EXPECT_EQ(y.grad_fn()->name(), "TransposeBackward");
}

TEST(ShapeTest, ToDtype) {
  Variable x = param(randn64({3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return to_dtype(v[0], DType::kF64); }, {x});
  // Through f32 and back: f32 rounding (~6e-8) is small against the step 1e-3.
  GradcheckOptions o;
  o.eps = 1e-3;
  o.atol = 1e-4;
  EXPECT_GRADCHECK(
      [](const V& v) {
        const Variable y = to_dtype(v[0], DType::kF32);
        return to_dtype(mul(y, y), DType::kF64);
      },
      {x}, o);
  // A bf16 leaf gets a bf16 gradient from an f32 loss.
  Variable h(randn64({5}).to(DType::kBF16), true);
  sum(to_dtype(h, DType::kF32)).backward();
  EXPECT_EQ(h.grad().dtype(), DType::kBF16);
  EXPECT_THROW(to_dtype(h, DType::kI64), Error);
}

}  // namespace
}  // namespace coppice
