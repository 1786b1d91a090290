// sparsity.propagate in a run (train/propagated_rules.h): on an MLP with relu
// outputs (configs/lenet300_relu_outputs.yaml) the inferred rules are the
// hand-written ones and train bit for bit as they do; on the ViT job
// (configs/vit_sparse_attention.yaml) nothing is inferred and nothing
// changes; the plan file lists every tensor; its key's errors.
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/io/json.h"
#include "tests/train/train_test_util.h"
#include "train/config.h"
#include "train/job.h"

namespace coppice {
namespace {

using testing_train::temp_dir;

ValidatedJob load(const std::string& path, std::vector<std::string> overrides) {
  absl::StatusOr<ValidatedJob> job = load_validated_job(path, overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) std::abort();
  return std::move(*job);
}

// A job file's overrides so that a run writes its checkpoints to a
// temporary directory, no metrics, and what `more` asks for.
std::vector<std::string> quiet(std::vector<std::string> more) {
  static int runs = 0;
  std::vector<std::string> o = {"logging.metrics=", "logging.progress=false", "evaluation.every_steps=0", "device=cpu",
                                "checkpoint.dir=" + temp_dir("propagation_ckpt_" + std::to_string(runs++))};
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

// The first `steps` steps of a run (its schedules at the job's full length).
JobRunOptions first_steps(int64_t steps, const std::string& run_dir = "") {
  JobRunOptions o;
  o.stop_at_step = steps;
  o.run_dir = run_dir;
  return o;
}

// A tensor's measured density, a JSON number with a fraction (which the
// library's header reader does not take), read here and left out.
double take_density(std::string& line) {
  const std::string key = ", \"density\": ";
  const size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  const size_t end = line.find('}', at);
  const double d = std::stod(line.substr(at + key.size(), end - at - key.size()));
  line.erase(at, end - at);
  return d;
}

std::vector<json::Value> plan_lines(const std::string& path, std::vector<double>* densities = nullptr) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<json::Value> lines;
  for (std::string line; std::getline(in, line);) {
    const double d = take_density(line);
    if (d >= 0 && densities != nullptr) densities->push_back(d);
    absl::StatusOr<json::Value> v = json::parse(line);
    EXPECT_TRUE(v.ok()) << line;
    if (v.ok()) lines.push_back(*v);
  }
  return lines;
}

std::string field(const json::Value& line, const std::string& key) {
  const json::Value* v = line.find(key);
  return v == nullptr ? std::string("(missing)") : v->as_string();
}

// The header says how many tensors and rules follow, and that many follow,
// each tensor with every field.
void expect_complete(const std::vector<json::Value>& lines, size_t rules) {
  ASSERT_FALSE(lines.empty());
  const json::Value& header = lines.front();
  ASSERT_NE(header.find("tensors"), nullptr);
  EXPECT_EQ(header.find("rules")->as_integer(), static_cast<int64_t>(rules));
  EXPECT_EQ(lines.size(), 1 + rules + static_cast<size_t>(header.find("tensors")->as_integer()));
  for (size_t i = 1 + rules; i < lines.size(); ++i) {
    for (const char* key :
         {"name", "op", "module", "forward", "gradient", "format", "made_by", "consumed_by", "rule", "left_dense"})
      EXPECT_NE(lines[i].find(key), nullptr) << key << " in line " << i;
  }
}

TEST(PropagationJob, MlpReluOutputsAreInferredAsWrittenAndTrainTheSame) {
  const std::string job = "configs/lenet300_relu_outputs.yaml";
  const std::string run_dir = temp_dir("propagation_mlp");
  const TrainingSummary written = run_job(load(job, quiet({})), first_steps(30));
  const TrainingSummary inferred =
      run_job(load(job, quiet({"sparsity.outputs=[]", "sparsity.propagate=true", "sparsity.propagate_max_density=1"})),
              first_steps(30, run_dir));
  ASSERT_EQ(inferred.losses.size(), 30u);
  ASSERT_EQ(written.losses.size(), 30u);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(inferred.losses[i], written.losses[i]) << "step " << i;
  EXPECT_TRUE(inferred.fallback_counts.empty());

  std::vector<double> densities;
  const std::vector<json::Value> lines = plan_lines(run_dir + "/plan.jsonl", &densities);
  expect_complete(lines, 2);
  ASSERT_EQ(densities.size(), 2u) << "fc1's and fc2's relu outputs, measured";
  for (double d : densities) EXPECT_TRUE(d > 0.1 && d < 0.9) << d;
  EXPECT_EQ(field(lines[1], "rule"), "fc1");
  EXPECT_EQ(field(lines[2], "rule"), "fc2");
  std::set<std::string> names;
  for (const json::Value& l : lines) {
    if (l.find("tensor") == nullptr) continue;
    names.insert(field(l, "name"));
    if (field(l, "rule") == "fc1") {
      EXPECT_EQ(field(l, "forward"), "dense, zero where <= 0, >= 0");
      EXPECT_EQ(field(l, "format"), "csr");
      EXPECT_EQ(field(l, "consumed_by"), "fc2 takes it in linear(csr, dense) on cpu");
      // The CPU's linear_relu: a GEMM, the bias and the relu.
      EXPECT_EQ(field(l, "made_by"), "gemm(dense, dense) on cpu; add(dense, dense) on cpu; relu(dense) on cpu");
    }
  }
  for (const char* p : {"input", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"})
    EXPECT_EQ(names.count(p), 1u) << p;
}

TEST(PropagationJob, VitPlanListsEveryTensorAndChangesNothing) {
  const std::string job = "configs/vit_sparse_attention.yaml";
  const std::string run_dir = temp_dir("propagation_vit");
  const TrainingSummary off = run_job(load(job, quiet({})), first_steps(3));
  const TrainingSummary on = run_job(load(job, quiet({"sparsity.propagate=true"})), first_steps(3, run_dir));
  ASSERT_EQ(on.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(on.losses[i], off.losses[i]) << "step " << i;

  const std::vector<json::Value> lines = plan_lines(run_dir + "/plan.jsonl");
  expect_complete(lines, 0);
  int scores = 0;
  for (const json::Value& l : lines) {
    if (l.find("tensor") == nullptr || field(l, "op") != "SampledScores") continue;
    ++scores;
    EXPECT_EQ(field(l, "forward").rfind("csr, pattern of #", 0), 0u) << field(l, "forward");
    EXPECT_EQ(field(l, "gradient"), field(l, "forward"));
    EXPECT_NE(field(l, "made_by").find("sddmm("), std::string::npos) << field(l, "made_by");
  }
  EXPECT_EQ(scores, 2) << "one sampled score matrix per block";
}

TEST(PropagationJob, PlanKeyErrors) {
  const std::string job = "configs/lenet300_relu_outputs.yaml";
  for (const std::string key : {"sparsity.plan=plan.jsonl", "sparsity.propagate_max_density=0.5"}) {
    absl::StatusOr<ValidatedJob> no_propagate = load_validated_job(job, quiet({key}));
    ASSERT_FALSE(no_propagate.ok()) << key;
    EXPECT_NE(no_propagate.status().message().find(": applies when sparsity.propagate is true"), std::string::npos)
        << no_propagate.status();
  }
  // By default (0.1) relu outputs at half density stay dense, and the plan says why.
  const std::string run_dir = temp_dir("propagation_dense_enough");
  const TrainingSummary none =
      run_job(load(job, quiet({"sparsity.outputs=[]", "sparsity.propagate=true"})), first_steps(2, run_dir));
  EXPECT_EQ(none.final_step, 2);
  const std::vector<json::Value> lines = plan_lines(run_dir + "/plan.jsonl");
  EXPECT_EQ(lines.front().find("rules")->as_integer(), 0);
  int left = 0;
  for (const json::Value& l : lines) {
    if (l.find("tensor") == nullptr || field(l, "left_dense").empty()) continue;
    ++left;
    EXPECT_NE(field(l, "left_dense").find("non-zero, above max_density 0.1"), std::string::npos);
  }
  EXPECT_EQ(left, 2) << "fc1's and fc2's relu outputs";

  // The plan may not overwrite the metrics file (or any other input or output).
  const std::string dir = temp_dir("propagation_clash");
  const ValidatedJob clash = load(job, quiet({"sparsity.propagate=true", "sparsity.plan=" + dir + "/m.jsonl",
                                              "logging.metrics=" + dir + "/m.jsonl"}));
  try {
    run_job(ValidatedJob(clash.config, nullptr, clash.schedule));
    ADD_FAILURE() << "a plan over the metrics file ran";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("sparsity.plan"), std::string::npos) << e.what(); }
}

}  // namespace
}  // namespace coppice
