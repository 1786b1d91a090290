// The sparsity schedule as the loop sees it (optim/mask_schedule.h): GMP
// changes masks on its prune steps, skipped optimizer steps included; prune
// and regrow leaves skipped steps out; both rebind changed parameters only
// through the ParameterStore, and the updater's remap keeps its store alive
// after the schedule is gone.
#include "optim/mask_schedule.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::random_param;

// Parameters in a map; replace() records each rebinding.
class FakeStore : public ParameterStore {
 public:
  Tensor value(const std::string& name) const override { return values.at(name); }
  Tensor unscaled_gradient(const std::string&, double) const override { return Tensor(); }
  Tensor dense_momentum(const std::string& name) const override {
    return zeros(values.at(name).shape(), TensorOptions(DType::kF32));
  }
  void add_to_gradient(const std::string&, const Tensor&) override { ADD_FAILURE() << "no method adds gradients"; }
  void replace(const std::string& name, const Tensor& new_param, const Tensor& keep_from) override {
    EXPECT_TRUE(keep_from.defined());
    values[name] = new_param;
    replaced.push_back(name);
  }

  std::map<std::string, Tensor> values;
  std::vector<std::string> replaced;
};

TEST(MaskSchedule, GmpPrunesOnItsStepsSkippedOrNot) {
  GmpConfig config;
  config.start_step = 100;
  config.end_step = 1100;
  config.frequency = 100;
  GmpPruner gmp(config);
  auto store = std::make_shared<FakeStore>();
  store->values["w"] = random_param({10, 20}, 200, 3, "csr");
  const std::unique_ptr<MaskSchedule> schedule = make_gmp_schedule(gmp, {"w"}, store);

  EXPECT_EQ(schedule->layers(), std::vector<std::string>{"w"});
  EXPECT_FALSE(schedule->needs_dense_gradient(600));
  EXPECT_TRUE(schedule->changes_masks(600, /*optimizer_step_skipped=*/true));
  EXPECT_FALSE(schedule->changes_masks(650, false));

  const MaskUpdateStats stats = schedule->update(600, {});
  EXPECT_EQ(stats.step, 600);
  EXPECT_EQ(store->replaced, std::vector<std::string>{"w"});
  EXPECT_EQ(stats.dropped.at("w"), 200 - nnz(store->values.at("w")));
  EXPECT_GT(stats.dropped.at("w"), 0);
  EXPECT_EQ(stats.grown.at("w"), 0);
  EXPECT_TRUE(stats.itop_rate.empty());
}

// A BSR weight loses whole blocks; the schedule counts their entries.
TEST(MaskSchedule, GmpCountsTheEntriesOfDroppedBlocks) {
  GmpConfig config;
  config.start_step = 0;
  config.end_step = 10;
  config.frequency = 10;
  config.final_density = 0.25;
  GmpPruner gmp(config);
  auto store = std::make_shared<FakeStore>();
  store->values["w"] = to_format(testing_mask::random_dense({8, 16}, 3), "bsr", FormatOptions::block(4));
  const std::unique_ptr<MaskSchedule> schedule = make_gmp_schedule(gmp, {"w"}, store);
  const MaskUpdateStats stats = schedule->update(10, {});
  EXPECT_EQ(store->values.at("w").format(), "bsr");
  EXPECT_EQ(nnz(store->values.at("w")), 2 * 16);  // 2 of the 8 blocks
  EXPECT_EQ(stats.dropped.at("w"), 6 * 16);
}

TEST(MaskSchedule, PruneAndRegrowLeavesSkippedStepsOutAndRebindsThroughTheStore) {
  MaskUpdaterConfig config;
  config.start_step = 0;
  config.end_step = 100;
  config.interval = 10;
  config.seed = 1;
  MaskUpdater updater(config);
  auto store = std::make_shared<FakeStore>();
  store->values["w"] = random_param({10, 20}, 60, 5, "csr");
  updater.add_layer("w", store->values["w"]);
  std::unique_ptr<MaskSchedule> schedule = make_prune_and_regrow_schedule(updater, store);

  EXPECT_TRUE(schedule->changes_masks(10, false));
  EXPECT_FALSE(schedule->changes_masks(10, /*optimizer_step_skipped=*/true));
  EXPECT_FALSE(schedule->changes_masks(15, false));
  EXPECT_EQ(schedule->needs_dense_gradient(10), updater.needs_dense_gradient(10));

  const MaskUpdateStats stats = schedule->update(10, {});
  EXPECT_GT(stats.dropped.at("w"), 0);
  EXPECT_EQ(stats.grown.at("w"), stats.dropped.at("w"));
  EXPECT_EQ(stats.itop_rate.count("w"), 1u);
  EXPECT_EQ(store->replaced, std::vector<std::string>{"w"});
  EXPECT_EQ(nnz(store->values.at("w")), 60);

  // The updater still reaches the store once the schedule is gone.
  schedule.reset();
  std::map<std::string, LayerInputs> inputs;
  inputs["w"].param = store->values.at("w");
  updater.update(20, inputs);
  EXPECT_EQ(store->replaced.size(), 2u);
}

}  // namespace
}  // namespace coppice
