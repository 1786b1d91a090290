// N:M prune and regrow (optim/group_regrow.h) and the updater on n:m layers:
// every group keeps exactly n entries, drops by magnitude, regrows inside
// itself by the growth scores (RigL: |gradient|; SET: random keys), the caps
// per group, and the errors.
#include "optim/group_regrow.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/mask_updater.h"
#include "sparse/nm.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::throws_with;

// Stored positions of an n:m tensor, ascending.
std::vector<int64_t> nm_positions(const Tensor& nm) { return pattern_view(nm, "test").positions; }

// Per group of m: how many stored positions fall in it.
std::vector<int64_t> per_group(const std::vector<int64_t>& positions, int64_t numel, int64_t m) {
  std::vector<int64_t> out(static_cast<size_t>(numel / m), 0);
  for (int64_t p : positions) ++out[static_cast<size_t>(p / m)];
  return out;
}

// A 1x8 2:4 weight: group 0 keeps positions 0 (|w| 5) and 2 (|w| 1), group 1
// keeps 5 (|w| 4) and 7 (|w| 2). Dropping 2 takes the two smallest, one per
// group; each group grows its candidate of largest |g| that it did not just drop.
TEST(GroupRegrow, DropsTheWeakestAndGrowsTheStrongestGradientInTheSameGroup) {
  const Tensor w = from_vector(std::vector<float>{5, 0, -1, 0, 0, 4, 0, -2}, {1, 8});
  const Tensor nm = nm_compress(w, 2, 4);
  const PatternView view = pattern_view(nm, "test");
  ASSERT_EQ(view.positions, (std::vector<int64_t>{0, 2, 5, 7}));
  // |g|: group 0's free positions 1 (3) and 3 (-8): 3 wins; group 1's 4 (1) and 6 (7): 6 wins.
  const Tensor g = from_vector(std::vector<float>{0, 3, 100, -8, 1, 0, 7, 100}, {1, 8});
  const GroupRegrow r = regrow_within_groups(view, values(nm), true, 2, 4, abs(g), false, "test");
  EXPECT_EQ(r.kept, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(r.grown, (std::vector<int64_t>{3, 6}));
}

// Both smallest in one group: that group drops both and grows both of its
// others (m - n = 2 candidates), the other group is untouched.
TEST(GroupRegrow, AGroupMayDropAsManyAsItHasOtherPositions) {
  const Tensor w = from_vector(std::vector<float>{0.1f, 0, -0.2f, 0, 0, 4, 0, -3}, {1, 8});
  const Tensor nm = nm_compress(w, 2, 4);
  const Tensor g = from_vector(std::vector<float>{0, 1, 0, 2, 9, 0, 9, 0}, {1, 8});
  const GroupRegrow r = regrow_within_groups(pattern_view(nm, "t"), values(nm), true, 2, 4, abs(g), false, "t");
  EXPECT_EQ(r.kept, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(r.grown, (std::vector<int64_t>{1, 3}));
}

// 3:4 has one other position per group: without regrowing dropped entries a
// group may drop only one, so k = 2 on one weak group spills into the next.
TEST(GroupRegrow, TheCapPerGroupIsMMinusNUnlessDroppedMayRegrow) {
  const Tensor w = from_vector(std::vector<float>{0.1f, 0.2f, 9, 0, 8, 7, 0.3f, 0}, {1, 8});
  const Tensor nm = nm_compress(w, 3, 4);
  ASSERT_EQ(nm_positions(nm), (std::vector<int64_t>{0, 1, 2, 4, 5, 6}));
  const Tensor g = from_vector(std::vector<float>{0, 0, 0, 1, 0, 0, 0, 1}, {1, 8});
  const PatternView view = pattern_view(nm, "t");
  const GroupRegrow capped = regrow_within_groups(view, values(nm), true, 2, 4, abs(g), false, "t");
  // Group 0 drops 0 (0.1), not 1 (0.2, over the cap); group 1 drops 6 (0.3).
  EXPECT_EQ(capped.kept, (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(capped.grown, (std::vector<int64_t>{3, 7}));
  // Allowed to regrow at once: group 0 drops 0 and 1 and regrows 3 and one of them (0 then 1 by score, ties low).
  const GroupRegrow free = regrow_within_groups(view, values(nm), true, 2, 4, abs(g), true, "t");
  EXPECT_EQ(free.kept, (std::vector<int64_t>{2, 4, 5, 6}));
  EXPECT_EQ(free.grown, (std::vector<int64_t>{0, 3}));
}

// Random 2:4 and 1:4 weights of several shapes: the counts per group are n
// before and after, kept and grown are disjoint, exactly k are dropped, and
// every grown entry beats (or ties at a higher position) its group's other
// candidates.
TEST(GroupRegrow, KeepsNPerGroupAndGrowsTheBestCandidates) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto [n, m] : {std::pair<int64_t, int64_t>{2, 4}, {1, 4}, {1, 2}}) {
    for (int64_t rows : {1, 3, 16}) {
      const int64_t cols = 4 * m;
      std::vector<float> wv(static_cast<size_t>(rows * cols)), gv(wv.size());
      for (float& x : wv) x = normal(rng);
      for (float& x : gv) x = normal(rng);
      const Tensor nm = nm_compress(from_vector(wv, {rows, cols}), n, m);
      const PatternView view = pattern_view(nm, "t");
      const int64_t k = static_cast<int64_t>(view.positions.size()) / 3;
      const GroupRegrow r =
          regrow_within_groups(view, values(nm), true, k, m, abs(from_vector(gv, {rows, cols})), false, "t");
      EXPECT_EQ(static_cast<int64_t>(r.grown.size()), k) << n << ":" << m << " rows " << rows;
      std::vector<int64_t> next = r.kept;
      next.insert(next.end(), r.grown.begin(), r.grown.end());
      std::sort(next.begin(), next.end());
      EXPECT_TRUE(std::adjacent_find(next.begin(), next.end()) == next.end());
      for (int64_t c : per_group(next, rows * cols, m)) EXPECT_EQ(c, n);
      for (int64_t p : r.grown) {
        const int64_t g0 = p / m * m;
        for (int64_t q = g0; q < g0 + m; ++q) {
          const bool other = !std::binary_search(next.begin(), next.end(), q) &&
                             !std::binary_search(view.positions.begin(), view.positions.end(), q);
          if (other) { EXPECT_GE(std::abs(gv[static_cast<size_t>(p)]), std::abs(gv[static_cast<size_t>(q)])); }
        }
      }
    }
  }
}

TEST(GroupRegrow, RefusesUnevenGroupsAndWrongScores) {
  const Tensor nm = nm_compress(from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 8}), 2, 4);
  PatternView view = pattern_view(nm, "t");
  const Tensor g = zeros({1, 8});
  EXPECT_TRUE(throws_with([&] { regrow_within_groups(view, values(nm), true, 1, 4, zeros({8}), false, "t"); },
                          {"growth scores must have shape [1, 8], got [8]"}));
  EXPECT_TRUE(throws_with([&] { regrow_within_groups(view, values(nm), true, 1, 3, g, false, "t"); },
                          {"groups of 3 do not tile rows of [1, 8]"}));
  view.positions.pop_back();
  view.slots.pop_back();
  EXPECT_TRUE(throws_with([&] { regrow_within_groups(view, values(nm), true, 1, 4, g, false, "t"); },
                          {"is not the same count per group"}));
}

MaskUpdaterConfig nm_config(const std::string& growth) {
  MaskUpdaterConfig c;
  c.start_step = 0;
  c.end_step = 100;
  c.interval = 10;
  c.drop_fraction = 0.25;
  c.schedule = DropSchedule::kConstant;
  c.growth = growth;
  c.seed = 11;
  return c;
}

// The updater on a 2:4 layer: RigL and SET both return a valid 2:4 weight
// (nm_compress through its own mask would throw otherwise) with n per group,
// survivors keep their values, grown entries start at 0, keep_from maps them.
TEST(GroupRegrow, TheUpdaterKeepsAnNmLayerNm) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> wv(8 * 16), gv(wv.size());
  for (float& x : wv) x = normal(rng);
  for (float& x : gv) x = normal(rng);
  const Tensor param = nm_compress(from_vector(wv, {8, 16}), 2, 4);
  for (const std::string growth : {"gradient", "random"}) {
    MaskUpdater u(nm_config(growth));
    u.add_layer("w", param);
    const MaskUpdateResult r =
        u.update(0, {{"w", {param, GrowthSignal::dense_gradient(from_vector(gv, {8, 16})), Tensor()}}});
    ASSERT_EQ(r.layers.size(), 1u);
    const LayerUpdate& l = r.layers[0];
    EXPECT_EQ(l.param.format(), "nm") << growth;
    EXPECT_EQ(nm_impl(l.param, "t").n(), 2);
    EXPECT_EQ(l.dropped, 16) << growth;  // a quarter of 64 stored
    EXPECT_EQ(l.grown, 16) << growth;
    for (int64_t c : per_group(nm_positions(l.param), 128, 4)) EXPECT_EQ(c, 2) << growth;
    const std::vector<float> before = to_dense(param).to_vector<float>();
    const std::vector<float> after = to_dense(l.param).to_vector<float>();
    const std::vector<int64_t> old_pos = nm_positions(param);
    for (int64_t p : nm_positions(l.param)) {
      const bool survived = std::binary_search(old_pos.begin(), old_pos.end(), p);
      EXPECT_EQ(after[static_cast<size_t>(p)], survived ? before[static_cast<size_t>(p)] : 0.0f) << growth << " " << p;
    }
    const std::vector<int64_t> keep = l.keep_from.to_vector<int64_t>();
    EXPECT_EQ(std::count(keep.begin(), keep.end(), -1), 16) << growth;
  }
}

// A policy without group scores is refused on an n:m layer, by name.
TEST(GroupRegrow, APolicyWithoutGroupScoresIsRefused) {
  class Global : public GrowthPolicy {
   public:
    std::string name() const override { return "global_only"; }
    std::vector<int64_t> grow(const GrowthInput& in) const override {
      return std::vector<int64_t>(in.candidates->begin(), in.candidates->begin() + in.k);
    }
  };
  if (!is_growth_policy_registered("global_only"))
    register_growth_policy("global_only", [] { return std::make_shared<Global>(); });
  const Tensor param = nm_compress(from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 8}), 2, 4);
  MaskUpdater u(nm_config("global_only"));
  u.add_layer("w", param);
  EXPECT_TRUE(throws_with(
      [&] {
        u.update(0, {{"w", {param, {}, Tensor()}}});
      },
      {"growth 'global_only' cannot grow inside n:m groups"}));
}

}  // namespace
}  // namespace coppice
