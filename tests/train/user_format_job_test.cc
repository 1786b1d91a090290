// A user's registered format named in a YAML job: the ELLPACK test format
// (tests/sparse/user/ellpack.h) as the format of a rule, trained on the CPU
// through its registered kernels and the counted dense fallback, saved in
// checkpoints and resumed from them; and refused by name where the run could
// not take it (prune-and-regrow changes masks in sparse/'s formats only).
#include <string>

#include "gtest/gtest.h"
#include "tests/sparse/user/ellpack.h"
#include "tests/train/train_test_util.h"
#include "train/config.h"
#include "train/job.h"

namespace coppice {
namespace {

using testing_train::temp_dir;

// The tiny job with ELLPACK weights at half density.
std::string ellpack_job(const std::string& mask_update, const std::string& extra = "") {
  return testing_train::tiny_job(
      "sparsity:\n"
      "  density: 0.5\n"
      "  distribution: uniform\n"
      "  rules: [{regex: 'fc[0-9]+\\.weight', format: ellpack}]\n"
      "mask_update: {method: " +
      mask_update + "}\n" + extra);
}

JobConfig parse(const std::string& yaml) {
  absl::StatusOr<JobConfig> job = parse_job_config(yaml, {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : JobConfig();
}

TEST(UserFormatJob, TrainsCheckpointsAndResumes) {
  ASSERT_TRUE(ellpack_test::registered());
  const std::string ckpt = temp_dir("ellpack_job");
  const std::string yaml = ellpack_job("static", "checkpoint: {dir: '" + ckpt + "', every_steps: 20}\n");
  const int sddmm_before = ellpack_test::sddmm_calls;
  const TrainingSummary full = run_job(parse(ellpack_job("static")));
  EXPECT_GT(ellpack_test::sddmm_calls, sddmm_before);  // the weight gradients at the pattern
  ASSERT_EQ(full.final_step, 60);
  EXPECT_LT(full.losses.back(), 0.7 * full.losses.front());
  for (const LayerStats& l : full.model.layers) {
    if (l.name.find("weight") == std::string::npos) continue;
    EXPECT_EQ(l.format, "ellpack") << l.name;
    EXPECT_NEAR(l.density, 0.5, 0.05) << l.name;
  }

  JobRunOptions stop;
  stop.stop_at_step = 20;
  EXPECT_EQ(run_job(parse(yaml), stop).final_step, 20);
  JobRunOptions resume;
  resume.resume = ckpt;
  const TrainingSummary second = run_job(parse(yaml), resume);
  EXPECT_EQ(second.start_step, 20);
  ASSERT_EQ(second.losses.size(), 40u);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(second.losses[i], full.losses[20 + i]) << "step " << 20 + i;
}

TEST(UserFormatJob, RefusedWherePruneAndRegrowNeedsABuiltInFormat) {
  absl::StatusOr<JobConfig> job = parse_job_config(ellpack_job("rigl, end_step: 30, interval: 10"), {});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(std::string(job.status().message()).find("sparsity.rules[0].format: rigl changes masks and needs one of"),
            std::string::npos)
      << job.status();
}

TEST(UserFormatJob, UnknownFormatsListTheRegisteredOnes) {
  absl::StatusOr<JobConfig> job = parse_job_config(
      ellpack_job("static").replace(ellpack_job("static").find("format: ellpack"), 15, "format: ellpak"), {});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(std::string(job.status().message()).find("ellpack"), std::string::npos) << job.status();
}

}  // namespace
}  // namespace coppice
