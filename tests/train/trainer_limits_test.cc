// The trainer binary on the numbers: sizes that overflowed, models
// and data larger than memory, counts outside any sane range. A bad job
// exits 2 with one line naming the key; what only the run can find (memory
// for activations) exits 1 with one "trainer: error:" line naming the bytes.
// Run under AddressSanitizer and UBSan too (.bazelrc: --config=asan, ubsan).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/text.h"
#include "gtest/gtest.h"
#include "tests/train/train_test_util.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;
using testing_train::run_trainer;
using testing_train::RunResult;
using testing_train::temp_dir;

// An MLP on synthetic blobs that trains in a moment: the base the cases change.
const char* kJob =
    "device: cpu\n"
    "model: {name: mlp, options: {sizes: [8, 16, 3]}}\n"
    "data: {dataset: synthetic, batch_size: 16, synthetic: {examples: 64, test_examples: 16, features: 8}}\n"
    "training: {steps: 2}\n"
    "logging: {progress: false}\n";

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

struct Case {
  std::string label;
  std::vector<std::string> sets;   // --set key=value
  std::vector<std::string> parts;  // in the one line, after "<job file>: "
};

RunResult run_with(const std::string& dir, const std::vector<std::string>& sets) {
  const std::string job = dir + "/job.yaml";
  std::ofstream(job) << kJob;
  std::string args = "--config '" + job + "' --run-dir '" + dir + "/run'";
  for (const std::string& s : sets) args += " --set '" + s + "'";
  return run_trainer(args, dir);
}

TEST(TrainerLimits, BadNumbersExitTwoWithOneLineNamingTheKey) {
  const std::string dir = temp_dir("trainer_limits");
  const std::string big_text = dir + "/big.txt";
  { std::ofstream(big_text) << "x"; }
  fs::resize_file(big_text, kTextMaxBytes + 1);  // sparse
  const std::vector<Case> cases = {
      {"overflowing model sizes",
       {"model.options={sizes: [2147483648, 2147483648, 10]}"},
       {"model.options.sizes: 2147483648 is more than 16777216"}},
      {"model larger than memory",
       {"model.options={sizes: [8, 16777216, 16777216, 3]}"},
       {"model.options.sizes: [8, 16777216, 16777216, 3]: ", " parameters of f32: needs ", " bytes (",
        " of host memory are available"}},
      {"synthetic examples that overflowed randint",
       {"data.synthetic.examples=2305843009213693952"},
       {"data.synthetic.examples: must be in [1, 1099511627776], got 2305843009213693952"}},
      {"synthetic data larger than memory",
       {"data.synthetic.examples=1073741824", "data.synthetic.features=1024", "model.options={sizes: [1024, 3]}"},
       {"data.synthetic.examples: 1073741840 examples of 1024 features: needs ", " of host memory are available"}},
      {"epochs that overflowed into 0 steps",
       {"training={epochs: 4611686018427387904}"},
       {"training.epochs: must be in [1, 1000000000000], got 4611686018427387904"}},
      {"epochs times batches past the step limit",
       {"training={epochs: 1000000000000}"},
       {"training.epochs: 1000000000000 epochs of 4 steps make more than 1000000000000 steps"}},
      {"an integer past int64",
       {"training.steps=99999999999999999999"},
       {"training.steps: 99999999999999999999 does not fit in a 64-bit integer"}},
      {"world size narrowed to int",
       {"distributed.world_size=4294967298"},
       {"distributed.world_size: must be in [1, 65536], got 4294967298"}},
      {"a timeout every collective misses",
       {"distributed.timeout_s=1.0e10"},
       {"distributed.timeout_s: must be in (0, 604800], got 1e+10"}},
      {"a timeout past any integer",
       {"distributed.timeout_s=1e300"},
       {"distributed.timeout_s: must be in (0, 604800], got 1e+300"}},
      {"a bucket past any integer",
       {"distributed.bucket_mb=1e300"},
       {"distributed.bucket_mb: must be in (0, 65536], got 1e+300"}},
      {"a negative seed", {"seed=-1"}, {"seed: must be in [0, 18446744073709551615], got -1"}},
      {"a text corpus past the reader's limit",
       {"model={name: char_lm}", "data={dataset: text, path: " + big_text + ", validation_split: 0.1}"},
       {"data.path: " + big_text + ": 1073741825 bytes, more than the limit of 1073741824"}},
  };
  for (const Case& c : cases) {
    const RunResult r = run_with(dir, c.sets);
    EXPECT_EQ(r.code, 2) << c.label << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << c.label << ": " << r.err;
    const std::string prefix = dir + "/job.yaml: ";
    EXPECT_EQ(r.err.rfind(prefix, 0), 0u) << c.label << ": " << r.err;
    for (const std::string& p : c.parts) EXPECT_NE(r.err.find(p), std::string::npos) << c.label << ": " << r.err;
  }
  fs::remove(big_text);
}

TEST(TrainerLimits, ActivationsLargerThanMemoryExitOneNamingTheBytes) {
  // A small model (12.6M parameters) whose hidden layer over one batch of 2M
  // examples would take 8.4 TB: only the run meets it.
  const std::string dir = temp_dir("trainer_limits_run");
  const RunResult r =
      run_with(dir, {"model.options={sizes: [8, 1048576, 3]}", "data.batch_size=2000000",
                     "data.synthetic={examples: 2000000, test_examples: 16, features: 8}", "training.steps=1"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("trainer: error: cpu allocator: 8388608000000 bytes (7.81e+03 GiB) requested but only ", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find(" are available ("), std::string::npos) << r.err;
}

TEST(TrainerLimits, BadRuntimeOptionExitsTwoBeforeTheRun) {
  // COPPICE_* variables are checked at start-up, not at the first kernel
  // that reads them (tensor/runtime_options.h).
  const std::string dir = temp_dir("trainer_limits_env");
  std::ofstream(dir + "/job.yaml") << kJob;
  const RunResult r =
      run_trainer("--config '" + dir + "/job.yaml' --run-dir '" + dir + "/run'", dir, "COPPICE_PROFILE=yes");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "trainer: COPPICE_PROFILE='yes' is not accepted: expected one of 0, 1, shapes\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
}  // namespace coppice
