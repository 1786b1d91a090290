// Graph jobs (data.dataset: docgraph) through run_job on the CPU: a GCN and
// the MLP baseline on the Linux documentation's graph (tools/setup installs
// it), scored on the test nodes only; a GCN in f64 (its CSR features cast
// by value, pattern kept); and the job's errors, each naming its key.
#include <string>
#include <vector>

#include "data/doc_graph.h"
#include "gtest/gtest.h"
#include "tests/train/train_test_util.h"
#include "train/config.h"
#include "train/job.h"

namespace coppice {
namespace {

std::string graph_job(const std::string& model, const std::string& extra = "") {
  return "seed: 0\n"
         "device: cpu\n"
         "model: {name: " +
         model +
         ", options: {sizes: '300,16,31'}}\n"
         "data: {dataset: docgraph, docgraph: {vocabulary: 300, toctree: true}}\n"
         "optimizer: {name: adam, lr: 0.01}\n"
         "training: {epochs: 30}\n"
         "evaluation: {every_steps: 15}\n"
         "logging: {progress: false}\n" +
         extra;
}

TrainingSummary run(const std::string& yaml) {
  absl::StatusOr<ValidatedJob> v = parse_validated_job(yaml);
  EXPECT_TRUE(v.ok()) << v.status();
  JobRunOptions opts;
  opts.progress_out = nullptr;
  return run_job(std::move(*v), opts);
}

// The test nodes of the jobs' split, as data/doc_graph.h draws it.
int64_t test_nodes() {
  DocGraphOptions o;
  o.vocabulary = 300;
  const DocGraph g = *load_doc_graph(o);
  int64_t n = 0;
  for (NodeSplit s : g.split) n += s == NodeSplit::kTest ? 1 : 0;
  return n;
}

TEST(DocGraphJob, GcnAndMlpTrainFullBatchAndScoreTheTestNodesOnly) {
  const int64_t tested = test_nodes();
  ASSERT_GT(tested, 0);
  const TrainingSummary gcn = run(graph_job("gcn"));
  const TrainingSummary mlp = run(graph_job("mlp"));
  for (const TrainingSummary* s : {&gcn, &mlp}) {
    EXPECT_EQ(s->final_step, 30);  // one step per epoch: the graph is one batch
    ASSERT_TRUE(s->test.has_value());
    EXPECT_EQ(s->test->examples, tested);
    EXPECT_GT(s->test->accuracy, 0.3);
  }
  EXPECT_GT(gcn.test->accuracy, mlp.test->accuracy);
}

TEST(DocGraphJob, AnF64ModelReadsTheCsrFeaturesCastByValue) {
  std::string yaml = graph_job("sage");
  yaml.replace(yaml.find("sizes: '300,16,31'"), 18, "sizes: '300,16,31', dtype: f64");
  yaml.replace(yaml.find("epochs: 30"), 10, "epochs: 3");
  const TrainingSummary s = run(yaml);
  ASSERT_TRUE(s.test.has_value());
  EXPECT_EQ(s.final_step, 3);
}

std::string refusal(const std::string& yaml) {
  absl::StatusOr<ValidatedJob> v = parse_validated_job(yaml);
  return v.ok() ? std::string("(accepted)") : std::string(v.status().message());
}

TEST(DocGraphJob, ErrorsNameTheKey) {
  const std::string blobs =
      "model: {name: gcn, options: {sizes: '20,4,3'}}\n"
      "data: {dataset: synthetic, synthetic: {features: 20, classes: 3, test_examples: 10}}\n"
      "training: {steps: 1}\n";
  EXPECT_NE(refusal(blobs).find("data.dataset: gcn reads a graph: must be docgraph, got synthetic"), std::string::npos)
      << refusal(blobs);
  std::string wrong = graph_job("gcn");
  wrong.replace(wrong.find("300,16,31"), 9, "300,16,30");
  EXPECT_NE(refusal(wrong).find("model.options.sizes: the last size must be the 31 classes of docgraph"),
            std::string::npos)
      << refusal(wrong);
  std::string missing = graph_job("gcn");
  missing.replace(missing.find("dataset: docgraph"), 17, "dataset: docgraph, path: /nonexistent/docs");
  EXPECT_NE(refusal(missing).find("data.path: document tree '/nonexistent/docs' not found"), std::string::npos)
      << refusal(missing);
  std::string split = graph_job("gcn");
  split.replace(split.find("dataset: docgraph"), 17, "dataset: docgraph, validation_split: 0.1");
  EXPECT_NE(refusal(split).find("data.validation_split"), std::string::npos) << refusal(split);
  EXPECT_NE(refusal(split).find("data.docgraph.validation_fraction"), std::string::npos) << refusal(split);
  std::string fractions = graph_job("gcn");
  fractions.replace(fractions.find("toctree: true"), 13, "train_fraction: 0.9, validation_fraction: 0.2");
  EXPECT_NE(refusal(fractions).find("data.docgraph.validation_fraction: train_fraction + validation_fraction"),
            std::string::npos)
      << refusal(fractions);
}

}  // namespace
}  // namespace coppice
