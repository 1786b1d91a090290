// Gradual magnitude pruning (optim/gmp.h): Zhu & Gupta's cubic schedule at
// chosen steps, the pruning steps, pruning a parameter over a run, one-shot
// pruning (optim/prune.h), and refused configurations.
#include "optim/gmp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "optim/prune.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::bits_at;
using testing_mask::positions;
using testing_mask::random_dense;
using testing_mask::random_param;
using testing_mask::throws_with;

// What expand_blocks needs of a BSR weight's entries: its shape and block.
PatternView block_view_of(const Tensor& bsr) {
  PatternView elements = pattern_view(bsr, "test");
  elements.positions.clear();
  elements.slots.clear();
  return elements;
}

GmpConfig config() {
  GmpConfig c;
  c.initial_density = 1.0;
  c.final_density = 0.1;
  c.start_step = 100;
  c.end_step = 1100;
  c.frequency = 100;
  return c;
}

// s_t = 0.9 + (0 - 0.9)(1 - (t - 100)/1000)^3.
TEST(Gmp, CubicScheduleAtChosenSteps) {
  const GmpConfig c = config();
  EXPECT_DOUBLE_EQ(gmp_density_at(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(gmp_density_at(c, 100), 1.0);
  EXPECT_NEAR(gmp_sparsity_at(c, 350), 0.9 - 0.9 * 0.75 * 0.75 * 0.75, 1e-12);  // 0.5203125
  EXPECT_NEAR(gmp_sparsity_at(c, 600), 0.7875, 1e-12);
  EXPECT_NEAR(gmp_density_at(c, 600), 0.2125, 1e-12);
  EXPECT_NEAR(gmp_sparsity_at(c, 1000), 0.9 - 0.9 * 0.001, 1e-12);
  EXPECT_DOUBLE_EQ(gmp_density_at(c, 1100), 0.1);
  EXPECT_DOUBLE_EQ(gmp_density_at(c, 5000), 0.1);
  GmpConfig from_half = c;
  from_half.initial_density = 0.5;
  EXPECT_NEAR(gmp_sparsity_at(from_half, 600), 0.9 + (0.5 - 0.9) * 0.125, 1e-12);
  // Monotone between the ends.
  for (int64_t t = 100; t < 1100; ++t) EXPECT_GE(gmp_density_at(c, t), gmp_density_at(c, t + 1));
}

TEST(Gmp, PrunesOnScheduleBitForBit) {
  GmpPruner gmp(config());
  EXPECT_TRUE(gmp.is_prune_step(100));
  EXPECT_TRUE(gmp.is_prune_step(600));
  EXPECT_TRUE(gmp.is_prune_step(1100));
  EXPECT_FALSE(gmp.is_prune_step(150));
  EXPECT_FALSE(gmp.is_prune_step(1200));
  EXPECT_FALSE(gmp.is_prune_step(0));
  Tensor p = random_param({10, 20}, 200, 3, "csr");  // everything stored
  int64_t last = nnz(p);
  for (int64_t step = 0; step <= 1300; ++step) {
    const MaskChange c = gmp.prune(step, p);
    if (!gmp.is_prune_step(step)) {
      EXPECT_TRUE(c.param.is_same(p));
      continue;
    }
    const int64_t expect = std::min<int64_t>(last, std::llround(gmp_density_at(config(), step) * 200));
    EXPECT_EQ(nnz(c.param), expect) << step;
    if (c.keep_from.defined()) {
      const std::vector<int64_t> kept = positions(c.param);
      EXPECT_EQ(bits_at(c.param, kept), bits_at(p, kept));
      // The smallest survivor is at least the largest dropped.
      const std::vector<float> d = to_dense(p).to_vector<float>();
      float min_kept = 1e30f, max_dropped = 0.0f;
      for (int64_t q : kept) min_kept = std::min(min_kept, std::fabs(d[static_cast<size_t>(q)]));
      for (int64_t q : c.dropped) max_dropped = std::max(max_dropped, std::fabs(d[static_cast<size_t>(q)]));
      EXPECT_GE(min_kept, max_dropped);
    }
    last = nnz(c.param);
    p = c.param;
  }
  EXPECT_EQ(nnz(p), 20);
}

TEST(Gmp, OneShotPruning) {
  const Tensor p = random_param({8, 8}, 40, 4, "masked");
  const MaskChange c = prune_to_density(p, 0.25);
  EXPECT_EQ(nnz(c.param), 16);
  EXPECT_EQ(c.param.format(), "masked");
  EXPECT_EQ(c.dropped.size(), 24u);
  EXPECT_TRUE(c.grown.empty());
  const std::vector<int64_t> kept = positions(c.param);
  EXPECT_EQ(bits_at(c.param, kept), bits_at(p, kept));
  // Asking for more than is stored keeps everything.
  EXPECT_EQ(nnz(prune_to_density(p, 0.9).param), 40);
  EXPECT_TRUE(throws_with([&] { prune_to_density(p, 1.5); }, {"prune_to_density", "[0, 1]"}));
}

// BSR prunes whole blocks, by block sum of squares.
TEST(Gmp, BlockFormatPrunesWholeBlocks) {
  std::vector<float> w(64);
  for (int64_t q = 0; q < 64; ++q) {
    const int64_t block = q / 8 / 2 * 4 + q % 8 / 2;
    w[static_cast<size_t>(q)] = static_cast<float>((block * 7) % 16 + 1) * (q % 2 ? -1.0f : 1.0f);
  }
  const Tensor p = to_format(from_vector(w, {8, 8}), "bsr", FormatOptions::block(2));
  const MaskChange c = prune_to_density(p, 0.25);
  EXPECT_EQ(c.param.format(), "bsr");
  EXPECT_EQ(nnz(c.param), 16);
  // Block b holds magnitude (7 b) % 16 + 1: the four largest, 16, 15, 14, 13, are blocks 9, 2, 11, 4.
  std::vector<int64_t> blocks;
  for (int64_t q : positions(c.param)) blocks.push_back(q / 8 / 2 * 4 + q % 8 / 2);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  EXPECT_EQ(blocks, (std::vector<int64_t>{2, 4, 9, 11}));
  const std::vector<int64_t> kept = positions(c.param);
  EXPECT_EQ(bits_at(c.param, kept), bits_at(p, kept));
  GmpPruner gmp(config());
  Tensor q = p;
  for (int64_t step = 0; step <= 1100; step += 100) {
    q = gmp.prune(step, q).param;
    EXPECT_EQ(nnz(q), 4 * std::min<int64_t>(16, std::llround(gmp_density_at(config(), step) * 16))) << step;
  }
  EXPECT_EQ(nnz(q), 4 * 2);  // round(0.1 * 16) blocks
}

// A BSR weight is pruned from its block indices and stored blocks alone: the
// same survivors, values and keep_from as the entry walk over the dense
// weight's block scores, with dropped given as block indices of the grid;
// down to one block and to none.
TEST(Gmp, BsrPrunesByItsBlocksAsTheEntryWalkDoes) {
  std::vector<float> w = random_dense({16, 24}, 7).to_vector<float>();
  // 4x4 blocks on a 4 x 6 grid: every fifth block left out, and blocks 2 and
  // 3 equal, so that a tie goes to the lower block.
  for (int64_t q = 0; q < 16 * 24; ++q) {
    const int64_t r = q / 24, c = q % 24, block = r / 4 * 6 + c / 4;
    if (block % 5 == 0) w[static_cast<size_t>(q)] = 0.0f;
    if (block == 3) w[static_cast<size_t>(q)] = w[static_cast<size_t>(q - 4)];
  }
  const Tensor p = to_format(from_vector(w, {16, 24}), "bsr", FormatOptions::block(4));
  ASSERT_EQ(nnz(p), 19 * 16);
  const Tensor keys = sparsify::block_scores(to_dense(p).contiguous(), 4, 4, false, "test");
  // 17, 12, 6, 2, 1 and 0 of the 19 blocks.
  for (double density : {0.7, 0.5, 0.25, 0.1, 0.05, 0.0}) {
    const MaskChange blocks = prune_to_density(p, density);
    const MaskChange walk = prune_to_density(p, density, keys, false);
    ASSERT_TRUE(blocks.keep_from.defined() && walk.keep_from.defined()) << density;
    EXPECT_EQ(blocks.param.format(), "bsr");
    EXPECT_EQ(positions(blocks.param), positions(walk.param)) << density;
    EXPECT_EQ(bits_at(blocks.param, positions(walk.param)), bits_at(walk.param, positions(walk.param)));
    EXPECT_EQ(blocks.keep_from.to_vector<int64_t>(), walk.keep_from.to_vector<int64_t>()) << density;
    EXPECT_EQ(expand_blocks(blocks.dropped, block_view_of(p)), walk.dropped) << density;
    EXPECT_TRUE(blocks.grown.empty());
  }
  // Asking for at least what is stored changes nothing.
  const MaskChange none = prune_to_density(p, 0.8);
  EXPECT_TRUE(none.param.is_same(p));
  EXPECT_FALSE(none.keep_from.defined());
  EXPECT_TRUE(throws_with([&] { prune_to_density(p, -0.5); }, {"prune_to_density", "[0, 1]"}));
}

TEST(Gmp, RefusesBadConfigs) {
  GmpConfig c = config();
  c.final_density = 1.2;
  EXPECT_TRUE(throws_with([&] { GmpPruner g(c); }, {"final_density", "[0, 1]"}));
  c = config();
  c.initial_density = 0.05;
  EXPECT_TRUE(throws_with([&] { GmpPruner g(c); }, {"above initial_density"}));
  c = config();
  c.end_step = 50;
  EXPECT_TRUE(throws_with([&] { GmpPruner g(c); }, {"end_step (50)", "before start_step (100)"}));
  c = config();
  c.frequency = 0;
  EXPECT_TRUE(throws_with([&] { GmpPruner g(c); }, {"frequency"}));
}

}  // namespace
}  // namespace coppice
