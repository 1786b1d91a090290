// Float64 gradchecks of embedding_bag (autograd/functions/nn.h) for weight
// and per_sample_weights: sum, mean and max, offsets with empty bags, fixed-size
// 2-D bags, padding (an entry that contributes nothing and a bag of padding
// only), repeated indices; and row-sparse gradients (sparse_grad): the rows
// used, padding left out, their union when they accumulate.
#include <gtest/gtest.h>

#include "autograd/autograd.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"
#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

// Bags {1, 4}, {}, {4, 0, 2}, {3, 1}, {} (the last empty bag at the end).
const Tensor& indices() {
  static const Tensor t = from_vector<int64_t>({1, 4, 4, 0, 2, 3, 1});
  return t;
}
const Tensor& offsets() {
  static const Tensor t = from_vector<int64_t>({0, 2, 2, 5, 7});
  return t;
}

TEST(EmbeddingBagGrad, WeightSumAndMeanWithEmptyBagsAndPadding) {
  Variable w = param(randn64({5, 3}), "weight");
  for (BagMode mode : {BagMode::kSum, BagMode::kMean}) {
    for (std::optional<int64_t> padding : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
      EmbeddingBagOptions o;
      o.mode = mode;
      o.offsets = offsets();
      o.padding_idx = padding;
      EXPECT_GRADCHECK([o](const V& v) { return embedding_bag(v[0], indices(), o); }, {w});
    }
  }
  // Fixed-size bags, one of them padding only (its mean is zeros).
  EmbeddingBagOptions o;
  o.mode = BagMode::kMean;
  o.padding_idx = 2;
  const Tensor ix = from_vector<int64_t>({2, 2, 0, 3, 3, 2}, {3, 2});
  EXPECT_GRADCHECK([o, ix](const V& v) { return embedding_bag(v[0], ix, o); }, {w});
}

TEST(EmbeddingBagGrad, MaxWithEmptyBagsPaddingAndARepeatedRow) {
  Variable w = param(randn64({5, 3}), "weight");
  for (std::optional<int64_t> padding : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
    for (bool sparse_grad : {false, true}) {
      EmbeddingBagOptions o;
      o.mode = BagMode::kMax;
      o.offsets = offsets();
      o.padding_idx = padding;
      o.sparse_grad = sparse_grad;
      EXPECT_GRADCHECK([o](const V& v) { return embedding_bag(v[0], indices(), o); }, {w});
    }
  }
  // A bag holding one row twice: the tie goes to its first entry, the row is the same.
  EmbeddingBagOptions o;
  o.mode = BagMode::kMax;
  const Tensor ix = from_vector<int64_t>({3, 3, 1, 0, 2, 0}, {3, 2});
  EXPECT_GRADCHECK([o, ix](const V& v) { return embedding_bag(v[0], ix, o); }, {w});
}

TEST(EmbeddingBagGrad, WeightAndPerSampleWeights) {
  Variable w = param(randn64({5, 3}), "weight");
  Variable psw = param(randn64({7}), "per_sample_weights");
  for (std::optional<int64_t> padding : {std::optional<int64_t>(), std::optional<int64_t>(1)}) {
    EmbeddingBagOptions o;
    o.offsets = offsets();
    o.include_last_offset = true;
    o.padding_idx = padding;
    EXPECT_GRADCHECK([o](const V& v) { return embedding_bag(v[0], indices(), o, v[1]); }, {w, psw});
  }
  // 2-D bags: per_sample_weights of the indices' shape, gradient of that shape.
  Variable psw2 = param(randn64({2, 3}), "per_sample_weights");
  const Tensor ix = from_vector<int64_t>({0, 3, 3, 4, 1, 0}, {2, 3});
  EXPECT_GRADCHECK([ix](const V& v) { return embedding_bag(v[0], ix, {}, v[1]); }, {w, psw2});
}

}  // namespace
}  // namespace coppice

namespace coppice {
namespace {

using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

std::vector<int64_t> stored_rows(const Tensor& g) { return row_sparse_rows(g).to_vector<int64_t>(); }

TEST(SparseGrad, EmbeddingGivesTheRowsUsedSortedAndSummed) {
  Variable w = param(randn64({6, 3}), "weight");
  const Tensor idx = from_vector<int64_t>({4, 1, 4, 4, 0, 1}, {2, 3});
  EXPECT_GRADCHECK([idx](const V& v) { return embedding(v[0], idx, /*sparse_grad=*/true); }, {w});
  const Tensor g = randn64({2, 3, 3});
  sum(embedding(w, idx, true) * Variable(g)).backward();
  ASSERT_TRUE(is_row_sparse(w.grad()));
  EXPECT_EQ(stored_rows(w.grad()), (std::vector<int64_t>{0, 1, 4}));
  // The same bits as the dense gradient (the same ordered sums).
  EXPECT_TRUE(allclose(to_dense(w.grad()), embedding_backward(g, idx, 6), 0, 0));
}

TEST(SparseGrad, EmbeddingBagLeavesPaddingOutAndGradchecks) {
  Variable w = param(randn64({5, 3}), "weight");
  Variable psw = param(randn64({7}), "per_sample_weights");
  EmbeddingBagOptions o;
  o.offsets = offsets();
  o.include_last_offset = true;
  o.padding_idx = 4;
  o.sparse_grad = true;
  EXPECT_GRADCHECK([o](const V& v) { return embedding_bag(v[0], indices(), o, v[1]); }, {w, psw});
  o.mode = BagMode::kMean;
  EXPECT_GRADCHECK([o](const V& v) { return embedding_bag(v[0], indices(), o); }, {w});
  w.set_grad(Tensor());
  sum(embedding_bag(w, indices(), o)).backward();
  EXPECT_EQ(stored_rows(w.grad()), (std::vector<int64_t>{0, 1, 2, 3}));  // 4 is padding
}

TEST(SparseGrad, GradientsOfDifferentRowsAccumulateToTheirUnion) {
  Variable w = param(randn64({8, 2}), "weight");
  const Tensor a = from_vector<int64_t>({5, 1, 5}), b = from_vector<int64_t>({1, 7});
  // Two uses in one graph (the engine's buffer) and two backward passes (the leaf's grad).
  sum(embedding(w, a, true) * 2.0).backward();
  sum(embedding(w, b, true)).backward();
  ASSERT_TRUE(is_row_sparse(w.grad()));
  EXPECT_EQ(stored_rows(w.grad()), (std::vector<int64_t>{1, 5, 7}));
  Tensor want = add(embedding_backward(full({3, 2}, 2.0, DType::kF64), a, 8),
                    embedding_backward(ones({2, 2}, DType::kF64), b, 8));
  EXPECT_TRUE(allclose(to_dense(w.grad()), want));
  w.set_grad(Tensor());
  (sum(embedding(w, a, true)) + sum(embedding(w, b, true))).backward();
  EXPECT_EQ(stored_rows(w.grad()), (std::vector<int64_t>{1, 5, 7}));
  // A dense gradient joining a row-sparse one: the dense sum.
  w.set_grad(Tensor());
  (sum(embedding(w, a, true)) + sum(w)).backward();
  EXPECT_TRUE(w.grad().is_dense());
}

}  // namespace
}  // namespace coppice
