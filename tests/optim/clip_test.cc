// clip_grad_norm (optim/clip.h) over dense and sparse gradients.
#include "optim/clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sparse/convert.h"
#include "sparse/masked.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::f64;
using optim_test::host;

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

}  // namespace
}  // namespace coppice
