// Tests for tensor/ops_embedding_bag.cc: embedding_bag's values against a
// double-precision reference loop (sum, mean, max, per-sample weights, padding,
// empty bags, both index forms), its gradient pieces, and its errors, each
// naming the argument.
#include <cmath>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor weight_values(int64_t v, int64_t d) {
  std::vector<double> w(static_cast<size_t>(v * d));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.7 + 1.3 * static_cast<double>(i));
  return from_vector<double>(w, {v, d});
}

// The bags' rows by the definition: offsets has B + 1 entries.
std::vector<double> reference(const Tensor& w, const std::vector<int64_t>& ix, const std::vector<int64_t>& offsets,
                              bool mean, const std::vector<double>& psw, int64_t padding) {
  const int64_t d = w.size(1), bags = static_cast<int64_t>(offsets.size()) - 1;
  const std::vector<double> wv = vals(w);
  std::vector<double> out(static_cast<size_t>(bags * d), 0.0);
  for (int64_t b = 0; b < bags; ++b) {
    int64_t count = 0;
    for (int64_t e = offsets[b]; e < offsets[b + 1]; ++e) {
      if (ix[e] == padding) continue;
      ++count;
      for (int64_t c = 0; c < d; ++c) out[b * d + c] += wv[ix[e] * d + c] * (psw.empty() ? 1.0 : psw[e]);
    }
    if (mean && count > 0) {
      for (int64_t c = 0; c < d; ++c) out[b * d + c] /= static_cast<double>(count);
    }
  }
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "at " << i;
}

const std::vector<int64_t> kIx = {1, 4, 4, 0, 2, 3, 1};
const std::vector<int64_t> kOffsets = {0, 2, 2, 5};  // bags {1, 4}, {}, {4, 0, 2}, {3, 1}

TEST(EmbeddingBag, SumAndMeanWithOffsetsAndEmptyBags) {
  const Tensor w = weight_values(5, 3);
  const Tensor ix = from_vector(kIx), off = from_vector(kOffsets);
  const std::vector<int64_t> full = {0, 2, 2, 5, 7};
  for (BagMode mode : {BagMode::kSum, BagMode::kMean}) {
    EmbeddingBagOptions o;
    o.mode = mode;
    o.offsets = off;
    Tensor out = embedding_bag(w, ix, o);
    EXPECT_EQ(out.shape(), (Shape{4, 3}));
    expect_near(vals(out), reference(w, kIx, full, mode == BagMode::kMean, {}, -1));
    // include_last_offset: the same bags with the end given.
    o.offsets = from_vector(full);
    o.include_last_offset = true;
    expect_near(vals(embedding_bag(w, ix, o)), reference(w, kIx, full, mode == BagMode::kMean, {}, -1));
  }
}

TEST(EmbeddingBag, FixedSizeBagsFrom2dIndices) {
  const Tensor w = weight_values(6, 2);
  const std::vector<int64_t> ix = {0, 5, 3, 3, 1, 2};
  EmbeddingBagOptions o;
  o.mode = BagMode::kMean;
  expect_near(vals(embedding_bag(w, from_vector(ix, {3, 2}), o)), reference(w, ix, {0, 2, 4, 6}, true, {}, -1));
}

TEST(EmbeddingBag, PerSampleWeightsAndPadding) {
  const Tensor w = weight_values(5, 3);
  const std::vector<double> psw = {0.5, -2.0, 1.5, 3.0, 0.25, -1.0, 2.0};
  const std::vector<int64_t> full = {0, 2, 2, 5, 7};
  EmbeddingBagOptions o;
  o.offsets = from_vector(kOffsets);
  o.per_sample_weights = from_vector(psw);
  o.padding_idx = 4;
  expect_near(vals(embedding_bag(w, from_vector(kIx), o)), reference(w, kIx, full, false, psw, 4));
  // Padding does not count toward a mean; a bag of padding only is zeros.
  EmbeddingBagOptions m;
  m.mode = BagMode::kMean;
  m.padding_idx = -1;  // the last embedding, 4
  const std::vector<int64_t> ix = {4, 4, 2, 4};
  Tensor out = embedding_bag(w, from_vector(ix, {2, 2}), m);
  expect_near(vals(out), reference(w, ix, {0, 2, 4}, true, {}, 4));
  EXPECT_EQ(vals(out)[0], 0.0);
}

TEST(EmbeddingBag, MaxTakesEachColumnsLargestAndItsEntry) {
  const Tensor w = weight_values(5, 3);
  const std::vector<double> wv = vals(w);
  EmbeddingBagOptions o;
  o.mode = BagMode::kMax;
  o.offsets = from_vector(kOffsets);
  o.padding_idx = 4;  // bag {1, 4} is {1}; bag {4, 0, 2} is {0, 2}
  const EmbeddingBags bags = embedding_bags(w, from_vector(kIx), o);
  const ValuesIndices out = embedding_bag_with_argmax(w, bags);
  const std::vector<int64_t> full = {0, 2, 2, 5, 7};
  std::vector<double> want(12, 0.0), want_at(12, -1.0);
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t e = full[b]; e < full[b + 1]; ++e) {
        if (kIx[e] == 4) continue;
        const double x = wv[kIx[e] * 3 + c];
        if (want_at[b * 3 + c] < 0 || x > want[b * 3 + c]) {
          want[b * 3 + c] = x;
          want_at[b * 3 + c] = static_cast<double>(e);
        }
      }
    }
  }
  EXPECT_EQ(vals(out.values), want);
  EXPECT_EQ(vals(out.indices), want_at);  // the empty bag: zeros at -1
  // The gradient goes to the entry that gave each maximum, nowhere else.
  const Tensor g = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
  const std::vector<double> rows = vals(embedding_bag_entry_grads(g, bags, out.indices));
  std::vector<double> want_rows(21, 0.0);
  for (int64_t x = 0; x < 12; ++x) {
    if (want_at[x] >= 0) want_rows[static_cast<int64_t>(want_at[x]) * 3 + x % 3] += static_cast<double>(x + 1);
  }
  EXPECT_EQ(rows, want_rows);
  EXPECT_ERROR_NAMING(embedding_bag_entry_grads(g, bags), "max mode's gradient needs the forward's argmax");
  // Ties take the first entry; a NaN wins over any number.
  Tensor t = from_vector<double>({1, 2, 1, 5, std::nan(""), 0}, {3, 2});
  EmbeddingBagOptions m;
  m.mode = BagMode::kMax;
  const ValuesIndices tie = embedding_bag_with_argmax(t, embedding_bags(t, from_vector<int64_t>({0, 1}, {1, 2}), m));
  EXPECT_EQ(vals(tie.indices), (std::vector<double>{0, 1}));
  EXPECT_EQ(vals(tie.values)[0], 1.0);
  const ValuesIndices nan = embedding_bag_with_argmax(t, embedding_bags(t, from_vector<int64_t>({1, 2, 0}, {1, 3}), m));
  EXPECT_TRUE(std::isnan(vals(nan.values)[0]));
  EXPECT_EQ(vals(nan.indices), (std::vector<double>{1, 0}));
  m.per_sample_weights = ones({1, 3}, DType::kF64);
  EXPECT_ERROR_NAMING(embedding_bag(t, from_vector<int64_t>({1, 2, 0}, {1, 3}), m),
                      "per_sample_weights are taken in sum mode only");
}

TEST(EmbeddingBag, GradientPieces) {
  const Tensor w = weight_values(5, 2);
  EmbeddingBagOptions o;
  o.mode = BagMode::kMean;
  o.offsets = from_vector(kOffsets);
  o.padding_idx = 0;
  EmbeddingBags bags = embedding_bags(w, from_vector(kIx), o);
  const Tensor g = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  // Entry rows: bag 0 {1, 4} halves, bag 2 {4, 0(pad), 2} halves, bag 3 {3, 1} halves.
  expect_near(vals(embedding_bag_entry_grads(g, bags)), {0.5, 1, 0.5, 1, 2.5, 3, 0, 0, 2.5, 3, 3.5, 4, 3.5, 4});
  // Two bags of no entries: no rows.
  EXPECT_EQ(
      embedding_bag_entry_grads(zeros({2, 2}, DType::kF64), embedding_bags(w, zeros({2, 0}, DType::kI64))).shape(),
      (Shape{0, 2}));
}

TEST(EmbeddingBag, ErrorsNameTheArgument) {
  const Tensor w = weight_values(5, 3), ix = from_vector(kIx);
  EmbeddingBagOptions o;
  EXPECT_ERROR_NAMING(embedding_bag(w, ix, o), "embedding_bag: offsets are needed with 1-D indices");
  o.offsets = from_vector<int64_t>({0, 3, 2});
  EXPECT_ERROR_NAMING(embedding_bag(w, ix, o), "embedding_bag: offsets must not decrease, but offsets[2] = 2");
  o.offsets = from_vector<int64_t>({1, 3});
  EXPECT_ERROR_NAMING(embedding_bag(w, ix, o), "embedding_bag: offsets[0] must be 0, got 1");
  o.offsets = from_vector<int64_t>({0, 9});
  EXPECT_ERROR_NAMING(embedding_bag(w, ix, o), "offsets[1] = 9 is past the end of the 7 indices");
  o.offsets = from_vector<int64_t>({0, 3});
  o.include_last_offset = true;
  EXPECT_ERROR_NAMING(embedding_bag(w, ix, o), "the last offset must be the number of indices, 7, got 3");
  o = {};
  o.offsets = from_vector<int64_t>({0}, {1});
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<int64_t>({1, 5}), o),
                      "embedding_bag: index 5 (at position 1) is out of range for dim 0 of size 5");
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<int64_t>({1, 2}, {2, 1}), o), "offsets are for 1-D indices");
  EmbeddingBagOptions p;
  p.mode = BagMode::kMean;
  p.per_sample_weights = ones({2, 1}, DType::kF64);
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<int64_t>({1, 2}, {2, 1}), p),
                      "per_sample_weights are taken in sum mode only");
  p.mode = BagMode::kSum;
  p.per_sample_weights = ones({2}, DType::kF64);
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<int64_t>({1, 2}, {2, 1}), p),
                      "per_sample_weights has shape [2] but indices has shape [2, 1]");
  p.per_sample_weights = ones({2, 1}, DType::kF32);
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<int64_t>({1, 2}, {2, 1}), p),
                      "per_sample_weights has dtype f32 but weight has f64");
  EmbeddingBagOptions q;
  q.padding_idx = 5;
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<int64_t>({1, 2}, {2, 1}), q),
                      "padding_idx 5 is out of range for 5 embeddings");
  EXPECT_ERROR_NAMING(embedding_bag(w, from_vector<double>({1, 2}, {2, 1})), "indices must be an integer tensor");
  EXPECT_ERROR_NAMING(embedding_bag(zeros({5}), from_vector<int64_t>({1, 2}, {2, 1})), "weight must be 2-D");
}

}  // namespace
}  // namespace coppice
