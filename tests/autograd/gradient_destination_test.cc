// Gradients written into a leaf's destination (autograd/gradient_destination.h,
// Variable::set_grad_destination): a dense linear's weight gradient, and a
// gelu MLP's two, land in the destination (a slice of a larger buffer, as a
// data-parallel bucket is) with the bits they have without one, and are
// stored as the destination itself; where the leaf gets another gradient in
// the pass, or already holds one, or the op cannot write in place, the
// gradient is made and stored as usual.
#include "autograd/gradient_destination.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;

// A buffer of `n` + 8 sevens and a view of `shape` in it, 4 elements in.
struct Bucket {
  Tensor flat;
  Tensor slot;
};
Bucket bucket_for(const Shape& shape) {
  Bucket b;
  b.flat = full({shape_numel(shape) + 8}, 7.0, DType::kF64);
  b.slot = b.flat.narrow(0, 4, shape_numel(shape)).view(shape);
  return b;
}

// The eight sevens around the slot are untouched.
void expect_rest_untouched(const Bucket& b) {
  const std::vector<double> all = b.flat.to_vector<double>();
  for (size_t i : {size_t{0}, size_t{3}, all.size() - 4, all.size() - 1}) EXPECT_EQ(all[i], 7.0) << i;
}

TEST(GradientDestinationTest, LinearWritesItsWeightGradientThere) {
  const Tensor x = randn64({5, 3}), c = randn64({5, 4}), w0 = randn64({4, 3}), b0 = randn64({4});
  auto loss = [&](const Variable& w, const Variable& b) { return sum(mul(linear(Variable(x), w, b), Variable(c))); };
  Variable w_ref = param(w0.clone()), b_ref = param(b0.clone());
  loss(w_ref, b_ref).backward();

  Variable w = param(w0.clone(), "w"), b = param(b0.clone(), "b");
  const Bucket bucket = bucket_for({4, 3});
  w.set_grad_destination(bucket.slot);
  loss(w, b).backward();
  EXPECT_EQ(w.grad().data_ptr(), bucket.slot.data_ptr());
  EXPECT_EQ(w.grad().to_vector<double>(), w_ref.grad().to_vector<double>());
  EXPECT_EQ(b.grad().to_vector<double>(), b_ref.grad().to_vector<double>());
  expect_rest_untouched(bucket);

  // Holding a gradient now: the next one is added to it as usual, and the
  // destination is not written again.
  const std::vector<double> once = w.grad().to_vector<double>();
  loss(w, b).backward();
  EXPECT_NE(w.grad().data_ptr(), bucket.slot.data_ptr());
  EXPECT_EQ(bucket.slot.to_vector<double>(), once);
  const std::vector<double> twice = w.grad().to_vector<double>();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], once[i] + once[i]) << i;
}

TEST(GradientDestinationTest, GeluMlpWritesBothWeightGradientsThere) {
  const Tensor x = randn64({6, 3}), c = randn64({6, 2});
  const Tensor w1_0 = randn64({5, 3}), b1_0 = randn64({5}), w2_0 = randn64({2, 5}), b2_0 = randn64({2});
  struct Leaves {
    Variable w1, b1, w2, b2;
  };
  auto make = [&] {
    return Leaves{param(w1_0.clone()), param(b1_0.clone()), param(w2_0.clone()), param(b2_0.clone())};
  };
  auto loss = [&](const Leaves& l) {
    return sum(mul(gelu_mlp(Variable(x), l.w1, l.b1, l.w2, l.b2, GeluForm::kErf), Variable(c)));
  };
  const Leaves ref = make();
  loss(ref).backward();
  const Leaves l = make();
  const Bucket d1 = bucket_for({5, 3}), d2 = bucket_for({2, 5});
  l.w1.set_grad_destination(d1.slot);
  l.w2.set_grad_destination(d2.slot);
  loss(l).backward();
  EXPECT_EQ(l.w1.grad().data_ptr(), d1.slot.data_ptr());
  EXPECT_EQ(l.w2.grad().data_ptr(), d2.slot.data_ptr());
  EXPECT_EQ(l.w1.grad().to_vector<double>(), ref.w1.grad().to_vector<double>());
  EXPECT_EQ(l.w2.grad().to_vector<double>(), ref.w2.grad().to_vector<double>());
  EXPECT_EQ(l.b1.grad().to_vector<double>(), ref.b1.grad().to_vector<double>());
  expect_rest_untouched(d1);
  expect_rest_untouched(d2);
}

// A weight used twice gets two gradients, summed by the engine: neither use
// may write into the destination. An op that cannot write in place (mul)
// leaves it alone too. Either way the gradient is right.
TEST(GradientDestinationTest, NotWrittenWhereTheGradientIsASumOrTheOpCannot) {
  const Tensor x = randn64({5, 3}), w0 = randn64({4, 3});
  Variable w = param(w0.clone(), "w");
  const Bucket bucket = bucket_for({4, 3});
  w.set_grad_destination(bucket.slot);
  add(sum(linear(Variable(x), w)), sum(linear(Variable(x), w))).backward();
  EXPECT_NE(w.grad().data_ptr(), bucket.slot.data_ptr());
  Variable w_ref = param(w0.clone());
  sum(linear(Variable(x), w_ref)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), mul(w_ref.grad(), 2.0).to_vector<double>());
  EXPECT_EQ(bucket.slot.to_vector<double>(), std::vector<double>(12, 7.0));

  w.set_grad(Tensor());
  sum(mul(w, 3.0)).backward();
  EXPECT_NE(w.grad().data_ptr(), bucket.slot.data_ptr());
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(12, 3.0));
  EXPECT_EQ(bucket.slot.to_vector<double>(), std::vector<double>(12, 7.0));
}

TEST(GradientDestinationTest, OutsideBackwardThereIsNone) { EXPECT_FALSE(gradient_destination(0).defined()); }

TEST(GradientDestinationTest, BadDestinationsAreRefused) {
  Variable w = param(randn64({4, 3}), "w");
  auto message = [&](const Variable& v, const Tensor& d) {
    try {
      v.set_grad_destination(d);
    } catch (const Error& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  EXPECT_NE(message(w, zeros({3, 4}, DType::kF64)).find("a destination f64 [3, 4] on cpu for 'w', which is f64 [4, 3]"),
            std::string::npos);
  EXPECT_NE(message(w, zeros({4, 3})).find("f32 [4, 3] on cpu for 'w'"), std::string::npos);
  EXPECT_NE(message(w, zeros({3, 4}, DType::kF64).t()).find("must be a contiguous dense tensor"), std::string::npos);
  EXPECT_NE(message(mul(w, 2.0), zeros({4, 3}, DType::kF64)).find("is not a leaf"), std::string::npos);
  // set_value (a mask update) clears it: it belonged to the old value.
  w.set_grad_destination(zeros({4, 3}, DType::kF64));
  EXPECT_TRUE(w.grad_destination().defined());
  w.set_value(randn64({4, 3}));
  EXPECT_FALSE(w.grad_destination().defined());
  w.set_grad_destination(zeros({4, 3}, DType::kF64));
  w.set_grad_destination(Tensor());
  EXPECT_FALSE(w.grad_destination().defined());
}

}  // namespace
}  // namespace coppice
