// Formats declared by their levels in a YAML job (sparsity.formats): a
// hybrid (BSR outside, COO inside each 2x2 block) and an ELLPACK, each
// trained with RigL on the CPU (its mask updates read the format's stored
// positions), checkpointed and resumed bit for bit; and the declaration's
// errors named by the key they are about.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tests/train/train_test_util.h"
#include "train/config.h"
#include "train/job.h"

namespace coppice {
namespace {

using testing_train::temp_dir;

constexpr const char* kFormats =
    "  formats:\n"
    "    job_bsr_of_coo: {block: [2, 2], levels: [dense, compressed, 'compressed(non-unique)', singleton]}\n"
    "    job_ellpack: {levels: [dense, ranged], index: i64}\n"
    "    job_nm24: {levels: [dense, 'n_out_of_m(2:4, u8)']}\n"
    "    job_nm24_i32: {levels: [dense, 'n_out_of_m(2:4)']}\n"
    "    job_bsr2: {block: 2, levels: [dense, compressed, dense, dense]}\n";

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

// `yaml` with its first `from` replaced by `to`.
std::string with(std::string yaml, const std::string& from, const std::string& to) {
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? yaml : yaml.replace(at, from.size(), to);
}

class LevelFormatJob : public ::testing::TestWithParam<const char*> {};

TEST_P(LevelFormatJob, TrainsWithRigLCheckpointsAndResumesBitForBit) {
  const std::string format = GetParam();
  const std::string rigl = "rigl, end_step: 45, interval: 10, drop_fraction: 0.3";
  const JobConfig config = parse(job(format, rigl));
  ASSERT_EQ(config.sparsity.formats.size(), 5u);
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

// job_nm24_i32 is n:m with i32 coordinates, which no built-in format is: the
// generic kernels run it, and RigL regrows inside its groups.
INSTANTIATE_TEST_SUITE_P(Declared, LevelFormatJob, ::testing::Values("job_bsr_of_coo", "job_ellpack", "job_nm24_i32"));

// A format declared as nm's levels is nm under another name: its groups come
// from the declaration, RigL regrows inside them (rigl_nm too) and SR-STE
// projects onto it, on nm's kernels, so the run is nm's bit for bit.
TEST(LevelFormatNmJob, ADeclaredNmTrainsAsNmDoes) {
  for (const char* method :
       {"rigl, end_step: 45, interval: 10, drop_fraction: 0.3",
        "rigl_nm, end_step: 45, interval: 10, drop_fraction: 0.3", "sr_ste, interval: 2, decay: 0.0002"}) {
    SCOPED_TRACE(method);
    const TrainingSummary nm = run_job(parse(job("nm", method)));
    const TrainingSummary declared = run_job(parse(job("job_nm24", method)));
    ASSERT_EQ(declared.losses.size(), nm.losses.size());
    for (size_t i = 0; i < nm.losses.size(); ++i) EXPECT_EQ(declared.losses[i], nm.losses[i]) << "step " << i;
    ASSERT_EQ(declared.mask_updates.size(), nm.mask_updates.size());
    EXPECT_FALSE(nm.mask_updates.empty());
    for (size_t i = 0; i < nm.mask_updates.size(); ++i)
      EXPECT_EQ(declared.mask_updates[i].grown, nm.mask_updates[i].grown) << "update " << i;
  }
  // SR-STE on the generic kernels: trains, and its masks move.
  const TrainingSummary generic = run_job(parse(job("job_nm24_i32", "sr_ste, interval: 2, decay: 0.0002")));
  EXPECT_LT(generic.losses.back(), 0.8 * generic.losses.front());
}

TEST(LevelFormatNmJob, TheDeclarationFixesTheGroups) {
  EXPECT_NE(refusal(with(job("job_nm24", "static"), "format: job_nm24}", "format: job_nm24, n: 1}"))
                .find("sparsity.rules[0].n: format job_nm24 is declared with 2:4 groups, got 1:4"),
            std::string::npos)
      << refusal(with(job("job_nm24", "static"), "format: job_nm24}", "format: job_nm24, n: 1}"));
  // GMP cannot keep n per group; nor can a format of other groups take SR-STE.
  EXPECT_NE(refusal(job("job_nm24", "gmp, end_step: 40")).find("sparsity.rules[0]"), std::string::npos)
      << refusal(job("job_nm24", "gmp, end_step: 40"));
  EXPECT_NE(refusal(job("job_ellpack", "sr_ste"))
                .find("needs an n:m format (nm, or one declared with n:m groups), "
                      "got job_ellpack"),
            std::string::npos)
      << refusal(job("job_ellpack", "sr_ste"));
}

TEST(LevelFormatJobErrors, NameTheKeyAndTheReason) {
  const std::string ellpack = "job_ellpack: {levels: [dense, ranged]";
  const std::string bad_level = with(job("job_ellpack", "static"), "[dense, ranged]", "[dense, rangd]");
  EXPECT_NE(refusal(bad_level).find("sparsity.formats.job_ellpack.levels[1]: "), std::string::npos)
      << refusal(bad_level);
  EXPECT_NE(refusal(bad_level).find("rangd"), std::string::npos) << refusal(bad_level);

  const std::string taken = with(job("csr", "static"), "job_ellpack: {", "csr: {");
  EXPECT_NE(refusal(taken).find("sparsity.formats.csr: "), std::string::npos) << refusal(taken);
  EXPECT_NE(refusal(taken).find("format 'csr' is already registered"), std::string::npos) << refusal(taken);

  const std::string twice = with(job("job_ellpack", "static"), "job_bsr_of_coo: {", "job_ellpack: {");
  EXPECT_EQ(refusal(twice), "sparsity.formats.job_ellpack: given twice (YAML would keep only the first)");

  const std::string order = with(job("job_order", "static"), ellpack, "job_order: {levels: [singleton, dense]");
  EXPECT_NE(refusal(order).find("level 0 (singleton(0)): a singleton must follow a non-unique"), std::string::npos)
      << refusal(order);

  // A block that does not divide a weight: named with the rule and the weight.
  const std::string blocks = with(job("job_blocks_3", "static"), ellpack,
                                  "job_blocks_3: {block: 3, levels: [dense, compressed, dense, dense]");
  EXPECT_NE(refusal(blocks).find("sparsity.rules[0].format: cannot hold 'fc"), std::string::npos) << refusal(blocks);
  EXPECT_NE(refusal(blocks).find("block extent 3 does not divide dimension"), std::string::npos) << refusal(blocks);

  // The block: each size in range, one or two of them, a list of integers.
  EXPECT_EQ(refusal(with(job("csr", "static"), "block: [2, 2]", "block: [2, 0]")),
            "sparsity.formats.job_bsr_of_coo.block[1]: must be in [1, 16777216], got 0");
  EXPECT_EQ(refusal(with(job("csr", "static"), "block: [2, 2]", "block: [2, 2, 2]")),
            "sparsity.formats.job_bsr_of_coo.block: expected [rows, columns] or one size for both, got 3 sizes");
  EXPECT_EQ(refusal(with(job("csr", "static"), "block: [2, 2]", "block: []")),
            "sparsity.formats.job_bsr_of_coo.block: expected [rows, columns] or one size for both, got 0 sizes");
  EXPECT_EQ(refusal(with(job("csr", "static"), "block: [2, 2]", "block: [2, x]")),
            "sparsity.formats.job_bsr_of_coo.block[1]: expected an integer, got 'x'");
  // Each format is a section of the keys above.
  EXPECT_EQ(refusal(with(job("csr", "static"), "job_ellpack: {levels: [dense, ranged], index: i64}", "job_ellpack: 5")),
            "sparsity.formats.job_ellpack: expected a section (a map of keys), got '5'");
  EXPECT_NE(
      refusal(with(job("csr", "static"), "index: i64", "indexes: i64"))
          .find(
              "sparsity.formats.job_ellpack.indexes: unknown key; did you mean 'sparsity.formats.job_ellpack.index'?"),
      std::string::npos)
      << refusal(with(job("csr", "static"), "index: i64", "indexes: i64"));
}

TEST(LevelFormatJobErrors, SetReachesADeclaredFormatsKeys) {
  // --set walks into a format by its name, and can declare a new one.
  const absl::StatusOr<JobConfig> set = parse_job_config(
      job("job_set_ell", "static"),
      {"sparsity.formats.job_set_ell.levels=[dense, ranged]", "sparsity.formats.job_set_ell.index=i64"});
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->sparsity.formats.size(), 6u);
  EXPECT_EQ(set->sparsity.formats[5].first, "job_set_ell");
  EXPECT_EQ(set->sparsity.formats[5].second.index_dtype, DType::kI64);
  const absl::StatusOr<JobConfig> wrong =
      parse_job_config(job("csr", "static"), {"sparsity.formats.job_ellpack.block=x"});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(),
            "--set sparsity.formats.job_ellpack.block: sparsity.formats.job_ellpack.block expects a list of integers, "
            "got 'x'");
}

// A declaration that is BSR's trains as bsr does: its initial mask keeps
// whole blocks (FormatSpec::fixed_block), RigL drops and grows the same
// blocks, and the losses agree to rounding (an update step's forward runs
// the dense-gradient view's dense product for the declared format, the block
// probe for bsr). On the CPU, and on a GPU on bsr's CUDA kernels; a
// declaration that is no built-in's is refused for a CUDA device.
TEST(LevelFormatJob, ABuiltinsDeclarationTrainsAsTheBuiltinDoes) {
  const auto on_gpu = [](const std::string& yaml) { return with(yaml, "device: cpu", "device: cuda"); };
  EXPECT_NE(refusal(on_gpu(job("job_ellpack", "static")))
                .find("sparsity.rules[0].format: format job_ellpack trains on cuda:0 only where its declaration is a "
                      "built-in format's (its kernels run it there), and (dense(0), ranged(1)) index i64 is none; the "
                      "generic kernels run on the CPU (device: cpu)"),
            std::string::npos)
      << refusal(on_gpu(job("job_ellpack", "static")));
  const std::string rigl = "rigl, end_step: 45, interval: 10, drop_fraction: 0.3";
  const std::string bsr = with(job("bsr", rigl), "format: bsr}", "format: bsr, block_rows: 2}");
  std::vector<std::pair<std::string, std::string>> runs = {{bsr, job("job_bsr2", rigl)}};
  if (cuda_available()) runs.push_back({on_gpu(bsr), on_gpu(job("job_bsr2", rigl))});
  for (const auto& [builtin_job, declared_job] : runs) {
    SCOPED_TRACE(builtin_job.find("device: cuda") == std::string::npos ? "cpu" : "cuda");
    const TrainingSummary builtin = run_job(parse(builtin_job));
    const TrainingSummary declared = run_job(parse(declared_job));
    ASSERT_EQ(declared.losses.size(), builtin.losses.size());
    for (size_t i = 0; i < builtin.losses.size(); ++i)
      EXPECT_NEAR(declared.losses[i], builtin.losses[i], 1e-5 * std::abs(builtin.losses[i])) << "step " << i;
    ASSERT_EQ(declared.mask_updates.size(), builtin.mask_updates.size());
    for (size_t i = 0; i < builtin.mask_updates.size(); ++i) {
      EXPECT_EQ(declared.mask_updates[i].grown, builtin.mask_updates[i].grown) << "update " << i;
      EXPECT_EQ(declared.mask_updates[i].dropped, builtin.mask_updates[i].dropped) << "update " << i;
    }
    for (const LayerStats& l : declared.model.layers)
      if (l.name.find("weight") != std::string::npos) { EXPECT_NEAR(l.density, 0.5, 0.01) << l.name; }
  }
}

}  // namespace
}  // namespace coppice
