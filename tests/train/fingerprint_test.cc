#include "train/fingerprint.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace coppice {
namespace {

std::string error_of(const std::vector<std::string>& allowed) {
  const absl::Status s = check_allowed_changes(allowed);
  return s.ok() ? std::string("ok") : std::string(s.message());
}

TEST(AllowedChanges, KeysPrefixesAndAll) {
  EXPECT_EQ(error_of({"optimizer.lr", "training.steps", "data.batch_size"}), "ok");
  EXPECT_EQ(error_of({"optimizer.*", "data.synthetic.*", "precision.*", "*"}), "ok");
  EXPECT_EQ(error_of({"mask_update.decay", "distributed.world_size", "seed", "data.files"}), "ok");
  EXPECT_TRUE(is_adjustable_fingerprint_key("lr_schedule.warmup_steps"));
  EXPECT_FALSE(is_adjustable_fingerprint_key("optimizer.name"));  // structural
  // The learning-rate ramp after densify_step changes lrs, not what the
  // saved tensors are: a resume may change it on purpose; densify_step never.
  EXPECT_EQ(error_of({"mask_update.densify_warmup_steps"}), "ok");
  EXPECT_TRUE(is_adjustable_fingerprint_key("mask_update.densify_warmup_steps"));
  EXPECT_FALSE(is_structural_key("mask_update.densify_warmup_steps"));
  EXPECT_TRUE(is_structural_key("mask_update.densify_step"));
}

TEST(AllowedChanges, UnknownKeysGetADidYouMean) {
  EXPECT_EQ(error_of({"optimizer.lrr"}),
            "'optimizer.lrr' is not a setting that a resume may change; did you mean 'optimizer.lr'?");
  EXPECT_EQ(error_of({"optimizer.lr", "training.step"}),
            "'training.step' is not a setting that a resume may change; did you mean 'training.steps'?");
  EXPECT_EQ(error_of({"lr"}), "'lr' is not a setting that a resume may change; did you mean 'optimizer.lr'?");
  EXPECT_EQ(error_of({"optimiser.*"}),
            "'optimiser.*' is not a setting that a resume may change; did you mean 'optimizer.*'?");
  EXPECT_EQ(error_of({"optimizer"}), "'optimizer' is a section; did you mean 'optimizer.*'?");
  EXPECT_EQ(error_of({"zzz.qqq"}),
            "'zzz.qqq' is not a setting that a resume may change (a key such as optimizer.lr, a prefix such as "
            "optimizer.*, or *)");
}

TEST(AllowedChanges, JobKeysNoCheckpointRecords) {
  EXPECT_EQ(error_of({"logging.metrics"}),
            "'logging.metrics' is not recorded in checkpoints, so a resume may change it without --allow-changes");
  EXPECT_EQ(error_of({"logging.*"}).rfind("'logging.*' is not a setting that a resume may change", 0), 0u);
}

TEST(AllowedChanges, StructuralAndMalformedEntries) {
  EXPECT_EQ(error_of({"model.options.sizes"}).rfind("'model.options.sizes' cannot change on resume", 0), 0u);
  EXPECT_EQ(error_of({"sparsity.*"}).rfind("'sparsity.*' cannot change on resume", 0), 0u);
  EXPECT_EQ(error_of({"Optimizer LR"}).rfind("'Optimizer LR' is not a job setting", 0), 0u);
  // A long entry is quoted by its start and its size.
  EXPECT_EQ(error_of({std::string(100000, 'a')}).rfind("'" + std::string(60, 'a') + "...' (100000 bytes) is not", 0),
            0u);
}

}  // namespace
}  // namespace coppice
