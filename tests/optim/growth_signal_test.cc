// Growth signals (optim/growth_signal.h): each says which kind it is, and
// expect_growth_scores takes only the kind a layer grows by, naming what it
// expected and what it got.
#include "optim/growth_signal.h"

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::throws_with;

TEST(GrowthSignal, SaysWhichKindItIs) {
  const GrowthSignal none;
  EXPECT_FALSE(none.defined());
  EXPECT_FALSE(none.tensor().defined());
  EXPECT_EQ(none.describe(), "none");
  const GrowthSignal dense = GrowthSignal::dense_gradient(zeros({4, 6}));
  EXPECT_TRUE(dense.is_dense_gradient());
  EXPECT_EQ(dense.block_rows(), 0);
  EXPECT_EQ(dense.describe(), "a dense gradient of shape [4, 6]");
  const GrowthSignal blocks = GrowthSignal::block_scores(zeros({2, 2}, {DType::kF64, Device::cpu()}), 2, 3);
  EXPECT_TRUE(blocks.is_block_scores());
  EXPECT_EQ(blocks.block_rows(), 2);
  EXPECT_EQ(blocks.block_cols(), 3);
  EXPECT_EQ(blocks.describe(), "block scores of 2x3 blocks, grid [2, 2]");
  EXPECT_STREQ(growth_signal_kind_name(dense.kind()), "dense gradient");
  EXPECT_STREQ(growth_signal_kind_name(blocks.kind()), "block scores");
}

TEST(GrowthSignal, RefusesWhatCannotBeOne) {
  EXPECT_TRUE(throws_with([] { GrowthSignal::dense_gradient(Tensor()); }, {"dense_gradient", "undefined"}));
  EXPECT_TRUE(throws_with([] { GrowthSignal::block_scores(zeros({8}), 2, 2); }, {"2-D block grid", "[8]"}));
  EXPECT_TRUE(throws_with([] { GrowthSignal::block_scores(zeros({2, 2}), 0, 2); }, {"at least 1x1", "0x2"}));
}

TEST(GrowthSignal, ExpectTakesTheKindTheLayerGrowsBy) {
  const GrowthSignal dense = GrowthSignal::dense_gradient(zeros({4, 6}));
  const GrowthSignal blocks = GrowthSignal::block_scores(zeros({2, 2}), 2, 3);
  EXPECT_EQ(expect_growth_scores(dense, {4, 6}, 1, 1, "op").shape(), (Shape{4, 6}));
  EXPECT_EQ(expect_growth_scores(blocks, {4, 6}, 2, 3, "op").shape(), (Shape{2, 2}));
  // 1x1 block scores (each entry's squared gradient) rank an element layer as its dense gradient does.
  EXPECT_NO_THROW(expect_growth_scores(GrowthSignal::block_scores(zeros({4, 6}), 1, 1), {4, 6}, 1, 1, "op"));
  EXPECT_TRUE(throws_with(
      [&] {
        expect_growth_scores(blocks, {4, 6}, 1, 1, "growth 'g' (layer fc1)");
      },
      {"growth 'g' (layer fc1)", "expected the dense gradient of shape [4, 6]",
       "got block scores of 2x3 blocks, grid [2, 2]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        expect_growth_scores(dense, {4, 6}, 2, 3, "layer fc2");
      },
      {"layer fc2", "expected block scores of 2x3 blocks, grid [2, 2]", "got a dense gradient of shape [4, 6]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        expect_growth_scores(blocks, {4, 6}, 2, 2, "layer fc2");
      },
      {"expected block scores of 2x2 blocks, grid [2, 3]", "got block scores of 2x3 blocks"}));
  EXPECT_TRUE(throws_with(
      [&] {
        expect_growth_scores(dense, {6, 4}, 1, 1, "layer fc3");
      },
      {"expected the dense gradient of shape [6, 4]", "got a dense gradient of shape [4, 6]"}));
  EXPECT_TRUE(throws_with([&] { expect_growth_scores(GrowthSignal(), {6, 4}, 1, 1, "layer fc3"); }, {"got none"}));
}

}  // namespace
}  // namespace coppice
