// run_job (train/job.h) on tiny synthetic jobs on the CPU (an MLP 20-16-3
// for 60 steps): dense, RigL at 80 % sparsity and GMP learn with the right
// densities, metrics go to <run dir>/metrics.jsonl, a checkpointed run
// stopped half-way resumes to the same end as an uninterrupted one; and the
// `trainer` binary exits 2 with one line on a bad job and 0 on a good one;
// bf16 RigL learns like f32, f16 learns under a dynamic loss scale and
// resumes from its checkpoint bit for bit.
#include "train/job.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/nm.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_files.h"
#include "train/config.h"
#include "train/summary.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;
using testing_train::run_trainer;
using testing_train::RunResult;
using testing_train::temp_dir;
using testing_train::tiny_job;
using testing_train::trainer_path;

double mean(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to), 0.0) /
         static_cast<double>(to - from);
}

JobConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> job = parse_job_config(yaml, overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

std::map<std::string, double> densities(const TrainingSummary& s) {
  std::map<std::string, double> d;
  for (const LayerStats& l : s.model.layers) d[l.name] = l.density;
  return d;
}

void expect_learns(const TrainingSummary& s) {
  ASSERT_EQ(s.final_step, 60);
  ASSERT_EQ(s.losses.size(), 60u);
  EXPECT_LT(mean(s.losses, 50, 60), 0.5 * mean(s.losses, 0, 10));
  ASSERT_TRUE(s.test.has_value());
  EXPECT_EQ(s.test->examples, 96);
  EXPECT_GT(s.test->accuracy, 0.8);
}

const char* kRigl =
    "sparsity:\n"
    "  density: 0.2\n"
    "  distribution: uniform\n"
    "  rules: [{regex: 'fc[0-9]+\\.weight', format: csr}]\n"
    "mask_update: {method: rigl, end_step: 45, interval: 10, drop_fraction: 0.3}\n";

TEST(RunJob, DenseLearnsAndWritesMetrics) {
  const std::string dir = temp_dir("job_dense");
  JobRunOptions opts;
  opts.run_dir = dir;
  const TrainingSummary s = run_job(parse(tiny_job("")), opts);
  expect_learns(s);
  for (const auto& [name, d] : densities(s)) EXPECT_EQ(d, 1.0) << name;
  EXPECT_TRUE(s.mask_updates.empty());

  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  ASSERT_TRUE(in.good());
  std::string line, last;
  int train_lines = 0;
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"train\"") != std::string::npos) ++train_lines;
    last = line;
  }
  EXPECT_GE(train_lines, 6);
  EXPECT_NE(last.find("\"kind\":\"summary\""), std::string::npos) << last;
}

// The run trains the model that validation built (ValidatedJob), and trains
// it as a model built afresh for the run would train, bit for bit.
TEST(RunJob, TrainsTheModelValidationBuilt) {
  absl::StatusOr<ValidatedJob> validated = parse_validated_job(tiny_job(kRigl));
  ASSERT_TRUE(validated.ok()) << validated.status();
  const JobConfig config = validated->config;
  const SparsitySchedule schedule = validated->schedule;
  const ModulePtr built = validated->model;
  ASSERT_FALSE(built->parameter("fc1.weight").value().is_sparse());
  const TrainingSummary taken = run_job(std::move(*validated));
  EXPECT_TRUE(built->parameter("fc1.weight").value().is_sparse()) << "the run did not train validation's model";
  const TrainingSummary fresh = run_job(ValidatedJob(config, make_model(config.model), schedule));
  EXPECT_EQ(taken.losses, fresh.losses);
  EXPECT_EQ(run_job(config).losses, fresh.losses);
}

TEST(RunJob, RigL80Percent) {
  const TrainingSummary s = run_job(parse(tiny_job(kRigl)));
  expect_learns(s);
  const std::map<std::string, double> d = densities(s);
  // round(0.2 * 320) / 320 and round(0.2 * 48) / 48, kept through the updates.
  EXPECT_DOUBLE_EQ(d.at("fc1.weight"), 64.0 / 320.0);
  EXPECT_DOUBLE_EQ(d.at("fc2.weight"), 10.0 / 48.0);
  for (const LayerStats& l : s.model.layers) {
    if (l.name.find("weight") != std::string::npos) { EXPECT_EQ(l.format, "csr") << l.name; }
  }
  // Updates at 0, 10, ..., 40; each read the dense gradient (RigL).
  ASSERT_EQ(s.mask_updates.size(), 5u);
  EXPECT_EQ(s.dense_gradient_steps, (std::vector<int64_t>{0, 10, 20, 30, 40}));
  EXPECT_GT(s.mask_updates[0].grown.at("fc1.weight"), 0);
  // The update steps' time is kept apart from the ordinary steps'.
  EXPECT_EQ(s.ordinary_steps, s.final_step - 5);
  EXPECT_GT(s.update_step_seconds, 0.0);
  EXPECT_GT(s.ordinary_step_seconds, 0.0);
  EXPECT_LE(s.update_step_seconds + s.ordinary_step_seconds, s.seconds);
  EXPECT_NE(format_summary(s).find("mask updates: 5 steps took"), std::string::npos) << format_summary(s);
  EXPECT_NE(summary_json(s).str().find("\"mask_update_steps\":5"), std::string::npos) << summary_json(s).str();
}

// optimizer.name: adagrad, with RigL changing masks (its sums remapped with
// the weights' values as any optimizer state is), learns the tiny job.
TEST(RunJob, AdagradLearnsWithRigL) {
  std::string job = tiny_job(kRigl);
  const std::string sgd = "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}";
  ASSERT_NE(job.find(sgd), std::string::npos);
  job.replace(job.find(sgd), sgd.size(), "optimizer: {name: adagrad, lr: 0.1}");
  const TrainingSummary s = run_job(parse(job));
  expect_learns(s);
  EXPECT_EQ(s.mask_updates.size(), 5u);
}

// mask_update.growth names a registered policy in place of the method's.
TEST(RunJob, GrowthByName) {
  EXPECT_EQ(parse(tiny_job(kRigl)).mask_update.updater.growth, "gradient");
  std::string yaml = tiny_job(kRigl);
  yaml.replace(yaml.find("drop_fraction: 0.3}"), 19, "drop_fraction: 0.3, growth: random}");
  const JobConfig j = parse(yaml);
  EXPECT_EQ(j.mask_update.updater.growth, "random");
  const TrainingSummary s = run_job(j);
  expect_learns(s);
  EXPECT_TRUE(s.dense_gradient_steps.empty()) << "random growth reads no gradient";
}

// keep_going (a Python callback's early stop): the run ends after the step
// it returns false on, with its checkpoint and summary.
TEST(RunJob, KeepGoingEndsTheRunEarly) {
  const std::string ckpt = temp_dir("job_keep_going");
  JobRunOptions opts;
  std::vector<double> seen;
  opts.keep_going = [&](int64_t done, double loss) {
    seen.push_back(loss);
    return done < 7;
  };
  const TrainingSummary s = run_job(parse(tiny_job(std::string(kRigl) + "checkpoint: {dir: '" + ckpt + "'}\n")), opts);
  EXPECT_EQ(s.final_step, 7);
  EXPECT_EQ(s.losses, seen);
  auto list = list_checkpoints(ckpt);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->back().step, 7);
}

// N:M dynamic sparse training: RigL within each group of four, two kept.
TEST(RunJob, RigLNmKeepsTwoOfEveryFour) {
  const TrainingSummary s =
      run_job(parse(tiny_job("sparsity:\n"
                             "  rules: [{regex: 'fc[0-9]+\\.weight', format: nm, n: 2, m: 4}]\n"
                             "mask_update: {method: rigl_nm, end_step: 45, interval: 10, drop_fraction: 0.3}\n")));
  expect_learns(s);
  const std::map<std::string, double> d = densities(s);
  EXPECT_DOUBLE_EQ(d.at("fc1.weight"), 0.5);
  EXPECT_DOUBLE_EQ(d.at("fc2.weight"), 0.5);
  for (const LayerStats& l : s.model.layers) {
    if (l.name.find("weight") != std::string::npos) { EXPECT_EQ(l.format, "nm") << l.name; }
  }
  ASSERT_EQ(s.mask_updates.size(), 5u);
  EXPECT_EQ(s.dense_gradient_steps, (std::vector<int64_t>{0, 10, 20, 30, 40}));
  // round(0.3 * 160) of fc1's 160 stored entries dropped and grown in the first update.
  EXPECT_EQ(s.mask_updates[0].dropped.at("fc1.weight"), 48);
  EXPECT_EQ(s.mask_updates[0].grown.at("fc1.weight"), 48);
}

// A transposable 2:4 weight: its mask is 2:4 along rows and columns, and stays so.
TEST(RunJob, TransposableNmIsNmAlongColumnsToo) {
  absl::StatusOr<ValidatedJob> v =
      parse_validated_job(tiny_job("sparsity:\n"
                                   "  rules: [{name: fc1.weight, format: nm, n: 2, m: 4, transposable: true}]\n"
                                   "mask_update: {method: static}\n"));
  ASSERT_TRUE(v.ok()) << v.status();
  const ModulePtr model = v->model;
  const TrainingSummary s = run_job(std::move(*v));
  expect_learns(s);
  const Tensor w = to_dense(model->parameter("fc1.weight").value());
  ASSERT_EQ(w.shape(), (Shape{16, 20}));
  const Tensor nz = ne(w, 0.0).to(DType::kI64);
  // Every 4 consecutive entries of a row, and of a column, hold at most 2 non-zeros (zeros may be kept ones).
  const std::vector<int64_t> b = nz.to_vector<int64_t>();
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t g = 0; g < 5; ++g) {
      int64_t k = 0;
      for (int64_t c = 4 * g; c < 4 * g + 4; ++c) k += b[static_cast<size_t>(r * 20 + c)];
      EXPECT_LE(k, 2) << "row " << r << " group " << g;
    }
  for (int64_t c = 0; c < 20; ++c)
    for (int64_t g = 0; g < 4; ++g) {
      int64_t k = 0;
      for (int64_t r = 4 * g; r < 4 * g + 4; ++r) k += b[static_cast<size_t>(r * 20 + c)];
      EXPECT_LE(k, 2) << "column " << c << " group " << g;
    }
}

// SR-STE: dense weights trained through their 2:4 projection learn, the
// layers count as 2:4 (what forward uses), and the trained model forwards
// with the 2:4 projection of its final dense weights.
const char* kSrSte =
    "sparsity:\n"
    "  rules: [{regex: 'fc[0-9]+\\.weight', format: nm, n: 2, m: 4}]\n"
    "mask_update: {method: sr_ste}\n";

TEST(RunJob, SrSteLearnsThroughTheProjection) {
  absl::StatusOr<ValidatedJob> v = parse_validated_job(tiny_job(kSrSte));
  ASSERT_TRUE(v.ok()) << v.status();
  const ModulePtr model = v->model;
  const TrainingSummary s = run_job(std::move(*v));
  expect_learns(s);
  for (const LayerStats& l : s.model.layers) {
    EXPECT_EQ(l.format, "nm") << l.name;
    EXPECT_DOUBLE_EQ(l.density, 0.5) << l.name;
  }
  EXPECT_EQ(s.model.stored_parameters, s.model.dense_parameters);  // the weights themselves stay dense
  // Masks recomputed after every step; the dense gradient needs no dense-gradient steps.
  EXPECT_EQ(s.mask_updates.size(), 60u);
  EXPECT_TRUE(s.dense_gradient_steps.empty());
  int64_t flips = 0;
  for (const MaskUpdateStats& u : s.mask_updates) flips += u.dropped.at("fc1.weight");
  EXPECT_GT(flips, 0) << "the masks never followed the dense weights";
  const Variable w = model->parameter("fc1.weight");
  ASSERT_TRUE(w.value().is_dense());
  EXPECT_EQ(to_dense(model->viewed_parameter("fc1.weight").value()).to_vector<float>(),
            nm_decompress(nm_compress(w.value(), 2, 4)).to_vector<float>());
}

// Transposable: the projection is 2:4 along rows and columns after training.
TEST(RunJob, SrSteTransposableStaysNmAlongColumns) {
  absl::StatusOr<ValidatedJob> v =
      parse_validated_job(tiny_job("sparsity:\n"
                                   "  rules: [{name: fc1.weight, format: nm, n: 2, m: 4, transposable: true}]\n"
                                   "mask_update: {method: sr_ste, interval: 5}\n"));
  ASSERT_TRUE(v.ok()) << v.status();
  const ModulePtr model = v->model;
  expect_learns(run_job(std::move(*v)));
  const Tensor p = model->viewed_parameter("fc1.weight").value();
  ASSERT_EQ(p.layout(), Layout::kNm);
  const std::vector<int64_t> kept = nm_impl(p, "test").indices().to(DType::kI64).to_vector<int64_t>();
  std::vector<int64_t> mask(16 * 20, 0);
  for (size_t k = 0; k < kept.size(); ++k) {
    const int64_t row = static_cast<int64_t>(k) / 10, group = (static_cast<int64_t>(k) % 10) / 2;
    mask[static_cast<size_t>(row * 20 + group * 4 + kept[k])] = 1;
  }
  for (int64_t c = 0; c < 20; ++c)
    for (int64_t g = 0; g < 4; ++g) {
      int64_t k = 0;
      for (int64_t r = 4 * g; r < 4 * g + 4; ++r) k += mask[static_cast<size_t>(r * 20 + c)];
      EXPECT_EQ(k, 2) << "column " << c << " group " << g;
    }
}

// A resumed SR-STE run goes on bit for bit: the dense weights come back, and
// so do the masks (with interval 4, the checkpoint at step 30 holds masks
// made from the weights of step 28).
TEST(RunJob, SrSteCheckpointAndResumeAreExact) {
  const std::string ckpt = temp_dir("job_ckpt_sr_ste");
  const std::string method = "mask_update: {method: sr_ste, interval: 4, decay: 0.01}\n";
  const std::string rules = "sparsity:\n  rules: [{regex: 'fc[0-9]+\\.weight', format: nm, n: 2, m: 4}]\n";
  const std::string yaml = tiny_job(rules + method + "checkpoint: {dir: '" + ckpt + "', every_steps: 20}\n");
  const TrainingSummary full = run_job(parse(tiny_job(rules + method)));
  JobRunOptions stop;
  stop.stop_at_step = 30;
  const TrainingSummary first = run_job(parse(yaml), stop);
  auto saved = read_checkpoint(first.last_checkpoint);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_TRUE(saved->has_updater);
  EXPECT_EQ(saved->updater.count("fc1.weight.mask"), 1u);
  for (const auto& [name, t] : saved->model)
    EXPECT_TRUE(t.is_dense()) << name << " is saved as " << t.format() << ", not as the dense weight";
  JobRunOptions resume;
  resume.resume = ckpt;
  const TrainingSummary second = run_job(parse(yaml), resume);
  EXPECT_EQ(second.start_step, 30);
  ASSERT_EQ(second.losses.size(), 30u);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(second.losses[i], full.losses[30 + i]) << "step " << 30 + i;
  ASSERT_TRUE(second.test && full.test);
  EXPECT_EQ(second.test->loss, full.test->loss);
  EXPECT_EQ(densities(second), densities(full));
  // The interval and the decay may change on resume; the method may not.
  resume.allow_changes = {"mask_update.decay"};
  EXPECT_TRUE(run_job(parse(yaml, {"mask_update.decay=0.001"}), resume).final_step == 60);
  const JobConfig rigl =
      parse(tiny_job(rules + "mask_update: {method: rigl_nm, end_step: 40}\n" + "checkpoint: {dir: '" + ckpt + "'}\n"));
  resume.allow_changes = {"*"};
  std::string e;
  try {
    run_job(rigl, resume);
  } catch (const Error& err) { e = err.what(); }
  EXPECT_NE(e.find("mask_update.method: sr_ste -> rigl_nm"), std::string::npos) << e;
}

TEST(RunJob, GmpPrunesToFinalDensity) {
  const TrainingSummary s = run_job(
      parse(tiny_job("sparsity:\n"
                     "  rules: [{regex: 'fc[0-9]+\\.weight', format: csr}]\n"
                     "mask_update: {method: gmp, start_step: 10, end_step: 40, frequency: 10, initial_density: 1.0, "
                     "final_density: 0.2}\n")));
  expect_learns(s);
  const std::map<std::string, double> d = densities(s);
  EXPECT_NEAR(d.at("fc1.weight"), 0.2, 0.01);
  EXPECT_NEAR(d.at("fc2.weight"), 0.2, 0.03);
  for (const LayerStats& l : s.model.layers) EXPECT_EQ(l.format, "csr") << l.name;
}

// warmup_start_factor defaults to 0, which linear_warmup refuses; run_job
// warms up from 0 itself.
TEST(RunJob, WarmupFromZeroThenCosine) {
  const TrainingSummary s = run_job(parse(tiny_job("lr_schedule: {name: cosine, warmup_steps: 10}\n")));
  expect_learns(s);
}

TEST(RunJob, CheckpointAndResumeContinue) {
  const std::string ckpt = temp_dir("job_ckpt");
  const std::string yaml = tiny_job(std::string(kRigl) + "checkpoint: {dir: '" + ckpt + "', every_steps: 20}\n");
  const TrainingSummary full = run_job(parse(tiny_job(kRigl)));

  JobRunOptions stop;
  stop.stop_at_step = 30;
  const TrainingSummary first = run_job(parse(yaml), stop);
  EXPECT_EQ(first.final_step, 30);
  auto list = list_checkpoints(ckpt);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 20);
  EXPECT_EQ((*list)[1].step, 30);
  EXPECT_EQ(first.last_checkpoint, (*list)[1].path);

  // --resume (JobRunOptions::resume) overrides the job's checkpoint.resume.
  JobRunOptions resume;
  resume.resume = ckpt;
  const TrainingSummary second = run_job(parse(yaml), resume);
  EXPECT_EQ(second.start_step, 30);
  EXPECT_EQ(second.final_step, 60);
  ASSERT_EQ(second.losses.size(), 30u);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(second.losses[i], full.losses[30 + i]) << "step " << 30 + i;
  ASSERT_TRUE(second.test && full.test);
  EXPECT_EQ(second.test->loss, full.test->loss);
  EXPECT_EQ(densities(second), densities(full));
}

// ---- resuming: the fingerprint, runs, metrics ---------------------------------------------

std::string error_of(const JobConfig& job, const JobRunOptions& opts) {
  try {
    run_job(job, opts);
  } catch (const Error& e) { return e.what(); }
  return "";
}

// The RigL job with checkpoints every 20 steps in `ckpt`.
std::string rigl_with_checkpoints(const std::string& ckpt) {
  return tiny_job(std::string(kRigl) + "checkpoint: {dir: '" + ckpt + "', every_steps: 20}\n");
}

TEST(RunJob, ResumeRefusesAnotherJobsCheckpointNamingTheKeys) {
  const std::string ckpt = temp_dir("job_other");
  JobRunOptions stop;
  stop.stop_at_step = 30;
  run_job(parse(rigl_with_checkpoints(ckpt)), stop);

  JobRunOptions resume;
  resume.resume = ckpt;
  // Another density: the checkpoint's masks are not this job's.
  std::string e = error_of(parse(rigl_with_checkpoints(ckpt), {"sparsity.density=0.1"}), resume);
  EXPECT_NE(e.find("holds the state of another job"), std::string::npos) << e;
  EXPECT_NE(e.find("sparsity.fc1.weight: csr density=0.20000000000000001 -> csr density=0.10000000000000001"),
            std::string::npos)
      << e;
  // A dense job.
  e = error_of(parse(tiny_job("checkpoint: {dir: '" + ckpt + "'}\n")), resume);
  EXPECT_NE(e.find("mask_update.method: rigl -> dense"), std::string::npos) << e;
  // Edited hyperparameters: refused, and allowed on purpose.
  const JobConfig edited = parse(rigl_with_checkpoints(ckpt), {"optimizer.momentum=0.5", "optimizer.lr=0.01"});
  e = error_of(edited, resume);
  EXPECT_NE(e.find("optimizer.lr: 0.050000000000000003 -> 0.01; optimizer.momentum: 0.90000000000000002 -> 0.5"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--allow-changes optimizer.lr,optimizer.momentum"), std::string::npos) << e;
  resume.allow_changes = {"optimizer.lr"};
  e = error_of(edited, resume);
  EXPECT_NE(e.find("optimizer.momentum: 0.90000000000000002 -> 0.5;"), std::string::npos) << e;
  EXPECT_EQ(e.find("optimizer.lr:"), std::string::npos) << e;
  resume.allow_changes = {"optimizer.*"};
  EXPECT_EQ(error_of(edited, resume), "");
  // An allowed change does not cover a structural one.
  resume.allow_changes = {"*"};
  e = error_of(parse(rigl_with_checkpoints(ckpt), {"sparsity.density=0.1"}), resume);
  EXPECT_NE(e.find("holds the state of another job"), std::string::npos) << e;
}

TEST(RunJob, ResumeTakesTheLastRunsCheckpointNeverAnOlderRunsFinalOne) {
  const std::string ckpt = temp_dir("job_stale");
  // An older run that finished (its final checkpoint is at step 60).
  run_job(parse(rigl_with_checkpoints(ckpt)));
  // A new run in the same directory stops at step 10 (the stop writes its
  // one checkpoint): resuming the directory continues it, not the older run.
  JobRunOptions stop;
  stop.stop_at_step = 10;
  const JobConfig job = parse(rigl_with_checkpoints(ckpt));
  run_job(job, stop);
  JobRunOptions resume;
  resume.resume = ckpt;
  const TrainingSummary s = run_job(job, resume);
  EXPECT_EQ(s.start_step, 10) << "resumed the older run's final checkpoint";

  // A fresh run that died before its first checkpoint: refused, naming the
  // other runs' checkpoints.
  ASSERT_TRUE(write_run_marker(ckpt, {"00000000000000ff", "", 1}).ok());
  const std::string e = error_of(job, resume);
  EXPECT_NE(e.find("run 00000000000000ff, the last to start in '" + ckpt + "', wrote no checkpoint"), std::string::npos)
      << e;
  EXPECT_NE(e.find("not taking another run's checkpoint silently"), std::string::npos) << e;
}

TEST(RunJob, ResumedMetricsDoNotRepeatSteps) {
  const std::string ckpt = temp_dir("job_metrics");
  const std::string metrics = ckpt + "/metrics.jsonl";
  const std::string yaml = rigl_with_checkpoints(ckpt + "/c");
  const std::vector<std::string> log = {"logging.metrics=" + metrics};
  JobRunOptions stop;
  stop.stop_at_step = 30;
  run_job(parse(yaml, log), stop);
  // The run got to step 50 (metrics written, the last line cut short) before
  // it died; its newest checkpoint is at 30.
  {
    std::ofstream out(metrics, std::ios::app);
    out << "{\"kind\":\"train\",\"step\":40,\"loss\":1}\n{\"kind\":\"train\",\"step\":50,\"loss\":1}\n{\"kind\":\"tr";
  }
  JobRunOptions resume;
  resume.resume = ckpt + "/c";
  run_job(parse(yaml, log), resume);
  std::ifstream in(metrics);
  std::string line;
  std::vector<int64_t> steps;
  int summaries = 0;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"step\":");
    ASSERT_NE(at, std::string::npos) << line;
    if (line.find("\"kind\":\"train\"") != std::string::npos) steps.push_back(std::stoll(line.substr(at + 7)));
    if (line.find("\"kind\":\"summary\"") != std::string::npos) ++summaries;
  }
  // Every 10 steps and after each mask update (steps 1, 11, ...), each once:
  // the dead run's records after step 30 are gone, the resumed run's follow.
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 10, 11, 20, 21, 30, 31, 40, 41, 50, 60}));
  EXPECT_EQ(summaries, 1);
  std::ifstream again(metrics);
  const std::string all((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.find("\"loss\":1}"), std::string::npos) << "a record of the dead run after step 30 survived";
}

// ---- sparse to dense: the learning-rate ramp after densify_step ----------------------------

// Static CSR weights at density 0.2, dense after 30 of the 60 steps, under a
// cosine schedule with a warm-up of 5.
const char* kSpdf =
    "sparsity:\n"
    "  density: 0.2\n"
    "  distribution: uniform\n"
    "  rules: [{regex: 'fc[0-9]+\\.weight', format: csr}]\n"
    "mask_update: {method: static, densify_step: 30}\n"
    "lr_schedule: {name: cosine, warmup_steps: 5}\n";

// The train records of a metrics file as step -> (loss, lr), both as
// written (17 digits: equal strings are equal doubles).
std::map<int64_t, std::pair<std::string, std::string>> train_records(const std::string& path) {
  std::map<int64_t, std::pair<std::string, std::string>> out;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  auto value = [&](const std::string& key) {
    const size_t at = line.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key << " in " << line;
    const size_t from = at + key.size() + 3;
    return line.substr(from, line.find_first_of(",}", from) - from);
  };
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"train\"") == std::string::npos) continue;
    const int64_t step = std::stoll(value("step"));
    EXPECT_EQ(out.count(step), 0u) << "step " << step << " recorded twice in " << path;
    out[step] = {value("loss"), value("lr")};
  }
  return out;
}

// densify_warmup_steps W multiplies every group's lr by (s - densify_step +
// 1) / W at steps s = densify_step .. densify_step + W - 1 and leaves every
// other step's the schedule's, bit for bit; without the key (or with 0) the
// schedule is the job's lr_schedule alone, and the run is bit for bit the
// one without the ramp.
TEST(RunJob, DensifyWarmupRampsTheLrAfterDensifyStep) {
  const JobConfig plain = parse(tiny_job(kSpdf));
  const JobConfig zero = parse(tiny_job(kSpdf), {"mask_update.densify_warmup_steps=0"});
  const JobConfig ramped = parse(tiny_job(kSpdf), {"mask_update.densify_warmup_steps=10"});
  const JobConfig cosine = parse(tiny_job("lr_schedule: {name: cosine, warmup_steps: 5}\n"));
  EXPECT_EQ(plain.mask_update.densify_warmup_steps, 0);
  const LrSchedulePtr p = job_lr_schedule(plain, 60), z = job_lr_schedule(zero, 60), r = job_lr_schedule(ramped, 60),
                      c = job_lr_schedule(cosine, 60);
  for (int64_t s = 0; s < 60; ++s) {
    EXPECT_EQ(p->lr(0.05, s), c->lr(0.05, s)) << "step " << s;  // densify_step alone leaves the lrs
    EXPECT_EQ(z->lr(0.05, s), p->lr(0.05, s)) << "step " << s;
    const double expected = s >= 30 && s < 40 ? p->lr(0.05, s) * static_cast<double>(s - 29) / 10.0 : p->lr(0.05, s);
    EXPECT_EQ(r->lr(0.05, s), expected) << "step " << s;
  }
  // Around densify_step: the last sparse step has the schedule's lr, the
  // first dense one a tenth of it, the ramp's last all of it.
  EXPECT_EQ(r->lr(0.05, 29), p->lr(0.05, 29));
  EXPECT_DOUBLE_EQ(r->lr(0.05, 30), 0.1 * p->lr(0.05, 30));
  EXPECT_DOUBLE_EQ(r->lr(0.05, 31), 0.2 * p->lr(0.05, 31));
  EXPECT_DOUBLE_EQ(r->lr(0.05, 38), 0.9 * p->lr(0.05, 38));
  EXPECT_EQ(r->lr(0.05, 39), p->lr(0.05, 39));
  EXPECT_EQ(r->lr(0.05, 40), p->lr(0.05, 40));
  // A ramp that ends at the last step.
  const LrSchedulePtr late = job_lr_schedule(parse(tiny_job(kSpdf), {"mask_update.densify_warmup_steps=30"}), 60);
  EXPECT_DOUBLE_EQ(late->lr(0.05, 59), p->lr(0.05, 59));
  EXPECT_DOUBLE_EQ(late->lr(0.05, 44), p->lr(0.05, 44) / 2);

  // The runs: the default is bit for bit the run without the key; the ramp's
  // metrics carry its lrs (a record at step n has the lr step n trains with)
  // and its losses leave the plain run's once a ramped step has trained.
  const std::string dir = temp_dir("job_densify_ramp");
  auto run = [&](JobConfig job, const std::string& name) {
    job.logging.every_steps = 1;
    job.logging.metrics = dir + "/" + name + ".jsonl";
    return run_job(job);
  };
  const TrainingSummary sp = run(plain, "plain"), sz = run(zero, "zero"), sr = run(ramped, "ramped");
  EXPECT_EQ(sz.losses, sp.losses);
  EXPECT_EQ(train_records(dir + "/zero.jsonl"), train_records(dir + "/plain.jsonl"));
  ASSERT_EQ(sr.losses.size(), 60u);
  for (size_t i = 0; i <= 30; ++i) EXPECT_EQ(sr.losses[i], sp.losses[i]) << "step " << i;
  EXPECT_NE(sr.losses[31], sp.losses[31]);
  expect_learns(sr);
  const auto records = train_records(dir + "/ramped.jsonl");
  ASSERT_EQ(records.size(), 60u);
  for (const auto& [step, rec] : records) EXPECT_EQ(std::stod(rec.second), r->lr(0.05, step)) << "step " << step;
}

// A run stopped at densify_step, inside the ramp and past it, and resumed
// each time, records the same losses and lrs as an uninterrupted one; the
// checkpoints record the key, and a resume that changes it is refused
// unless allowed.
TEST(RunJob, DensifyWarmupResumeInsideAndPastTheRampIsExact) {
  const std::string dir = temp_dir("job_densify_ramp_resume");
  const std::string ckpt = dir + "/ckpt";
  const std::vector<std::string> ramp = {"mask_update.densify_warmup_steps=10", "logging.every_steps=1"};
  std::vector<std::string> full_sets = ramp, chain_sets = ramp;
  full_sets.push_back("logging.metrics=" + dir + "/full.jsonl");
  chain_sets.push_back("logging.metrics=" + dir + "/chain.jsonl");
  const std::string yaml = tiny_job(std::string(kSpdf) + "checkpoint: {dir: '" + ckpt + "'}\n");
  const TrainingSummary full = run_job(parse(tiny_job(kSpdf), full_sets));

  TrainingSummary last;
  int64_t from = 0;
  for (int64_t stop : {30, 34, 45, -1}) {  // the first ramped step, inside the ramp, past it, the end
    JobRunOptions opts;
    opts.stop_at_step = stop;
    if (from > 0) opts.resume = ckpt;
    last = run_job(parse(yaml, chain_sets), opts);
    EXPECT_EQ(last.start_step, from);
    const int64_t to = stop < 0 ? 60 : stop;
    ASSERT_EQ(last.final_step, to);
    for (int64_t i = from; i < to; ++i)
      EXPECT_EQ(last.losses[static_cast<size_t>(i - from)], full.losses[static_cast<size_t>(i)]) << "step " << i;
    from = to;
  }
  EXPECT_EQ(train_records(dir + "/chain.jsonl"), train_records(dir + "/full.jsonl"));
  ASSERT_TRUE(last.test && full.test);
  EXPECT_EQ(last.test->loss, full.test->loss);

  // The fingerprint names the key; changing it needs --allow-changes.
  JobRunOptions resume;
  resume.resume = ckpt;
  std::string e = error_of(parse(yaml, {"mask_update.densify_warmup_steps=5"}), resume);
  EXPECT_NE(e.find("mask_update.densify_warmup_steps: 10 -> 5"), std::string::npos) << e;
  e = error_of(parse(yaml), resume);
  EXPECT_NE(e.find("mask_update.densify_warmup_steps: 10 -> (none)"), std::string::npos) << e;
  resume.allow_changes = {"mask_update.densify_warmup_steps"};
  EXPECT_EQ(error_of(parse(yaml, {"mask_update.densify_warmup_steps=5"}), resume), "");
}

// ---- bf16 / f16 (precision.dtype) ------------------------------------------------------------

TEST(RunJob, Bf16RigLLearnsLikeF32) {
  const TrainingSummary f32 = run_job(parse(tiny_job(kRigl)));
  const TrainingSummary bf16 = run_job(parse(tiny_job(std::string(kRigl) + "precision: {dtype: bf16}\n")));
  expect_learns(bf16);
  EXPECT_EQ(densities(bf16), densities(f32));
  ASSERT_EQ(bf16.mask_updates.size(), f32.mask_updates.size());
  EXPECT_NEAR(mean(bf16.losses, 50, 60), mean(f32.losses, 50, 60), 0.05);
  ASSERT_TRUE(bf16.test && f32.test);
  EXPECT_NEAR(bf16.test->accuracy, f32.test->accuracy, 0.05);
  EXPECT_EQ(bf16.final_loss_scale, 1.0);  // bf16: no scaling by default
  EXPECT_TRUE(bf16.skipped_steps.empty());
}

TEST(RunJob, F16WithDynamicLossScaleLearns) {
  const TrainingSummary s = run_job(parse(tiny_job("precision: {dtype: f16}\n")));
  expect_learns(s);
  EXPECT_LE(s.final_loss_scale, 65536.0);
  EXPECT_GT(s.final_loss_scale, 1.0);
  EXPECT_LT(s.skipped_steps.size(), 20u);
}

// A static scale that overflows f16 on every step: every step is skipped, and
// so is every mask update (their gradients are inf), leaving the masks as
// they started.
TEST(RunJob, SkippedStepsMakeNoMaskUpdates) {
  const TrainingSummary s =
      run_job(parse(tiny_job(std::string(kRigl) + "precision: {dtype: f16, loss_scale: 1.0e30}\n")));
  EXPECT_EQ(s.skipped_steps.size(), s.losses.size());
  EXPECT_TRUE(s.mask_updates.empty());
}

// Parameters, master weights, moments and the loss scale all come back from
// the checkpoint: the resumed half equals the uninterrupted run bit for bit.
TEST(RunJob, F16RigLCheckpointAndResumeAreExact) {
  const std::string ckpt = temp_dir("job_ckpt_f16");
  const std::string precision = "precision: {dtype: f16, loss_scale: dynamic}\n";
  const std::string yaml =
      tiny_job(std::string(kRigl) + precision + "checkpoint: {dir: '" + ckpt + "', every_steps: 20}\n");
  const TrainingSummary full = run_job(parse(tiny_job(std::string(kRigl) + precision)));
  JobRunOptions stop;
  stop.stop_at_step = 30;
  run_job(parse(yaml), stop);
  JobRunOptions resume;
  resume.resume = ckpt;
  const TrainingSummary second = run_job(parse(yaml), resume);
  EXPECT_EQ(second.start_step, 30);
  ASSERT_EQ(second.losses.size(), 30u);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(second.losses[i], full.losses[30 + i]) << "step " << 30 + i;
  ASSERT_TRUE(second.test && full.test);
  EXPECT_EQ(second.test->loss, full.test->loss);
  EXPECT_EQ(second.final_loss_scale, full.final_loss_scale);
  EXPECT_EQ(densities(second), densities(full));
}

// ---- the binary -----------------------------------------------------------------------------

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(TrainerBinary, BadJobExitsTwoWithOneLine) {
  ASSERT_TRUE(fs::exists(trainer_path())) << trainer_path();
  const std::string dir = temp_dir("trainer_bad");
  const std::string bad = write_file(dir, "bad.yaml", tiny_job("") + "checkpoint: {every_steps: -3}\n");
  RunResult r = run_trainer("--config '" + bad + "'", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("checkpoint.every_steps"), std::string::npos) << r.err;

  const std::string good = write_file(dir, "good.yaml", tiny_job(""));
  r = run_trainer("--config '" + good + "' --set optimizer.lrr=0.1", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("did you mean 'optimizer.lr'"), std::string::npos) << r.err;

  r = run_trainer("--config '" + good + "' --bogus", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;

  r = run_trainer("--config '" + dir + "/missing.yaml'", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;

  // A run-time error: a CUDA device on this CPU-only test build (or a
  // machine without a GPU) is exit 1 with "trainer: error: ...".
  r = run_trainer("--config '" + good + "' --set device=cuda", dir);
  if (r.code != 0) {
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.rfind("trainer: error: ", 0), 0u) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
  }
}

TEST(TrainerBinary, GoodJobExitsZeroWithSummary) {
  const std::string dir = temp_dir("trainer_good");
  const std::string good = write_file(dir, "good.yaml", tiny_job(kRigl));
  RunResult r = run_trainer(
      "--config '" + good + "' --set training.steps=30 --set mask_update.end_step=25 --run-dir '" + dir + "/run'", dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("trained 30/30 steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(dir) / "run" / "metrics.jsonl"));

  r = run_trainer("--help", dir);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("usage: trainer --config FILE"), std::string::npos) << r.out;
}

// --max-steps: a quick trial of a job as shipped (its RigL end step, 45, is
// past the trial's end), with a checkpoint at the stop that --resume goes on
// from to the job's own 60 steps.
TEST(TrainerBinary, MaxStepsStopsEarlyAndResumeGoesOn) {
  const std::string dir = temp_dir("trainer_max_steps");
  const std::string job =
      write_file(dir, "job.yaml", tiny_job(std::string(kRigl) + "checkpoint: {dir: '" + dir + "/ckpt'}\n"));
  RunResult r = run_trainer("--config '" + job + "' --max-steps 12", dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("trained 12/60 steps"), std::string::npos) << r.out;
  auto list = list_checkpoints(dir + "/ckpt");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_FALSE(list->empty());
  EXPECT_EQ(list->back().step, 12);
  r = run_trainer("--config '" + job + "' --resume '" + dir + "/ckpt'", dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("trained 60/60 steps"), std::string::npos) << r.out;
  r = run_trainer("--config '" + job + "' --max-steps 0", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--max-steps needs a whole number of steps >= 1, got '0'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace coppice
