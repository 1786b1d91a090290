// The prune-and-regrow updater (optim/mask_updater.h): magnitude pruning with
// random (SET), gradient (RigL), momentum (SNFS) and user growth, the density
// invariant, bit-for-bit survivors, keep_from, determinism, the dense gradient
// asked only on update steps, and refused configurations.
#include "optim/mask_updater.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/density.h"
#include "sparse/formats.h"
#include "sparse/nm.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::bits_at;
using testing_mask::positions;
using testing_mask::random_dense;
using testing_mask::random_param;
using testing_mask::throws_with;

MaskUpdaterConfig config(const std::string& growth, double drop = 0.3) {
  MaskUpdaterConfig c;
  c.start_step = 0;
  c.end_step = 1000;
  c.interval = 10;
  c.drop_fraction = drop;
  c.schedule = DropSchedule::kConstant;
  c.growth = growth;
  c.seed = 7;
  return c;
}

std::vector<int64_t> set_minus(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// A 4x4 CSR weight with hand-picked values and a gradient whose largest
// inactive magnitudes are known: RigL drops the smallest |w| and grows
// exactly the top-k |g| among the inactive positions, ties to the lower index.
TEST(MaskUpdater, RigLGrowsExactlyTheTopKOfTheGradient) {
  // Stored: positions 0, 1, 2, 3, 5, 6, 9, 10 with |w| = 8, 1, 7, 2, 6, 5, 4, 3.
  std::vector<float> w(16, 0.0f);
  const std::vector<int64_t> stored = {0, 1, 2, 3, 5, 6, 9, 10};
  const std::vector<float> vals = {8, -1, 7, 2, -6, 5, 4, -3};
  for (size_t i = 0; i < stored.size(); ++i) w[static_cast<size_t>(stored[i])] = vals[i];
  const Tensor param = sparse_from_mask(from_vector(w, {4, 4}), mask_from_positions({4, 4}, stored), "csr");
  // Gradient on the inactive positions 4, 7, 8, 11..15: |g| = 9 at 4 and 15, 5 at 7 and 12 (a tie
  // that the lower position, 7, wins), less elsewhere; huge on the stored ones, which RigL may not
  // regrow in the update that drops them.
  std::vector<float> g(16, 0.0f);
  g[4] = -9;
  g[15] = 9;
  g[12] = 5;
  g[7] = -5;
  g[8] = 1;
  g[11] = 0.5f;
  g[13] = 0.25f;
  g[14] = 0.125f;
  for (int64_t p : stored) g[static_cast<size_t>(p)] = 100;
  MaskUpdater u(config("gradient", 0.375));  // drops round(0.375 * 8) = 3
  u.add_layer("w", param);
  const MaskUpdateResult r =
      u.update(0, {{"w", {param, GrowthSignal::dense_gradient(from_vector(g, {4, 4})), Tensor()}}});
  ASSERT_TRUE(r.updated);
  ASSERT_EQ(r.layers.size(), 1u);
  const LayerUpdate& l = r.layers[0];
  EXPECT_EQ(l.dropped, 3);
  EXPECT_EQ(l.grown, 3);
  EXPECT_EQ(l.param.format(), "csr");
  // Dropped: |w| = 1, 2, 3 at positions 1, 3, 10. Grown: 4, 15 (|g| 9) and 7 (|g| 5, lower than 12).
  EXPECT_EQ(positions(l.param), (std::vector<int64_t>{0, 2, 4, 5, 6, 7, 9, 15}));
  // Survivors keep their values, grown ones are zero.
  const std::vector<float> d = to_dense(l.param).to_vector<float>();
  EXPECT_EQ(d[0], 8.0f);
  EXPECT_EQ(d[5], -6.0f);
  EXPECT_EQ(d[4], 0.0f);
  EXPECT_EQ(d[15], 0.0f);
  // keep_from: the new CSR slots in row-major order, old slots or -1.
  EXPECT_EQ(l.keep_from.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, -1, 4, 5, -1, 6, -1}));
}

TEST(MaskUpdater, DenseGradientOnlyOnUpdateSteps) {
  MaskUpdaterConfig c = config("gradient");
  c.start_step = 100;
  c.end_step = 500;
  c.interval = 50;
  MaskUpdater rigl(c);
  for (int64_t s = 0; s < 600; ++s) {
    const bool update = s >= 100 && s < 500 && (s - 100) % 50 == 0;
    EXPECT_EQ(rigl.is_update_step(s), update) << s;
    EXPECT_EQ(rigl.needs_dense_gradient(s), update) << s;
  }
  c.growth = "random";
  MaskUpdater set(c);
  for (int64_t s = 0; s < 600; ++s) EXPECT_FALSE(set.needs_dense_gradient(s)) << s;
  // An ordinary step changes nothing and needs no gradient.
  const Tensor p = random_param({8, 8}, 16, 1, "csr");
  MaskUpdater rigl2(config("gradient"));
  rigl2.add_layer("w", p);
  const MaskUpdateResult r = rigl2.update(5, {{"w", {p, {}, Tensor()}}});
  EXPECT_FALSE(r.updated);
  EXPECT_FALSE(r.layers[0].changed);
  EXPECT_TRUE(r.layers[0].param.is_same(p));
}

// Every format, many updates, decaying drop fraction: nnz never changes, no
// position is stored twice, survivors keep their bits, grown entries start at
// zero, dropped positions are not regrown in the same update, ITOP only grows.
TEST(MaskUpdater, DensityInvariantAndBitForBitSurvivorsOverManySteps) {
  for (const std::string format : {"csr", "coo", "csc", "masked"}) {
    for (const std::string growth : {"random", "gradient"}) {
      MaskUpdaterConfig c = config(growth, 0.5);
      c.schedule = DropSchedule::kCosine;
      c.end_step = 400;
      MaskUpdater u(c);
      Tensor p = random_param({12, 20}, 48, 3, format);
      u.add_layer("layer", p);
      double last_itop = u.itop_rate("layer");
      int64_t updates = 0;
      for (int64_t step = 0; step < 400; ++step) {
        if (!u.is_update_step(step)) continue;
        const std::vector<int64_t> before = positions(p);
        LayerInputs in{p,
                       u.needs_dense_gradient(step) ? GrowthSignal::dense_gradient(random_dense({12, 20}, 100 + step))
                                                    : GrowthSignal(),
                       Tensor()};
        const MaskUpdateResult r = u.update(step, {{"layer", in}});
        const LayerUpdate& l = r.layers[0];
        const std::vector<int64_t> after = positions(l.param);
        ASSERT_EQ(static_cast<int64_t>(after.size()), 48) << format << " " << growth << " step " << step;
        EXPECT_EQ(nnz(l.param), 48);
        EXPECT_DOUBLE_EQ(l.density, 48.0 / 240.0);
        EXPECT_EQ(l.dropped, l.grown);
        EXPECT_EQ(l.param.format(), format);
        const std::vector<int64_t> kept = set_minus(before, set_minus(before, after));
        const std::vector<int64_t> grown = set_minus(after, before);
        EXPECT_EQ(static_cast<int64_t>(grown.size()), l.grown);
        EXPECT_EQ(bits_at(l.param, kept), bits_at(p, kept)) << format << " step " << step;
        for (uint32_t b : bits_at(l.param, grown)) EXPECT_EQ(b, 0u);
        EXPECT_GE(l.itop_rate, last_itop);
        last_itop = l.itop_rate;
        if (l.changed) {
          EXPECT_NE(pattern_version(l.param), pattern_version(p));
          // keep_from maps each new slot to the old slot of the same position.
          const std::vector<int64_t> kf = l.keep_from.to_vector<int64_t>();
          const std::vector<float> old_vals = values(p).to(DType::kF32).reshape({-1}).to_vector<float>();
          const std::vector<float> new_vals = values(l.param).reshape({-1}).to_vector<float>();
          ASSERT_EQ(kf.size(), new_vals.size());
          for (size_t s = 0; s < kf.size(); ++s) {
            if (kf[s] >= 0) { EXPECT_EQ(new_vals[s], old_vals[static_cast<size_t>(kf[s])]); }
          }
        }
        p = l.param;
        ++updates;
      }
      EXPECT_EQ(updates, 40);
      EXPECT_GT(u.itop_rate("layer"), 48.0 / 240.0);
    }
  }
}

TEST(MaskUpdater, JustDroppedPositionsAreNotRegrownUnlessAllowed) {
  for (bool allow : {false, true}) {
    MaskUpdaterConfig c = config("gradient", 0.5);
    c.allow_regrow_dropped = allow;
    MaskUpdater u(c);
    const Tensor p = random_param({6, 6}, 12, 4, "csr");
    u.add_layer("w", p);
    // The gradient is largest exactly on the stored positions, so RigL would
    // regrow what it dropped if it were allowed to.
    std::vector<float> g(36, 0.01f);
    for (int64_t q : positions(p)) g[static_cast<size_t>(q)] = 50.0f;
    const MaskUpdateResult r =
        u.update(0, {{"w", {p, GrowthSignal::dense_gradient(from_vector(g, {6, 6})), Tensor()}}});
    const std::vector<int64_t> before = positions(p), after = positions(r.layers[0].param);
    EXPECT_EQ(r.layers[0].dropped, 6);
    if (allow) {
      EXPECT_EQ(after, before);  // every dropped one grown back, at zero
    } else {
      EXPECT_EQ(set_minus(before, after).size(), 6u);
      EXPECT_EQ(set_minus(after, before).size(), 6u);
    }
  }
  // Without the flag, a layer denser than half drops only as many as it can regrow.
  MaskUpdater u(config("random", 1.0));
  const Tensor p = random_param({4, 4}, 12, 5, "coo");
  u.add_layer("w", p);
  const MaskUpdateResult r = u.update(0, {{"w", {p, {}, Tensor()}}});
  EXPECT_EQ(r.layers[0].dropped, 4);
  EXPECT_EQ(r.layers[0].nnz, 12);
}

// SET: with drop fraction 1 and dropped positions allowed back, every update
// draws a fresh uniform 16-subset of 64 positions. Over 1000 updates each
// position is expected 250 times; chi-square over the 64 counts (63 degrees
// of freedom, mean 63, sd 11.2) must stay under 110 for this fixed seed.
TEST(MaskUpdater, SetGrowsUniformly) {
  MaskUpdaterConfig c = config("random", 1.0);
  c.allow_regrow_dropped = true;
  c.interval = 1;
  c.end_step = 1000;
  MaskUpdater u(c);
  Tensor p = random_param({8, 8}, 16, 6, "csr");
  u.add_layer("w", p);
  std::vector<double> count(64, 0.0);
  for (int64_t step = 0; step < 1000; ++step) {
    const MaskUpdateResult r = u.update(step, {{"w", {p, {}, Tensor()}}});
    p = r.layers[0].param;
    ASSERT_EQ(nnz(p), 16);
    for (int64_t q : positions(p)) count[static_cast<size_t>(q)] += 1.0;
  }
  double chi2 = 0.0;
  for (double n : count) chi2 += (n - 250.0) * (n - 250.0) / 250.0;
  EXPECT_LT(chi2, 110.0);
  EXPECT_GT(chi2, 30.0);  // not suspiciously even either
  EXPECT_DOUBLE_EQ(u.itop_rate("w"), 1.0);
}

// Replicas given identical (already reduced) inputs compute identical masks;
// another seed gives another mask.
TEST(MaskUpdater, IdenticalInputsGiveIdenticalMasks) {
  for (const std::string growth : {"random", "gradient"}) {
    MaskUpdater a(config(growth, 0.4)), b(config(growth, 0.4));
    MaskUpdaterConfig other_seed = config(growth, 0.4);
    other_seed.seed = 8;
    MaskUpdater c(other_seed);
    Tensor pa = random_param({16, 16}, 64, 9, "csr"), pb = pa, pc = pa;
    a.add_layer("fc1.weight", pa);
    b.add_layer("fc1.weight", pb);
    c.add_layer("fc1.weight", pc);
    bool differs = false;
    for (int64_t step = 0; step < 200; step += 10) {
      const Tensor g = random_dense({16, 16}, 1000 + step);
      pa = a.update(step, {{"fc1.weight", {pa, GrowthSignal::dense_gradient(g), Tensor()}}}).layers[0].param;
      pb = b.update(step, {{"fc1.weight", {pb, GrowthSignal::dense_gradient(g), Tensor()}}}).layers[0].param;
      pc = c.update(step, {{"fc1.weight", {pc, GrowthSignal::dense_gradient(g), Tensor()}}}).layers[0].param;
      ASSERT_EQ(pattern_checksum(pa), pattern_checksum(pb)) << growth << " step " << step;
      ASSERT_EQ(positions(pa), positions(pb));
      differs = differs || positions(pa) != positions(pc);
    }
    if (growth == "random") { EXPECT_TRUE(differs); }
  }
}

class EveryOtherGrowth : public GrowthPolicy {
 public:
  std::string name() const override { return "test_lowest_first"; }
  std::vector<int64_t> grow(const GrowthInput& in) const override {
    return std::vector<int64_t>(in.candidates->begin(), in.candidates->begin() + in.k);
  }
};

TEST(MaskUpdater, UserGrowthPolicyByName) {
  register_growth_policy("test_lowest_first", [] { return std::make_shared<EveryOtherGrowth>(); });
  EXPECT_TRUE(throws_with(
      [] { register_growth_policy("test_lowest_first", [] { return std::make_shared<EveryOtherGrowth>(); }); },
      {"test_lowest_first", "already registered"}));
  const std::vector<std::string> names = registered_growth_policies();
  EXPECT_TRUE(std::find(names.begin(), names.end(), "test_lowest_first") != names.end());
  MaskUpdater u(config("test_lowest_first", 0.5));
  // Stored: the last 4 of 4x4, all equal: the tie keeps the lower 12 and 13;
  // the policy grows the lowest candidates.
  const Tensor p = sparse_from_mask(ones({4, 4}), mask_from_positions({4, 4}, {12, 13, 14, 15}), "csr");
  u.add_layer("w", p);
  const MaskUpdateResult r = u.update(0, {{"w", {p, {}, Tensor()}}});
  EXPECT_EQ(positions(r.layers[0].param), (std::vector<int64_t>{0, 1, 12, 13}));
}

TEST(MaskUpdater, StateRemapHookAndRegrowInit) {
  MaskUpdaterConfig c = config("random", 0.5);
  c.init = [](const Tensor&, const std::vector<int64_t>& pos) {
    return full({static_cast<int64_t>(pos.size())}, 0.25, DType::kF64);
  };
  MaskUpdater u(c);
  const Tensor p = random_param({8, 8}, 20, 11, "csr");
  u.add_layer("w", p);
  std::vector<std::string> seen;
  Tensor hooked_keep_from;
  u.set_state_remap([&](const std::string& name, const Tensor& param, const Tensor& keep_from) {
    seen.push_back(name);
    EXPECT_EQ(keep_from.numel(), nnz(param));
    hooked_keep_from = keep_from;
  });
  const MaskUpdateResult r = u.update(0, {{"w", {p, {}, Tensor()}}});
  ASSERT_EQ(seen, std::vector<std::string>{"w"});
  EXPECT_EQ(hooked_keep_from.to_vector<int64_t>(), r.layers[0].keep_from.to_vector<int64_t>());
  const std::vector<int64_t> grown = set_minus(positions(r.layers[0].param), positions(p));
  ASSERT_EQ(grown.size(), 10u);
  const std::vector<float> d = to_dense(r.layers[0].param).to_vector<float>();
  for (int64_t q : grown) EXPECT_EQ(d[static_cast<size_t>(q)], 0.25f);
  int64_t news = 0;
  for (int64_t k : r.layers[0].keep_from.to_vector<int64_t>()) news += k < 0;
  EXPECT_EQ(news, 10);
}

TEST(MaskUpdater, MovementAndCustomPruneCriteria) {
  // Movement: the entries with the lowest accumulated -w * g are dropped.
  MaskUpdaterConfig c = config("random", 0.25);
  c.prune = PruneCriterion::kMovement;
  MaskUpdater u(c);
  const std::vector<int64_t> stored = {0, 1, 2, 3, 4, 5, 6, 7};
  const Tensor p = sparse_from_mask(ones({4, 4}), mask_from_positions({4, 4}, stored), "csr");
  u.add_layer("w", p);
  EXPECT_TRUE(throws_with([&] { u.update(0, {{"w", {p, {}, Tensor()}}}); }, {"movement", "accumulate_movement"}));
  // Compact gradient (same pattern): g positive at 2 and 5 -> score -1 there.
  std::vector<float> g = {0, 0, 1, 0, 0, 1, -0.5f, 0};
  u.accumulate_movement("w", p, with_values(p, from_vector(g)));
  const MaskUpdateResult r = u.update(0, {{"w", {p, {}, Tensor()}}});
  const std::vector<int64_t> after = positions(r.layers[0].param);
  EXPECT_TRUE(std::find(after.begin(), after.end(), 2) == after.end());
  EXPECT_TRUE(std::find(after.begin(), after.end(), 5) == after.end());
  EXPECT_TRUE(std::find(after.begin(), after.end(), 6) != after.end());
  // The scores follow the new pattern: the old parameter is refused, the new one works.
  const Tensor np = r.layers[0].param;
  EXPECT_TRUE(throws_with([&] { u.update(10, {{"w", {p, {}, Tensor()}}}); }, {"another pattern"}));
  u.accumulate_movement("w", np, zeros({4, 4}));
  const MaskUpdateResult r2 = u.update(10, {{"w", {np, {}, Tensor()}}});
  EXPECT_EQ(nnz(r2.layers[0].param), 8);
  EXPECT_EQ(r2.layers[0].dropped, 2);

  // Custom: scores of the parameter's shape, larger survives.
  MaskUpdaterConfig cc = config("random", 0.25);
  cc.prune = PruneCriterion::kCustom;
  cc.prune_score = [](const Tensor& param, int64_t) { return arange(0, 16, 1, DType::kF32).reshape(param.shape()); };
  MaskUpdater v(cc);
  v.add_layer("w", p);
  const std::vector<int64_t> kept = positions(v.update(0, {{"w", {p, {}, Tensor()}}}).layers[0].param);
  EXPECT_TRUE(std::find(kept.begin(), kept.end(), 0) == kept.end());
  EXPECT_TRUE(std::find(kept.begin(), kept.end(), 1) == kept.end());
  EXPECT_TRUE(std::find(kept.begin(), kept.end(), 7) != kept.end());
}

// SNFS: the regrowth goes to the layer with the larger mean |momentum|; the
// total nnz is kept, and momentum growth picks the largest |momentum|.
TEST(MaskUpdater, MomentumRedistributesAcrossLayers) {
  MaskUpdaterConfig c = config("momentum", 0.5);
  MaskUpdater u(c);
  const Tensor a = random_param({8, 8}, 16, 12, "csr"), b = random_param({8, 8}, 16, 13, "csr");
  u.add_layer("a", a);
  u.add_layer("b", b);
  EXPECT_TRUE(u.needs_momentum(0));
  EXPECT_FALSE(u.needs_dense_gradient(0));
  const Tensor ma = mul(random_dense({8, 8}, 14), 3.0), mb = random_dense({8, 8}, 15);
  const MaskUpdateResult r = u.update(0, {{"a", {a, {}, ma}}, {"b", {b, {}, mb}}});
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].dropped, 8);
  EXPECT_EQ(r.layers[1].dropped, 8);
  EXPECT_EQ(r.layers[0].grown + r.layers[1].grown, 16);
  EXPECT_GT(r.layers[0].grown, r.layers[1].grown);
  EXPECT_EQ(r.layers[0].nnz + r.layers[1].nnz, 32);
  EXPECT_EQ(nnz(r.layers[0].param), r.layers[0].nnz);
  // Layer a's grown positions are its top-|momentum| inactive ones.
  const std::vector<int64_t> grown = set_minus(positions(r.layers[0].param), positions(a));
  std::vector<std::pair<float, int64_t>> inactive;
  const std::vector<float> m = ma.to_vector<float>();
  for (int64_t q = 0; q < 64; ++q) {
    const std::vector<int64_t> pa = positions(a);
    if (!std::binary_search(pa.begin(), pa.end(), q)) inactive.emplace_back(-std::fabs(m[static_cast<size_t>(q)]), q);
  }
  std::sort(inactive.begin(), inactive.end());
  std::vector<int64_t> expect;
  for (int64_t i = 0; i < r.layers[0].grown; ++i) expect.push_back(inactive[static_cast<size_t>(i)].second);
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(grown, expect);
}

// A checkpointed updater resumes with the same ITOP record and movement
// scores, and so makes the same masks as one that never stopped.
TEST(MaskUpdater, StateTensorsRoundTrip) {
  MaskUpdaterConfig c = config("random", 0.3);
  c.prune = PruneCriterion::kMovement;
  MaskUpdater a(c);
  Tensor p = random_param({10, 10}, 30, 41, "csr");
  a.add_layer("w", p);
  for (int64_t step = 0; step < 25; ++step) {
    a.accumulate_movement("w", p, random_dense({10, 10}, 300 + step));
    if (a.is_update_step(step)) p = a.update(step, {{"w", {p, {}, Tensor()}}}).layers[0].param;
  }
  const std::map<std::string, Tensor> saved = a.state_tensors();
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved.at("w.movement_steps").item(), 25.0);
  MaskUpdater b(c);
  b.add_layer("w", p);
  EXPECT_LT(b.itop_rate("w"), a.itop_rate("w"));
  b.load_state_tensors(saved);
  EXPECT_DOUBLE_EQ(b.itop_rate("w"), a.itop_rate("w"));
  Tensor pa = p, pb = p;
  for (int64_t step = 25; step < 60; ++step) {
    const Tensor g = random_dense({10, 10}, 300 + step);
    a.accumulate_movement("w", pa, g);
    b.accumulate_movement("w", pb, g);
    if (!a.is_update_step(step)) continue;
    pa = a.update(step, {{"w", {pa, {}, Tensor()}}}).layers[0].param;
    pb = b.update(step, {{"w", {pb, {}, Tensor()}}}).layers[0].param;
    ASSERT_EQ(positions(pa), positions(pb)) << step;
  }
  std::map<std::string, Tensor> bad = saved;
  bad["v.ever_active"] = saved.at("w.ever_active");
  EXPECT_TRUE(throws_with([&] { b.load_state_tensors(bad); }, {"'v.ever_active'", "no layer"}));
  bad = saved;
  bad.erase("w.ever_active");
  EXPECT_TRUE(throws_with([&] { b.load_state_tensors(bad); }, {"missing 'w.ever_active'"}));
}

TEST(MaskUpdater, DropFractionSchedules) {
  MaskUpdaterConfig c = config("random", 0.3);
  c.start_step = 100;
  c.end_step = 300;
  c.schedule = DropSchedule::kCosine;
  EXPECT_DOUBLE_EQ(drop_fraction_at(c, 100), 0.3);
  EXPECT_NEAR(drop_fraction_at(c, 200), 0.15, 1e-12);
  EXPECT_NEAR(drop_fraction_at(c, 150), 0.15 * (1 + std::cos(3.14159265358979323846 / 4)), 1e-12);
  EXPECT_EQ(drop_fraction_at(c, 300), 0.0);
  EXPECT_EQ(drop_fraction_at(c, 99), 0.0);
  c.schedule = DropSchedule::kLinear;
  EXPECT_NEAR(drop_fraction_at(c, 250), 0.075, 1e-12);
  c.schedule = DropSchedule::kConstant;
  EXPECT_DOUBLE_EQ(drop_fraction_at(c, 299), 0.3);
  EXPECT_EQ(parse_drop_schedule("cosine"), DropSchedule::kCosine);
  EXPECT_TRUE(throws_with([] { parse_drop_schedule("step"); }, {"step", "constant, cosine, linear"}));
}

TEST(MaskUpdater, RefusesBadConfigs) {
  MaskUpdaterConfig c = config("random");
  c.drop_fraction = 1.5;
  EXPECT_TRUE(throws_with([&] { MaskUpdater u(c); }, {"drop_fraction", "[0, 1]", "1.5"}));
  c.drop_fraction = -0.1;
  EXPECT_TRUE(throws_with([&] { MaskUpdater u(c); }, {"drop_fraction", "-0.1"}));
  c = config("random");
  c.start_step = 50;
  c.end_step = 10;
  EXPECT_TRUE(throws_with([&] { MaskUpdater u(c); }, {"end_step (10)", "before start_step (50)"}));
  c = config("random");
  c.interval = 0;
  EXPECT_TRUE(throws_with([&] { MaskUpdater u(c); }, {"interval"}));
  c = config("no_such_policy");
  EXPECT_TRUE(throws_with([&] { MaskUpdater u(c); },
                          {"unknown growth policy 'no_such_policy'", "gradient", "momentum", "random"}));
  c = config("random");
  c.prune = PruneCriterion::kCustom;
  EXPECT_TRUE(throws_with([&] { MaskUpdater u(c); }, {"custom", "prune_score"}));
  // Formats and inputs.
  MaskUpdater u(config("gradient"));
  EXPECT_TRUE(throws_with([&] { u.add_layer("d", ones({4, 4})); }, {"layer d", "dense", "masked"}));
  // (n:m layers are taken and regrow within their groups: group_regrow_test.cc.)
  const Tensor p = random_param({4, 4}, 4, 1, "csr");
  u.add_layer("w", p);
  EXPECT_TRUE(throws_with([&] { u.add_layer("w", p); }, {"'w'", "already"}));
  EXPECT_TRUE(throws_with([&] { u.update(0, {{"w", {p, {}, Tensor()}}}); }, {"layer w", "dense gradient"}));
  EXPECT_TRUE(throws_with([&] { u.update(0, {}); }, {"layer w", "no inputs"}));
  EXPECT_TRUE(throws_with(
      [&] {
        u.update(3, {{"w", {p, {}, Tensor()}}, {"fc9", {p, {}, Tensor()}}});
      },
      {"'fc9'", "no layer", "layers: w"}));
  EXPECT_TRUE(throws_with([] { make_growth_policy("nope"); }, {"nope", "known: gradient, momentum, random"}));
}

// BSR and Blocked-ELL keep, drop and grow whole blocks: RigL by block sums
// of squares, the format and block kept, values of surviving blocks bit for
// bit, grown blocks zero, the number of blocks constant.
TEST(MaskUpdater, BlockFormatsUpdateWholeBlocks) {
  // 8x8 in 2x2 blocks (a 4x4 grid); stored blocks 0, 1, 5, 10 with entries
  // of magnitude 4, 1, 3, 2.
  std::vector<float> w(64, 0.0f);
  const std::vector<int64_t> blocks = {0, 1, 5, 10};
  const std::vector<float> mag = {4, 1, 3, 2};
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int64_t r0 = blocks[i] / 4 * 2, c0 = blocks[i] % 4 * 2;
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 2; ++c) w[static_cast<size_t>((r0 + r) * 8 + c0 + c)] = (r == c ? 1 : -1) * mag[i];
    }
  }
  const Tensor dense = from_vector(w, {8, 8});
  // Gradient: block 15 largest, then block 3; block 1 (stored) huge.
  std::vector<float> g(64, 0.01f);
  g[7 * 8 + 7] = 5;    // block 15
  g[1 * 8 + 6] = -4;   // block 3
  g[0 * 8 + 2] = 100;  // block 1
  for (const std::string format : {"bsr", "blocked_ell"}) {
    const Tensor p = to_format(dense, format, FormatOptions::block(2));
    MaskUpdater u(config("gradient", 0.5));
    u.add_layer("w", p);
    const MaskUpdateResult r =
        u.update(0, {{"w", {p, GrowthSignal::dense_gradient(from_vector(g, {8, 8})), Tensor()}}});
    const LayerUpdate& l = r.layers[0];
    EXPECT_EQ(l.param.format(), format);
    EXPECT_EQ(l.dropped, 8);  // blocks 1 and 10
    EXPECT_EQ(l.grown, 8);    // blocks 15 and 3
    EXPECT_EQ(nnz(l.param), 16);
    const std::vector<float> d = to_dense(l.param).to_vector<float>();
    for (int64_t q = 0; q < 64; ++q) {
      const int64_t block = q / 8 / 2 * 4 + q % 8 / 2;
      const bool survives = block == 0 || block == 5;
      EXPECT_EQ(d[static_cast<size_t>(q)], survives ? w[static_cast<size_t>(q)] : 0.0f) << format << " " << q;
    }
    std::vector<int64_t> expect;
    for (int64_t q : positions(l.param)) expect.push_back(q / 8 / 2 * 4 + q % 8 / 2);
    expect.erase(std::unique(expect.begin(), expect.end()), expect.end());
    std::sort(expect.begin(), expect.end());
    expect.erase(std::unique(expect.begin(), expect.end()), expect.end());
    EXPECT_EQ(expect, (std::vector<int64_t>{0, 3, 5, 15})) << format;
  }
  // Many random updates on BSR: always 4 whole blocks.
  MaskUpdater u(config("random", 0.5));
  Tensor p = to_format(dense, "bsr", FormatOptions::block(2));
  u.add_layer("w", p);
  for (int64_t step = 0; step < 300; step += 10) {
    p = u.update(step, {{"w", {p, {}, Tensor()}}}).layers[0].param;
    ASSERT_EQ(nnz(p), 16);
    ASSERT_EQ(p.format(), "bsr");
  }
  EXPECT_GT(u.itop_rate("w"), 0.25);
  // Movement pruning works entry by entry only.
  MaskUpdaterConfig mc = config("random", 0.5);
  mc.prune = PruneCriterion::kMovement;
  MaskUpdater m(mc);
  m.add_layer("w", p);
  EXPECT_TRUE(throws_with([&] { m.update(0, {{"w", {p, {}, Tensor()}}}); }, {"block magnitude only"}));
}

// A random BSR [24, 40] in 4x8 blocks (a 6x5 grid) storing `blocks` of the
// grid (block row 2 empty), values uniform in +-[0.5, 2).
Tensor random_bsr(uint64_t seed, const std::vector<int64_t>& blocks) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  std::vector<double> v(24 * 40, 0.0);
  for (int64_t b : blocks) {
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t c = 0; c < 8; ++c) v[static_cast<size_t>((b / 5 * 4 + r) * 40 + b % 5 * 8 + c)] = mag(rng);
    }
  }
  return to_format(from_vector(v, {24, 40}, TensorOptions(DType::kF64)).to(DType::kF32), "bsr",
                   FormatOptions::block(4, 8));
}

// Which formats mask updates take is the format table's built-in rows, and
// a dense weight is told how to become one.
TEST(MaskUpdater, PatternViewTakesEveryBuiltInFormatAndRefusesDense) {
  const Tensor dense = random_dense({8, 16}, 5);
  for (const std::string& f : builtin_sparse_format_names()) {
    const bool blocks = f == "bsr" || f == "blocked_ell";
    const Tensor p = f == "nm" ? nm_compress(dense, 2, 4)
                               : to_format(dense, f, blocks ? FormatOptions::block(4, 4) : FormatOptions());
    EXPECT_EQ(pattern_view(p, "test").shape, dense.shape()) << f;
  }
  EXPECT_TRUE(throws_with(
      [&] { pattern_view(dense, "prune"); },
      {"prune: mask updates need a sparse parameter whose stored positions are known (one of sparse/'s formats (",
       "got dense", "store the weight as \"masked\""}));
}

// The BSR walk by block indices gives what the walk over every entry gives:
// the same block view, and the same rebuilt parameter, keep_from, dropped
// and grown entries, with zeros or a RegrowInit for the grown blocks.
TEST(MaskUpdater, BsrBlockWalkMatchesTheEntryWalk) {
  const Tensor p = random_bsr(3, {0, 3, 4, 6, 7, 8, 17, 19, 24, 29});
  const PatternView elements = pattern_view(p, "test");
  const PatternView expect = block_view(elements);
  const PatternView blocks = bsr_block_view(p, "test");
  EXPECT_EQ(blocks.shape, expect.shape);
  EXPECT_EQ(blocks.positions, expect.positions);
  EXPECT_EQ(blocks.slots, expect.slots);
  EXPECT_EQ(blocks.value_slots, expect.value_slots);
  const std::vector<int64_t> kept = {3, 6, 7, 17, 29}, grown = {1, 10, 12, 28};
  const RegrowInit by_position = [](const Tensor&, const std::vector<int64_t>& pos) {
    std::vector<float> v;
    for (int64_t q : pos) v.push_back(static_cast<float>(q) + 0.5f);
    return from_vector(v);
  };
  for (const bool with_init : {false, true}) {
    const RegrowInit init = with_init ? by_position : RegrowInit();
    const MaskChange a = rebuild_bsr_blocks(p, blocks, kept, grown, init, "test");
    const MaskChange b =
        rebuild_pattern(p, elements, expand_blocks(kept, elements), expand_blocks(grown, elements), init, "test");
    EXPECT_EQ(a.param.format(), "bsr");
    EXPECT_EQ(positions(a.param), positions(b.param));
    EXPECT_EQ(to_dense(a.param).to_vector<float>(), to_dense(b.param).to_vector<float>()) << with_init;
    EXPECT_EQ(a.keep_from.to_vector<int64_t>(), b.keep_from.to_vector<int64_t>());
    EXPECT_EQ(a.dropped, (std::vector<int64_t>{0, 4, 8, 19, 24}));  // blocks
    EXPECT_EQ(a.grown, grown);
    EXPECT_EQ(expand_blocks(a.dropped, elements), b.dropped);
    EXPECT_EQ(expand_blocks(a.grown, elements), b.grown);
  }
  // Everything dropped, and nothing stored to begin with.
  const MaskChange none = rebuild_bsr_blocks(p, blocks, {}, {}, RegrowInit(), "test");
  EXPECT_EQ(nnz(none.param), 0);
  const Tensor empty = random_bsr(4, {});
  const MaskChange all_new = rebuild_bsr_blocks(empty, bsr_block_view(empty, "test"), {}, {2, 5}, RegrowInit(), "t");
  EXPECT_EQ(nnz(all_new.param), 2 * 32);
  EXPECT_EQ(all_new.keep_from.to_vector<int64_t>(), std::vector<int64_t>(64, -1));
  EXPECT_TRUE(throws_with([&] { rebuild_bsr_blocks(p, blocks, {5}, {}, RegrowInit(), "op"); }, {"kept", "5"}));
  EXPECT_TRUE(throws_with([&] { rebuild_bsr_blocks(p, blocks, {3}, {3}, RegrowInit(), "op"); }, {"grown", "3"}));
}

// RigL on a block format ranks the gradient by block sums of squares, so the
// block scores may be handed in instead of the dense gradient: the same
// masks, update after update.
TEST(MaskUpdater, BlockScoresStandInForTheDenseGradient) {
  for (const std::string format : {"bsr", "blocked_ell"}) {
    const Tensor base = random_bsr(5, {0, 1, 4, 6, 9, 13, 18, 22, 27});
    Tensor pa = format == "bsr" ? base : to_format(to_dense(base), format, FormatOptions::block(4));
    const int64_t bh = 4, bw = format == "bsr" ? 8 : 4;
    Tensor pb = pa;
    MaskUpdater a(config("gradient", 0.4)), b(config("gradient", 0.4));
    a.add_layer("w", pa);
    b.add_layer("w", pb);
    std::set<int64_t> ever;  // every entry stored so far: the ITOP record
    for (int64_t q : positions(pa)) ever.insert(q);
    for (int64_t step = 0; step < 60; step += 10) {
      const Tensor g = random_dense({24, 40}, 900 + step);
      const Tensor scores = sparsify::block_scores(g, bh, bw, false, "test");
      pa = a.update(step, {{"w", {pa, GrowthSignal::dense_gradient(g), Tensor()}}}).layers[0].param;
      pb = b.update(step, {{"w", {pb, GrowthSignal::block_scores(scores, bh, bw), Tensor()}}}).layers[0].param;
      ASSERT_EQ(positions(pa), positions(pb)) << format << " step " << step;
      ASSERT_EQ(to_dense(pa).to_vector<float>(), to_dense(pb).to_vector<float>());
      for (int64_t q : positions(pa)) ever.insert(q);
      ASSERT_DOUBLE_EQ(b.itop_rate("w"), static_cast<double>(ever.size()) / (24 * 40)) << format << " step " << step;
      const std::vector<int> record = b.state_tensors().at("w.ever_active").to_vector<int>();
      ASSERT_EQ(static_cast<size_t>(std::count(record.begin(), record.end(), 1)), ever.size());
    }
    // The record (kept per block for BSR) round-trips through its per-entry checkpoint form.
    MaskUpdater c(config("gradient", 0.4));
    c.add_layer("w", pb);
    c.load_state_tensors(b.state_tensors());
    EXPECT_DOUBLE_EQ(c.itop_rate("w"), b.itop_rate("w")) << format;
    EXPECT_EQ(c.state_tensors().at("w.ever_active").to_vector<int>(),
              b.state_tensors().at("w.ever_active").to_vector<int>());
    EXPECT_TRUE(throws_with(
        [&] {
          b.update(0, {{"w", {pb, GrowthSignal::dense_gradient(random_dense({3, 5}, 1)), Tensor()}}});
        },
        {"dense gradient of shape [24, 40]", "block scores", "got a dense gradient of shape [3, 5]"}));
  }
}

// The growth signal is typed: a layer is handed the kind it grows by (or a
// block layer its dense gradient), and anything else is refused naming the
// layer, what was expected and what came, before any layer changes.
TEST(MaskUpdater, RefusesTheWrongKindOfGrowthSignal) {
  MaskUpdater u(config("gradient", 0.4));
  const Tensor elements = random_param({4, 6}, 8, 1, "csr");
  const Tensor blocks = random_bsr(5, {0, 1, 4, 6, 9, 13, 18, 22, 27});  // [24, 40] in 4x8 blocks
  u.add_layer("fc1", elements);
  u.add_layer("fc2", blocks);
  int remapped = 0;
  u.set_state_remap([&](const std::string&, const Tensor&, const Tensor&) { ++remapped; });
  const GrowthSignal fine_blocks = GrowthSignal::block_scores(random_dense({6, 5}, 2).to(DType::kF64), 4, 8);
  // Block scores for a layer that grows entry by entry.
  EXPECT_TRUE(throws_with(
      [&] {
        u.update(0, {{"fc1", {elements, GrowthSignal::block_scores(random_dense({2, 3}, 3), 2, 2), Tensor()}},
                     {"fc2", {blocks, fine_blocks, Tensor()}}});
      },
      {"layer fc1", "growth 'gradient'", "expected the dense gradient of shape [4, 6]",
       "got block scores of 2x2 blocks, grid [2, 3]"}));
  // Block scores of another block size.
  EXPECT_TRUE(throws_with(
      [&] {
        u.update(0, {{"fc1", {elements, GrowthSignal::dense_gradient(random_dense({4, 6}, 4)), Tensor()}},
                     {"fc2", {blocks, GrowthSignal::block_scores(random_dense({6, 5}, 5), 8, 4), Tensor()}}});
      },
      {"layer fc2", "expected block scores of 4x8 blocks, grid [6, 5]", "got block scores of 8x4 blocks"}));
  // None where the policy reads one.
  EXPECT_TRUE(throws_with(
      [&] {
        u.update(0, {{"fc1", {elements, GrowthSignal::dense_gradient(random_dense({4, 6}, 4)), Tensor()}},
                     {"fc2", {blocks, GrowthSignal(), Tensor()}}});
      },
      {"layer fc2", "expected block scores of 4x8 blocks", "got none"}));
  EXPECT_EQ(remapped, 0) << "a layer changed before the signals were checked";
  // The right kinds update both.
  const MaskUpdateResult r =
      u.update(0, {{"fc1", {elements, GrowthSignal::dense_gradient(random_dense({4, 6}, 4)), Tensor()}},
                   {"fc2", {blocks, fine_blocks, Tensor()}}});
  EXPECT_EQ(remapped, 2);
  EXPECT_TRUE(r.layers[0].changed && r.layers[1].changed);
}

// A policy called with the wrong kind (a user's updater, say) says so too.
TEST(MaskUpdater, GradientGrowthNamesTheLayerOnTheWrongKind) {
  const GrowthPolicyPtr rigl = make_growth_policy("gradient");
  const std::vector<int64_t> candidates = {0, 1, 2, 3};
  GrowthInput in;
  in.layer = "fc3";
  in.param = random_param({4, 4}, 4, 1, "csr");
  in.k = 1;
  in.candidates = &candidates;
  in.growth_signal = GrowthSignal::block_scores(random_dense({2, 2}, 1), 2, 2);
  EXPECT_TRUE(throws_with([&] { rigl->grow(in); },
                          {"growth 'gradient' (layer fc3)", "expected the dense gradient of shape [4, 4]",
                           "got block scores of 2x2 blocks"}));
  EXPECT_TRUE(throws_with([&] { rigl->group_scores(in); }, {"layer fc3", "got block scores"}));
  in.block_rows = in.block_cols = 2;
  in.growth_signal = GrowthSignal::dense_gradient(random_dense({4, 4}, 2));
  EXPECT_TRUE(throws_with([&] { rigl->grow(in); }, {"layer fc3", "expected block scores of 2x2 blocks, grid [2, 2]",
                                                    "got a dense gradient of shape [4, 4]"}));
  in.growth_signal = GrowthSignal::block_scores(random_dense({2, 2}, 1), 2, 2);
  EXPECT_EQ(rigl->grow(in).size(), 1u);
}

// LeNet-300-100 at ERK 90% sparsity (fc3 comes out dense), RigL with the
// cosine schedule: every layer keeps its allocated nnz through every update;
// the dense layer has no room and never changes.
TEST(MaskUpdater, LeNetErkRigLKeepsEveryLayersAllocation) {
  DensityOptions o;
  o.distribution = DensityDistribution::kErdosRenyiKernel;
  o.density = 0.1;
  const std::vector<LayerShape> shapes = {{"fc1", {300, 784}}, {"fc2", {100, 300}}, {"fc3", {10, 100}}};
  const std::vector<LayerDensity> alloc = layer_densities(shapes, o);
  MaskUpdaterConfig c = config("gradient", 0.3);
  c.schedule = DropSchedule::kCosine;
  c.interval = 100;
  c.end_step = 1000;
  MaskUpdater u(c);
  std::map<std::string, Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params[shapes[i].name] = random_param(shapes[i].shape, alloc[i].nnz, 30 + i, "csr");
    u.add_layer(shapes[i].name, params[shapes[i].name]);
  }
  for (int64_t step = 0; step < 1000; ++step) {
    if (!u.needs_dense_gradient(step)) continue;
    std::map<std::string, LayerInputs> in;
    for (size_t i = 0; i < shapes.size(); ++i) {
      in[shapes[i].name] = {params[shapes[i].name],
                            GrowthSignal::dense_gradient(random_dense(shapes[i].shape, 500 + step + i)), Tensor()};
    }
    const MaskUpdateResult r = u.update(step, in);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const LayerUpdate& l = r.layers[i];
      EXPECT_EQ(l.name, shapes[i].name);
      EXPECT_EQ(nnz(l.param), alloc[i].nnz) << l.name << " step " << step;
      EXPECT_EQ(l.dropped, l.grown);
      params[l.name] = l.param;
    }
    EXPECT_GT(r.layers[0].dropped, 0);
    EXPECT_FALSE(r.layers[2].changed);
    EXPECT_EQ(r.numel, 266200);
    EXPECT_EQ(r.nnz, alloc[0].nnz + alloc[1].nnz + alloc[2].nnz);
    EXPECT_NEAR(r.density(), 0.1, 1e-4);
  }
  EXPECT_GT(u.itop_rate("fc1"), alloc[0].density);
  EXPECT_DOUBLE_EQ(u.itop_rate("fc3"), 1.0);
}

// The selection runs where the keys are: CUDA tensors go through the
// sparsifiers' CUDA top-k kernels, and must give the CPU's masks.
TEST(MaskUpdater, CpuAndCudaMasksAgree) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the CUDA selection kernels cannot run here";
  for (const std::string growth : {"random", "gradient"}) {
    MaskUpdater cpu(config(growth, 0.5)), gpu(config(growth, 0.5));
    Tensor pc = random_param({32, 48}, 300, 21, "csr");
    Tensor pg = to_device(pc, Device::cuda(0));
    cpu.add_layer("w", pc);
    gpu.add_layer("w", pg);
    for (int64_t step = 0; step < 100; step += 10) {
      const Tensor g = random_dense({32, 48}, 2000 + step);
      pc = cpu.update(step, {{"w", {pc, GrowthSignal::dense_gradient(g), Tensor()}}}).layers[0].param;
      pg = gpu.update(step, {{"w", {pg, GrowthSignal::dense_gradient(g.to(Device::cuda(0))), Tensor()}}})
               .layers[0]
               .param;
      ASSERT_EQ(pg.device(), Device::cuda(0));
      ASSERT_EQ(positions(pc), positions(pg)) << growth << " step " << step;
      ASSERT_EQ(to_dense(pc).to_vector<float>(), to_dense(pg).to_vector<float>());
    }
  }
  // BSR, walked block by block on the device, given block scores or the dense gradient.
  for (const bool scores : {false, true}) {
    MaskUpdater cpu(config("gradient", 0.5)), gpu(config("gradient", 0.5));
    Tensor pc = random_bsr(8, {0, 3, 4, 6, 7, 8, 17, 19, 24, 29});
    Tensor pg = to_device(pc, Device::cuda(0));
    cpu.add_layer("w", pc);
    gpu.add_layer("w", pg);
    for (int64_t step = 0; step < 100; step += 10) {
      const Tensor g = random_dense({24, 40}, 3000 + step);
      // The signal as the dense-gradient view hands it over: block scores of
      // a probed weight, or the dense gradient of a swapped one.
      auto signal = [&](Device d) {
        return scores ? GrowthSignal::block_scores(sparsify::block_scores(g, 4, 8, false, "test").to(d), 4, 8)
                      : GrowthSignal::dense_gradient(g.to(d));
      };
      const LayerUpdate uc = cpu.update(step, {{"w", {pc, signal(Device::cpu()), Tensor()}}}).layers[0];
      const LayerUpdate ug = gpu.update(step, {{"w", {pg, signal(Device::cuda(0)), Tensor()}}}).layers[0];
      pc = uc.param;
      pg = ug.param;
      ASSERT_EQ(pg.device(), Device::cuda(0));
      ASSERT_EQ(positions(pc), positions(pg)) << "bsr step " << step;
      ASSERT_EQ(ug.keep_from.device(), Device::cuda(0));  // formed where the values are
      ASSERT_EQ(uc.keep_from.to_vector<int64_t>(), ug.keep_from.to_vector<int64_t>());
      ASSERT_EQ(to_dense(pc).to_vector<float>(), to_dense(pg).to_vector<float>());
    }
  }
}

}  // namespace
}  // namespace coppice
