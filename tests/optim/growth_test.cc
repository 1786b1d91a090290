// Growth policies and their helpers (optim/growth.h): exact top-k among
// candidates (ties, NaN, any format of scores), the Philox-keyed random draw,
// the registry; and SNFS's redistribution when a layer runs out of room.
#include "optim/growth.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "optim/mask_updater.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::random_dense;
using testing_mask::random_param;
using testing_mask::throws_with;

TEST(Growth, TopKAmongCandidatesTiesAndNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  //                           0    1    2   3    4   5    6    7
  const std::vector<float> s = {9, -3, 3, 50, -7, 3, 0.5f, nan};
  const Tensor scores = from_vector(s, {2, 4});
  const std::vector<int64_t> cand = {1, 2, 3, 4, 5, 6};  // 0 and 7 (the NaN) are not candidates
  EXPECT_EQ(top_k_among(scores, cand, 1, "t"), (std::vector<int64_t>{3}));
  EXPECT_EQ(top_k_among(scores, cand, 2, "t"), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(top_k_among(scores, cand, 3, "t"), (std::vector<int64_t>{1, 3, 4}));  // |-3| = |3|: lowest first
  EXPECT_EQ(top_k_among(scores, cand, 4, "t"), (std::vector<int64_t>{1, 2, 3, 4}));
  // A candidate's NaN or inf score is refused, naming the op: nothing is ranked by it.
  EXPECT_TRUE(throws_with(
      [&] {
        top_k_among(scores, {1, 7}, 1, "growth 'g' (layer fc1)");
      },
      {"growth 'g' (layer fc1)", "growth scores", "non-finite"}));
  const Tensor inf_scores = from_vector(std::vector<float>{1, std::numeric_limits<float>::infinity(), 2, 3}, {2, 2});
  EXPECT_TRUE(throws_with([&] { top_k_among(inf_scores, {0, 1, 2}, 1, "t"); }, {"non-finite"}));
  EXPECT_EQ(top_k_among(scores, cand, 0, "t"), (std::vector<int64_t>{}));
  EXPECT_EQ(top_k_among(scores, cand, 6, "t"), cand);
  EXPECT_TRUE(throws_with([&] { top_k_among(scores, cand, 7, "t"); }, {"cannot grow 7 of 6"}));
  // f64 and sparse scores (a streamed list of candidates as COO) give the same choice.
  EXPECT_EQ(top_k_among(scores.to(DType::kF64), cand, 3, "t"), (std::vector<int64_t>{1, 3, 4}));
  const Tensor g = random_dense({8, 8}, 3);
  std::vector<int64_t> all(64);
  for (int64_t i = 0; i < 64; ++i) all[static_cast<size_t>(i)] = i;
  const std::vector<int64_t> dense_pick = top_k_among(g, all, 5, "t");
  const Tensor coo = sparse_from_mask(g, mask_from_positions({8, 8}, dense_pick), "coo");
  EXPECT_EQ(top_k_among(coo, all, 5, "t"), dense_pick);
}

TEST(Growth, RandomDrawIsKeyedAndExact) {
  std::vector<int64_t> cand;
  for (int64_t i = 0; i < 1000; i += 3) cand.push_back(i);
  const std::vector<int64_t> a = random_k_among(cand, 50, 1, 2, 3, 0);
  EXPECT_EQ(a.size(), 50u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 50u);
  for (int64_t p : a) EXPECT_TRUE(std::binary_search(cand.begin(), cand.end(), p));
  EXPECT_EQ(random_k_among(cand, 50, 1, 2, 3, 0), a);  // same key, same draw
  EXPECT_NE(random_k_among(cand, 50, 9, 2, 3, 0), a);  // seed
  EXPECT_NE(random_k_among(cand, 50, 1, 9, 3, 0), a);  // purpose
  EXPECT_NE(random_k_among(cand, 50, 1, 2, 9, 0), a);  // step
  EXPECT_NE(random_k_among(cand, 50, 1, 2, 3, 9), a);  // rank
  // A position's key does not depend on the other candidates: dropping
  // unchosen candidates leaves the choice unchanged.
  std::vector<int64_t> fewer = a;
  for (size_t i = 0; i < cand.size(); i += 2) fewer.push_back(cand[i]);
  std::sort(fewer.begin(), fewer.end());
  fewer.erase(std::unique(fewer.begin(), fewer.end()), fewer.end());
  EXPECT_EQ(random_k_among(fewer, 50, 1, 2, 3, 0), a);
  EXPECT_NE(name_purpose("fc1.weight"), name_purpose("fc2.weight"));
  EXPECT_EQ(name_purpose("fc1.weight"), name_purpose(std::string("fc1.") + "weight"));
}

TEST(Growth, Registry) {
  const std::vector<std::string> names = registered_growth_policies();
  for (const char* n : {"gradient", "momentum", "random"}) {
    EXPECT_TRUE(std::find(names.begin(), names.end(), n) != names.end()) << n;
  }
  EXPECT_TRUE(make_growth_policy("gradient")->needs_dense_gradient());
  EXPECT_FALSE(make_growth_policy("random")->needs_dense_gradient());
  EXPECT_TRUE(make_growth_policy("momentum")->redistributes_by_momentum());
  EXPECT_TRUE(throws_with([] { register_growth_policy("", [] { return make_growth_policy("random"); }); }, {"empty"}));
  EXPECT_TRUE(throws_with([] { register_growth_policy("random", [] { return make_growth_policy("random"); }); },
                          {"'random'", "already registered"}));
  EXPECT_TRUE(throws_with([] { make_growth_policy("rigl"); }, {"unknown name 'rigl'", "gradient", "random"}));
}

TEST(Growth, RandomInitialMask) {
  const Tensor m = random_mask({30, 40}, 120, 5, name_purpose("fc1.weight"));
  EXPECT_EQ(m.dtype(), DType::kBool);
  EXPECT_EQ(m.shape(), (Shape{30, 40}));
  const std::vector<int> bits = m.to_vector<int>();
  int64_t count = 0, first_half = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    count += bits[i];
    if (i < 600) first_half += bits[i];
  }
  EXPECT_EQ(count, 120);
  EXPECT_GT(first_half, 35);  // roughly uniform (expected 60)
  EXPECT_LT(first_half, 85);
  EXPECT_EQ(random_mask({30, 40}, 120, 5, name_purpose("fc1.weight")).to_vector<int>(), bits);
  EXPECT_NE(random_mask({30, 40}, 120, 5, name_purpose("fc2.weight")).to_vector<int>(), bits);
  const Tensor p = sparse_from_mask(random_dense({30, 40}, 1), m, "csr");
  EXPECT_EQ(nnz(p), 120);
  EXPECT_TRUE(throws_with([] { random_mask({2, 2}, 5, 0, 0); }, {"random_mask", "5 of 4"}));
}

// SNFS with a layer that has little room: its share above its free positions
// goes to the other layer, and the total nnz is kept.
TEST(Growth, MomentumRedistributionRespectsRoom) {
  MaskUpdaterConfig c;
  c.end_step = 100;
  c.interval = 10;
  c.drop_fraction = 0.5;
  c.schedule = DropSchedule::kConstant;
  c.growth = "momentum";
  MaskUpdater u(c);
  const Tensor a = random_param({4, 4}, 12, 1, "csr");  // 4 free positions
  const Tensor b = random_param({16, 16}, 32, 2, "csr");
  u.add_layer("a", a);
  u.add_layer("b", b);
  const Tensor ma = mul(random_dense({4, 4}, 3), 100.0);  // a wants nearly everything
  const Tensor mb = random_dense({16, 16}, 4);
  const MaskUpdateResult r = u.update(0, {{"a", {a, {}, ma}}, {"b", {b, {}, mb}}});
  EXPECT_EQ(r.layers[0].dropped, 4);  // min(round(0.5 * 12), 16 - 12)
  EXPECT_EQ(r.layers[1].dropped, 16);
  EXPECT_EQ(r.layers[0].grown, 4);  // all its room
  EXPECT_EQ(r.layers[1].grown, 16);
  EXPECT_EQ(nnz(r.layers[0].param) + nnz(r.layers[1].param), 44);
  // Zero momentum everywhere: equal shares.
  const MaskUpdateResult z = u.update(10, {{"a", {a, {}, zeros({4, 4})}}, {"b", {b, {}, zeros({16, 16})}}});
  EXPECT_EQ(z.layers[0].grown + z.layers[1].grown, 20);
  EXPECT_EQ(z.layers[0].grown, 4);
}

}  // namespace
}  // namespace coppice
