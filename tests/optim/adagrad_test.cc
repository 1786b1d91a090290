// Adagrad (optim/adagrad.h) against torch.optim.Adagrad's formula in double,
// entry by entry, dense and with a row-sparse gradient (only the touched
// rows and their sums change; the step count is the parameter's), and its
// option checks.
#include "optim/adagrad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/autograd.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"

namespace coppice {
namespace {

AdagradOptions options() {
  AdagradOptions o;
  o.lr = 0.1;
  o.lr_decay = 0.05;
  o.weight_decay = 0.01;
  o.initial_accumulator_value = 0.2;
  return o;
}

// One parameter value through the formula: grads[t] at step t + 1.
double expected(double p, const std::vector<double>& grads, const std::vector<int>& steps, const AdagradOptions& o) {
  double sum = o.initial_accumulator_value;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double g = grads[i] + o.weight_decay * p;
    sum += g * g;
    const double clr = o.lr / (1 + (steps[i] - 1) * o.lr_decay);
    p -= clr * g / (std::sqrt(sum) + o.eps);
  }
  return p;
}

TEST(Adagrad, DenseFollowsTheFormula) {
  Variable w(from_vector<double>({0.5, -1.0, 2.0}), true);
  Adagrad opt({w}, options());
  const std::vector<std::vector<double>> grads = {{1, 2, 3}, {-1, 0.5, 0}, {0.25, 0.25, -4}};
  for (const std::vector<double>& g : grads) {
    w.set_grad(from_vector<double>(g));
    opt.step();
  }
  const std::vector<double> p0 = {0.5, -1.0, 2.0}, got = w.value().to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(got[c], expected(p0[c], {grads[0][c], grads[1][c], grads[2][c]}, {1, 2, 3}, options()), 1e-14);
  }
}

TEST(Adagrad, RowSparseGradientTouchesOnlyItsRows) {
  Generator gen(9);
  const Tensor start = randn({5, 2}, TensorOptions(DType::kF64), gen);
  Variable w(start.clone(), true);
  Adagrad opt({w}, options());
  // Step 1 uses rows 1 and 3; step 2 row 3 only (gradient 2 per entry).
  for (const std::vector<int64_t>& idx : {std::vector<int64_t>{1, 3}, std::vector<int64_t>{3}}) {
    w.set_grad(Tensor());
    sum(embedding(w, from_vector(idx, {static_cast<int64_t>(idx.size())}), true) * 2.0).backward();
    ASSERT_TRUE(is_row_sparse(w.grad()));
    opt.step();
  }
  const std::vector<double> p0 = start.to_vector<double>(), got = w.value().to_vector<double>();
  const std::vector<double> sums = opt.state(w)->tensors.at("sum").to_vector<double>();
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(got[1 * 2 + c], expected(p0[1 * 2 + c], {2}, {1}, options()), 1e-14);
    EXPECT_NEAR(got[3 * 2 + c], expected(p0[3 * 2 + c], {2, 2}, {1, 2}, options()), 1e-14);
    for (int r : {0, 2, 4}) {
      EXPECT_EQ(got[r * 2 + c], p0[r * 2 + c]) << "untouched row " << r;
      EXPECT_EQ(sums[r * 2 + c], 0.2) << "untouched row " << r << "'s sum";
    }
  }
}

TEST(Adagrad, OptionsAreChecked) {
  Variable w(zeros({2}, DType::kF64), true);
  AdagradOptions o;
  o.lr_decay = -1;
  try {
    Adagrad bad({w}, o);
    FAIL() << "a negative lr_decay was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adagrad: group 0 has a negative lr_decay"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace coppice
