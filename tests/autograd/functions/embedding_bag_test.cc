// Float64 gradchecks of embedding_bag (autograd/functions/nn.h) for weight
// and per_sample_weights: sum and mean, offsets with empty bags, fixed-size
// 2-D bags, padding (an entry that contributes nothing and a bag of padding
// only), repeated indices.
#include <gtest/gtest.h>

#include "autograd/functions/nn.h"
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
