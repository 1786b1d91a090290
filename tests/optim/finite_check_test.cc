// Non-finite values (optim/finite_check.h): the device flag over every
// format and floating dtype, one flag per slot; the checks' messages; and
// every selection that ranks scores refusing inf or NaN ones, naming the
// layer, before anything changes: prune keys, growth scores, n:m groups, the
// prune-and-regrow updater (weights, dense gradients, momentum), GMP's
// schedule and SR-STE's refresh. The loss scaler's skip test is the same
// flag; so is its step with the check made by the caller.
#include "optim/finite_check.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/gmp.h"
#include "optim/group_regrow.h"
#include "optim/growth.h"
#include "optim/loss_scaler.h"
#include "optim/mask_schedule.h"
#include "optim/mask_updater.h"
#include "optim/prune.h"
#include "optim/sgd.h"
#include "optim/sr_ste.h"
#include "sparse/convert.h"
#include "sparse/nm.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::random_dense;
using testing_mask::random_param;
using testing_mask::throws_with;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A dense [4, 8] tensor of ordinary values (-3, -2.75, ..., 4.75) with `bad`
// at flat position `at` (at < 0: none).
Tensor values_with(double bad, int64_t at, DType dtype = DType::kF32) {
  std::vector<double> v(32);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * static_cast<double>(i) - 3.0;
  if (at >= 0) v[static_cast<size_t>(at)] = bad;
  return from_vector(v, {4, 8}, TensorOptions(DType::kF64)).to(dtype);
}

// `t` (any format) with its value slot `slot` replaced by `bad`.
Tensor with_bad_slot(const Tensor& t, int64_t slot, double bad) {
  const Tensor v = values(t);
  std::vector<double> host = v.to(DType::kF64).to_vector<double>();
  host[static_cast<size_t>(slot)] = bad;
  return with_values(t, from_vector(host, v.shape(), TensorOptions(DType::kF64)).to(v.dtype()));
}

TEST(NonfiniteFlag, FindsInfAndNanInEveryFloatingDtype) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    const std::string what(dtype_name(dtype));
    EXPECT_TRUE(all_finite(values_with(0, -1, dtype))) << what;
    for (double bad : {kNan, kInf, -kInf}) {
      for (int64_t at : {0, 17, 31}) EXPECT_FALSE(all_finite(values_with(bad, at, dtype))) << what << " " << at;
    }
  }
  // The largest finite values are finite: the test is of the exponent bits.
  EXPECT_TRUE(all_finite(from_vector(std::vector<float>{std::numeric_limits<float>::max(), -3.0e38f})));
  EXPECT_TRUE(all_finite(from_vector(std::vector<double>{65504.0, -65504.0}).to(DType::kF16)));
  EXPECT_TRUE(all_finite(from_vector(std::vector<double>{1e-310, 0.0, -0.0})));
  // Integer, empty and undefined tensors are finite.
  EXPECT_TRUE(all_finite(arange(10)));
  EXPECT_TRUE(all_finite(Tensor()));
  EXPECT_TRUE(all_finite(zeros({0, 3})));
  // A large tensor, split over the CPU pool: a NaN at its very end.
  Tensor big = zeros({(1 << 20) + 3});
  EXPECT_TRUE(all_finite(big));
  big.data<float>()[(1 << 20) + 2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(all_finite(big));
}

TEST(NonfiniteFlag, ReadsTheStoredValuesOfEverySparseFormat) {
  const Tensor dense = values_with(0, -1);
  const Tensor mask = gt(abs(dense), 1.0);
  std::vector<Tensor> sparse;
  for (const char* format : {"coo", "csr", "csc", "masked"}) sparse.push_back(sparse_from_mask(dense, mask, format));
  sparse.push_back(dense_to_bsr(dense, 2, 2));
  sparse.push_back(nm_compress(dense, 2, 4));
  for (const Tensor& t : sparse) {
    EXPECT_TRUE(all_finite(t)) << t.format();
    EXPECT_FALSE(all_finite(with_bad_slot(t, 0, kNan))) << t.format();
    EXPECT_FALSE(all_finite(with_bad_slot(t, values(t).numel() - 1, -kInf))) << t.format();
  }
  // A masked tensor is judged by its mask-true values: position 10 (-0.5) is off the mask.
  const Tensor masked = sparse_from_mask(dense, mask, "masked");
  EXPECT_TRUE(all_finite(with_bad_slot(masked, 10, kNan)));
  EXPECT_FALSE(all_finite(with_bad_slot(masked, 0, kNan)));
}

TEST(NonfiniteFlag, SlotsTellTensorsApartWithOneRead) {
  NonfiniteFlag flag(3);
  EXPECT_FALSE(flag.value().defined());
  EXPECT_TRUE(flag.all_finite());
  flag.add(values_with(0, -1), 0);
  flag.add(values_with(kInf, 5), 2);
  flag.add(values_with(0, -1), 1);
  flag.add(values_with(kNan, 1), 2);  // folds into a flag already set
  const std::vector<float> v = flag.value().to_vector<float>();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_TRUE(std::isnan(v[2]));  // a set flag is NaN: itself a value to fold
  EXPECT_FALSE(flag.all_finite());
  EXPECT_TRUE(throws_with([&] { flag.add(values_with(0, -1), 3); }, {"slot 3 is outside [0, 3)"}));
  NonfiniteFlag folded;
  folded.add(flag.value());
  EXPECT_FALSE(folded.all_finite());
}

TEST(NonfiniteFlag, GradientsAndTheFirstThatFails) {
  Variable a(values_with(0, -1), true, "fc1.weight"), b(values_with(0, -1), true, "fc1.bias"),
      c(values_with(0, -1), true, "fc2.weight");
  a.set_grad(values_with(0, -1));
  c.set_grad(values_with(kNan, 3));
  NonfiniteFlag flag;
  flag.add_gradients({a, b, c});  // b has none
  EXPECT_FALSE(flag.all_finite());
  EXPECT_EQ(first_nonfinite_gradient({a, b, c}), "fc2.weight");
  EXPECT_EQ(first_nonfinite_gradient({a, b}), "");
  EXPECT_TRUE(all_gradients_finite({a, b}));
  EXPECT_FALSE(all_gradients_finite({a, b, c}));
}

TEST(NonfiniteFlag, ChecksNameTheOpAndWhat) {
  check_finite(values_with(0, -1), "op", "x", "");
  EXPECT_TRUE(throws_with([] { check_finite_scores(values_with(kNan, 2), "mask update (layer fc1)", "the keys"); },
                          {"mask update (layer fc1): the keys holds non-finite values (inf or NaN); refusing to "
                           "rank by them"}));
  try {
    check_finite(values_with(kInf, 2), "checkpoint", "'w'", "");
    FAIL() << "no throw";
  } catch (const NonfiniteError& e) {
    SUCCEED() << e.what();  // its own type, so that the trainer can tell it apart
  }
}

// ---- selections refuse non-finite scores -----------------------------------------

TEST(NonfiniteScores, PruneKeysAreRefused) {
  const Tensor p = random_param({8, 8}, 20, 1, "csr");
  const PatternView view = pattern_view(p, "t");
  EXPECT_TRUE(throws_with([&] { select_survivors(with_bad_slot(p, 4, kNan), view, 10, true, "prune (layer w)"); },
                          {"prune (layer w)", "prune keys", "non-finite"}));
  EXPECT_EQ(select_survivors(values(p), view, 10, true, "t").size(), 10u);
  // GMP's one-shot pruning goes through the same selection.
  EXPECT_TRUE(throws_with([&] { prune_to_density(with_bad_slot(p, 0, kInf), 0.1); }, {"non-finite"}));
}

TEST(NonfiniteScores, NmGroupsRefuseNonfiniteKeysOrScores) {
  const Tensor nm = nm_compress(random_dense({4, 8}, 3), 2, 4);
  const PatternView view = pattern_view(nm, "t");
  const Tensor g = abs(random_dense({4, 8}, 4));
  EXPECT_TRUE(throws_with(
      [&] { regrow_within_groups(view, values(with_bad_slot(nm, 1, kNan)), true, 2, 4, g, false, "nm (layer w)"); },
      {"nm (layer w)", "prune keys", "non-finite"}));
  EXPECT_TRUE(throws_with([&] { regrow_within_groups(view, values(nm), true, 2, 4, values_with(kInf, 7), false, "t"); },
                          {"growth scores", "non-finite"}));
}

MaskUpdaterConfig rigl(const std::string& growth) {
  MaskUpdaterConfig c;
  c.end_step = 10;
  c.interval = 1;
  c.growth = growth;
  c.seed = 2;
  return c;
}

TEST(NonfiniteScores, TheUpdaterRefusesNamingTheLayerBeforeAnyLayerChanges) {
  for (const char* growth : {"gradient", "momentum", "random"}) {
    MaskUpdater updater(rigl(growth));
    const Tensor w1 = random_param({8, 8}, 20, 1, "csr"), w2 = random_param({8, 8}, 20, 2, "csr");
    updater.add_layer("fc1.weight", w1);
    updater.add_layer("fc2.weight", w2);
    int remapped = 0;
    updater.set_state_remap([&](const std::string&, const Tensor&, const Tensor&) { ++remapped; });
    std::map<std::string, LayerInputs> in;
    in["fc1.weight"] = {w1, GrowthSignal::dense_gradient(random_dense({8, 8}, 5)), random_dense({8, 8}, 6)};
    in["fc2.weight"] = {w2, GrowthSignal::dense_gradient(random_dense({8, 8}, 7)), random_dense({8, 8}, 8)};
    // The second layer's weight, then its dense gradient, then its momentum
    // (each refused when handed in, whichever the policy reads).
    for (int what = 0; what < 3; ++what) {
      std::map<std::string, LayerInputs> bad = in;
      LayerInputs& l = bad["fc2.weight"];
      if (what == 0) l.param = with_bad_slot(w2, 3, kNan);
      Tensor poisoned = random_dense({8, 8}, 9);
      poisoned.data<float>()[9 + what] = what == 1 ? std::numeric_limits<float>::infinity() : std::nanf("");
      if (what == 1) l.growth_signal = GrowthSignal::dense_gradient(poisoned);
      if (what == 2) l.momentum = poisoned;
      EXPECT_TRUE(throws_with([&] { updater.update(3, bad); },
                              {"mask update (layer fc2.weight, step 3)", "non-finite", "refusing to rank"}))
          << growth << " " << what;
      EXPECT_EQ(remapped, 0) << "the first layer changed before the second was refused";
    }
    // Not an update step: nothing is ranked, nothing refused.
    std::map<std::string, LayerInputs> bad = in;
    bad["fc2.weight"].param = with_bad_slot(w2, 3, kNan);
    EXPECT_NO_THROW(updater.update(11, bad));
    // Finite inputs update as before.
    updater.update(3, in);
    EXPECT_EQ(remapped, 2) << growth;
  }
}

TEST(NonfiniteScores, MovementScoresAreRefused) {
  MaskUpdaterConfig c = rigl("random");
  c.prune = PruneCriterion::kMovement;
  MaskUpdater updater(c);
  const Tensor w = random_param({8, 8}, 20, 1, "csr");
  updater.add_layer("w", w);
  updater.accumulate_movement("w", w, with_bad_slot(w, 2, kInf));
  std::map<std::string, LayerInputs> in;
  in["w"].param = w;
  EXPECT_TRUE(throws_with([&] { updater.update(2, in); }, {"layer w", "prune keys", "non-finite"}));
}

// Parameters in a map, for the schedules.
class MapStore : public ParameterStore {
 public:
  Tensor value(const std::string& name) const override { return values.at(name); }
  Tensor unscaled_gradient(const std::string&, double) const override { return Tensor(); }
  Tensor dense_momentum(const std::string& name) const override { return zeros(values.at(name).shape()); }
  void add_to_gradient(const std::string&, const Tensor&) override {}
  void replace(const std::string& name, const Tensor& new_param, const Tensor&) override {
    values[name] = new_param;
    replaced.push_back(name);
  }
  std::map<std::string, Tensor> values;
  std::vector<std::string> replaced;
};

TEST(NonfiniteScores, GmpChecksEveryLayerBeforePruningAny) {
  GmpConfig config;
  config.end_step = 10;
  config.frequency = 1;
  GmpPruner gmp(config);
  auto store = std::make_shared<MapStore>();
  store->values["a"] = random_param({8, 8}, 64, 1, "csr");
  store->values["b"] = with_bad_slot(random_param({8, 8}, 64, 2, "csr"), 7, kNan);
  const std::unique_ptr<MaskSchedule> schedule = make_gmp_schedule(gmp, {"a", "b"}, store);
  EXPECT_TRUE(throws_with([&] { schedule->update(5, {}); }, {"gmp (layer b, step 5)", "non-finite"}));
  EXPECT_TRUE(store->replaced.empty());
}

TEST(NonfiniteScores, SrSteRefusesANonfiniteWeightAndKeepsItsMask) {
  SrSte sr(SrSteConfig{});
  const Tensor w = random_dense({4, 8}, 1);
  EXPECT_TRUE(throws_with([&] { sr.add_layer("bad", values_with(kNan, 3), 2, 4); }, {"sr_ste", "non-finite"}));
  sr.add_layer("w", w, 2, 4);
  const std::vector<int> before = sr.projection("w").mask().to_vector<int>();
  auto store = std::make_shared<MapStore>();
  store->values["w"] = values_with(kInf, 0);
  const std::unique_ptr<MaskSchedule> schedule = make_sr_ste_schedule(sr, store);
  EXPECT_TRUE(throws_with([&] { schedule->update(0, {}); }, {"sr_ste (layer w, step 0)", "non-finite"}));
  EXPECT_EQ(sr.projection("w").mask().to_vector<int>(), before);
  store->values["w"] = random_dense({4, 8}, 9);
  EXPECT_NO_THROW(schedule->update(0, {}));
}

TEST(NonfiniteFlag, TheLossScalerStepsWithTheCallersCheck) {
  Variable p(values_with(0, -1), true, "p");
  Sgd opt({p}, SgdOptions{0.1});
  LossScaler scaler = LossScaler::dynamic();
  p.set_grad(values_with(0, -1));
  const std::vector<float> before = p.value().to_vector<float>();
  EXPECT_FALSE(scaler.step(opt, /*found_inf=*/true));
  EXPECT_EQ(p.value().to_vector<float>(), before);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.scale(), 65536.0 * 0.5);
  EXPECT_TRUE(scaler.step(opt, /*found_inf=*/false));
  EXPECT_NE(p.value().to_vector<float>(), before);
  // Its own check is the same flag.
  p.set_grad(values_with(kNan, 1));
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

}  // namespace
}  // namespace coppice
