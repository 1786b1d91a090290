// Formats declared by their levels in a YAML job (sparsity.formats): a
// hybrid (BSR outside, COO inside each 2x2 block) and an ELLPACK, each
// trained with RigL on the CPU (its mask updates read the format's stored
// positions), checkpointed and resumed bit for bit; and the declaration's
// errors named by the key they are about.
#include <string>

#include "gtest/gtest.h"
#include "tests/train/train_test_util.h"
#include "train/config.h"
#include "train/job.h"

namespace coppice {
namespace {

using testing_train::temp_dir;

constexpr const char* kFormats =
    "  formats:\n"
    "    - {name: job_bsr_of_coo, block_rows: 2, block_cols: 2,\n"
    "       levels: [dense, compressed, 'compressed(non-unique)', singleton]}\n"
    "    - {name: job_ellpack, levels: [dense, ranged], index: i64}\n";

// The tiny job (an MLP 20-16-4, so that 2x2 blocks divide both weights) with
// its weights in `format` at half density.
std::string job(const std::string& format, const std::string& mask_update, const std::string& extra = "") {
  std::string yaml = testing_train::tiny_job(std::string("sparsity:\n") + kFormats +
                                             "  density: 0.5\n"
                                             "  distribution: uniform\n"
                                             "  rules: [{regex: 'fc[0-9]+\\.weight', format: " +
                                             format + "}]\n" + "mask_update: {method: " + mask_update + "}\n" + extra);
  const std::string sizes = "sizes: [20, 16, 3]";
  yaml.replace(yaml.find(sizes), sizes.size(), "sizes: [20, 16, 4]");
  return yaml.replace(yaml.find("classes: 3"), 10, "classes: 4");
}

JobConfig parse(const std::string& yaml) {
  absl::StatusOr<JobConfig> parsed = parse_job_config(yaml, {});
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : JobConfig();
}

std::string refusal(const std::string& yaml) {
  absl::StatusOr<JobConfig> parsed = parse_job_config(yaml, {});
  return parsed.ok() ? std::string("(accepted)") : std::string(parsed.status().message());
}

class LevelFormatJob : public ::testing::TestWithParam<const char*> {};

TEST_P(LevelFormatJob, TrainsWithRigLCheckpointsAndResumesBitForBit) {
  const std::string format = GetParam();
  const std::string rigl = "rigl, end_step: 45, interval: 10, drop_fraction: 0.3";
  const JobConfig config = parse(job(format, rigl));
  ASSERT_EQ(config.sparsity.formats.size(), 2u);
  const TrainingSummary full = run_job(config);
  ASSERT_EQ(full.final_step, 60);
  EXPECT_LT(full.losses.back(), 0.7 * full.losses.front());
  for (const LayerStats& l : full.model.layers) {
    if (l.name.find("weight") == std::string::npos) continue;
    EXPECT_EQ(l.format, format) << l.name;
    EXPECT_NEAR(l.density, 0.5, 0.1) << l.name;
  }
  ASSERT_EQ(full.mask_updates.size(), 5u);
  EXPECT_GT(full.mask_updates[0].grown.at("fc1.weight"), 0);

  const std::string ckpt = temp_dir(std::string("level_job_") + format);
  const std::string with_ckpt = job(format, rigl, "checkpoint: {dir: '" + ckpt + "', every_steps: 20}\n");
  JobRunOptions stop;
  stop.stop_at_step = 20;
  EXPECT_EQ(run_job(parse(with_ckpt), stop).final_step, 20);
  JobRunOptions resume;
  resume.resume = ckpt;
  const TrainingSummary second = run_job(parse(with_ckpt), resume);
  EXPECT_EQ(second.start_step, 20);
  ASSERT_EQ(second.losses.size(), 40u);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(second.losses[i], full.losses[20 + i]) << "step " << 20 + i;
}

INSTANTIATE_TEST_SUITE_P(Declared, LevelFormatJob, ::testing::Values("job_bsr_of_coo", "job_ellpack"));

TEST(LevelFormatJobErrors, NameTheKeyAndTheReason) {
  std::string bad_level = job("job_ellpack", "static");
  bad_level.replace(bad_level.find("[dense, ranged]"), 15, "[dense, rangd]");
  EXPECT_NE(refusal(bad_level).find("sparsity.formats[1].levels[1]: "), std::string::npos) << refusal(bad_level);
  EXPECT_NE(refusal(bad_level).find("rangd"), std::string::npos) << refusal(bad_level);

  std::string taken = job("csr", "static");
  taken.replace(taken.find("name: job_ellpack"), 17, "name: csr");
  EXPECT_NE(refusal(taken).find("format 'csr' is already registered"), std::string::npos) << refusal(taken);

  std::string twice = job("job_ellpack", "static");
  twice.replace(twice.find("name: job_bsr_of_coo"), 20, "name: job_ellpack");
  EXPECT_NE(refusal(twice).find("sparsity.formats[1].name: 'job_ellpack' is declared twice"), std::string::npos)
      << refusal(twice);

  std::string order = job("job_order", "static");
  order.replace(order.find("name: job_ellpack, levels: [dense, ranged]"), 42,
                "name: job_order, levels: [singleton, dense]");
  EXPECT_NE(refusal(order).find("level 0 (singleton(0)): a singleton must follow a non-unique"), std::string::npos)
      << refusal(order);

  // A block that does not divide a weight: named with the rule and the weight.
  std::string blocks = job("job_blocks_3", "static");
  blocks.replace(blocks.find("name: job_ellpack, levels: [dense, ranged]"), 42,
                 "name: job_blocks_3, block_rows: 3, levels: [dense, compressed, dense, dense]");
  EXPECT_NE(refusal(blocks).find("sparsity.rules[0].format: cannot hold 'fc"), std::string::npos) << refusal(blocks);
  EXPECT_NE(refusal(blocks).find("block extent 3 does not divide dimension"), std::string::npos) << refusal(blocks);
}

}  // namespace
}  // namespace coppice
