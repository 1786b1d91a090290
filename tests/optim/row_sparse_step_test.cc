// Optimizer steps of a dense parameter with a row-sparse gradient (an
// embedding's sparse_grad; Optimizer::step_rows): SGD without momentum
// equals the dense step on the touched rows bit for bit; momentum SGD and
// Adam/AdamW follow the lazy semantics entry by entry (state changes only
// at touched rows, Adam's bias correction by the global step, weight decay
// only on touched rows); untouched rows and their state keep their bits.
#include <cmath>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"

namespace coppice {
namespace {

Tensor table(uint64_t seed) {
  Generator gen(seed);
  return randn({6, 3}, TensorOptions(DType::kF32), gen);
}

// Sets w's gradient to the row-sparse gradient of sum(embedding(w, idx) * c).
void backward_rows(Variable& w, const std::vector<int64_t>& idx, double c) {
  w.set_grad(Tensor());
  Tensor ix = from_vector(idx, {static_cast<int64_t>(idx.size())});
  sum(embedding(w, ix, /*sparse_grad=*/true) * c).backward();
  ASSERT_TRUE(is_row_sparse(w.grad()));
}

std::vector<float> row(const Tensor& t, int64_t r) {
  std::vector<float> all = t.to_vector<float>();
  return std::vector<float>(all.begin() + r * 3, all.begin() + r * 3 + 3);
}

TEST(RowSparseStep, SgdEqualsTheDenseStepOnTouchedRowsBitForBit) {
  Variable sparse(table(1).clone(), true), dense(table(1).clone(), true);
  Sgd a({sparse}, SgdOptions{0.1});
  Sgd b({dense}, SgdOptions{0.1});
  for (const std::vector<int64_t>& idx : {std::vector<int64_t>{4, 1, 4}, std::vector<int64_t>{0, 1}}) {
    backward_rows(sparse, idx, 1.5);
    dense.set_grad(to_dense(sparse.grad()));
    a.step();
    b.step();
    const std::vector<float> got = sparse.value().to_vector<float>(), want = dense.value().to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "at " << i;
  }
  for (int64_t r : {2, 3, 5}) EXPECT_EQ(row(sparse.value(), r), row(table(1), r)) << "untouched row " << r;
}

TEST(RowSparseStep, MomentumSgdIsLazy) {
  Variable w(table(2).clone(), true);
  SgdOptions o{0.1};
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  Sgd opt({w}, o);
  backward_rows(w, {1}, 1.0);  // g = 1 at row 1
  opt.step();
  const Tensor after1 = w.value().clone();
  backward_rows(w, {3}, 2.0);  // row 3 first touched on step 2
  opt.step();
  const Tensor buf = opt.state(w)->tensors.at("momentum_buffer");
  // Row 1 was not touched on step 2: its value and buffer stay.
  EXPECT_EQ(row(w.value(), 1), row(after1, 1));
  const std::vector<float> p0 = row(table(2), 1), b1 = row(buf, 1);
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(b1[c], 1.0f + 0.01f * p0[c]);
  // Row 3: buffer 0.9 * 0 + g (the documented zero start), weight decay on it.
  const std::vector<float> q0 = row(table(2), 3), b3 = row(buf, 3), q = row(w.value(), 3);
  for (int c = 0; c < 3; ++c) {
    const float g = 2.0f + 0.01f * q0[c];
    EXPECT_FLOAT_EQ(b3[c], g);
    EXPECT_FLOAT_EQ(q[c], q0[c] - 0.1f * g);
  }
  // Never touched: no decay, buffer zero.
  EXPECT_EQ(row(w.value(), 0), row(table(2), 0));
  EXPECT_EQ(row(buf, 0), std::vector<float>(3, 0.0f));
}

TEST(RowSparseStep, AdamIsLazyWithGlobalBiasCorrection) {
  for (bool decoupled : {false, true}) {
    Variable w(table(3).clone(), true);
    AdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.1;
    std::unique_ptr<Optimizer> opt;
    if (decoupled) {
      AdamWOptions ow;
      ow.lr = o.lr;
      ow.weight_decay = o.weight_decay;
      opt = std::make_unique<AdamW>(std::vector<Variable>{w}, ow);
    } else {
      opt = std::make_unique<Adam>(std::vector<Variable>{w}, o);
    }
    backward_rows(w, {0, 2}, 1.0);
    opt->step();
    const Tensor after1 = w.value().clone();
    backward_rows(w, {2}, 3.0);
    opt->step();
    const ParamState* st = opt->state(w);
    EXPECT_EQ(st->step, 2);
    EXPECT_EQ(row(w.value(), 0), row(after1, 0));  // not touched on step 2
    for (int64_t r : {1, 3, 4, 5}) EXPECT_EQ(row(w.value(), r), row(table(3), r)) << "untouched row " << r;
    EXPECT_EQ(row(st->tensors.at("exp_avg"), 5), std::vector<float>(3, 0.0f));
    // Row 2, touched on both steps, by the formula in double.
    const std::vector<float> p0 = row(table(3), 2);
    for (int c = 0; c < 3; ++c) {
      double p = p0[c], m = 0, v = 0;
      const double grads[2] = {1.0, 3.0};
      for (int t = 1; t <= 2; ++t) {
        double g = grads[t - 1];
        if (decoupled) {
          p *= 1 - o.lr * o.weight_decay;
        } else {
          g += o.weight_decay * p;
        }
        m = 0.9 * m + 0.1 * g;
        v = 0.999 * v + 0.001 * g * g;
        const double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.999, t));
        p -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
      }
      EXPECT_NEAR(row(w.value(), 2)[c], p, 1e-5) << (decoupled ? "adamw" : "adam") << " column " << c;
    }
  }
}

TEST(RowSparseStep, ClippingScalesTheStoredRows) {
  Variable sparse(table(4).clone(), true), dense(table(4).clone(), true);
  backward_rows(sparse, {2, 5, 2}, 3.0);
  dense.set_grad(to_dense(sparse.grad()));
  const double n1 = clip_grad_norm({sparse}, 1.0), n2 = clip_grad_norm({dense}, 1.0);
  EXPECT_DOUBLE_EQ(n1, n2);
  ASSERT_TRUE(is_row_sparse(sparse.grad()));  // still row-sparse after clipping
  EXPECT_TRUE(allclose(to_dense(sparse.grad()), dense.grad(), 0, 0));
}

}  // namespace
}  // namespace coppice
