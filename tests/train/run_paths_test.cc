// No output of a run may overwrite an input or another output
// (train/run_paths.h): each kind of alias is refused naming both keys, and
// the ordinary layouts (a run resuming from its own checkpoint directory, a
// job file beside its checkpoints) are not.
#include "train/run_paths.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace coppice {
namespace {

namespace fs = std::filesystem;

class RunPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp != nullptr ? tmp : "/tmp") / "run_paths_test" /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_ / "data");
    fs::create_directories(root_ / "ckpt");
    touch("job.yaml");
    touch("data/corpus.txt");
    job_.data.dataset = DatasetKind::kSynthetic;
  }
  void touch(const std::string& name) { std::ofstream(root_ / name) << "x"; }
  std::string at(const std::string& name) const { return (root_ / name).string(); }

  // The check's message, "" when the paths are apart.
  std::string check(const std::string& resume = "", const std::string& run_dir = "") const {
    const absl::Status st = check_outputs_apart(run_paths(job_, at("job.yaml"), resume, run_dir));
    return st.ok() ? "" : std::string(st.message());
  }

  fs::path root_;
  JobConfig job_;
};

TEST_F(RunPathsTest, OrdinaryLayoutsPass) {
  job_.logging.metrics = at("metrics.jsonl");
  job_.checkpoint.dir = at("ckpt");
  EXPECT_EQ(check(), "");
  // Resuming from the checkpoint directory the run writes, or a file in it.
  touch("ckpt/ckpt-0000000004-0123456789abcdef.safetensors");
  EXPECT_EQ(check(at("ckpt")), "");
  EXPECT_EQ(check(at("ckpt/ckpt-0000000004-0123456789abcdef.safetensors")), "");
  // The job file beside the checkpoints; the run directory as the checkpoint directory.
  job_.checkpoint.dir = root_.string();
  job_.logging.metrics = "";
  EXPECT_EQ(check("", at("ckpt")), "");
  job_.checkpoint.dir = at("ckpt");
  EXPECT_EQ(check("", at("ckpt")), "");
}

TEST_F(RunPathsTest, MetricsOverAnInputIsRefused) {
  job_.logging.metrics = at("job.yaml");
  {
    const std::string m = check();
    EXPECT_NE(m.find("logging.metrics"), std::string::npos) << m;
    EXPECT_NE(m.find("--config"), std::string::npos) << m;
  }
  touch("ckpt/ckpt-0000000004-0123456789abcdef.safetensors");
  job_.logging.metrics = at("ckpt/ckpt-0000000004-0123456789abcdef.safetensors");
  const std::string m = check(at("ckpt/ckpt-0000000004-0123456789abcdef.safetensors"));
  EXPECT_NE(m.find("--resume"), std::string::npos) << m;
  // Through a symbolic link and through `..`.
  fs::create_symlink(root_ / "job.yaml", root_ / "link.yaml");
  job_.logging.metrics = at("link.yaml");
  EXPECT_NE(check().find("--config"), std::string::npos);
  job_.logging.metrics = at("ckpt/../job.yaml");
  EXPECT_NE(check().find("--config"), std::string::npos);
  // A hard link.
  fs::create_hard_link(root_ / "job.yaml", root_ / "hard.yaml");
  job_.logging.metrics = at("hard.yaml");
  EXPECT_NE(check().find("--config"), std::string::npos);
}

TEST_F(RunPathsTest, OutputsInOrAroundADatasetAreRefused) {
  job_.data.dataset = DatasetKind::kText;
  job_.data.path = at("data");
  job_.logging.metrics = at("data/metrics.jsonl");
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.logging.metrics = "";
  job_.checkpoint.dir = at("data");
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.checkpoint.dir = at("data/ckpt");
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.checkpoint.dir = root_.string();  // contains the dataset directory
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  // A text file as the dataset: its own path only.
  job_.data.path = at("data/corpus.txt");
  job_.checkpoint.dir = at("data/corpus.txt");
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.checkpoint.dir = at("ckpt");
  EXPECT_EQ(check(), "");
}

// The docgraph dataset reads every document of its tree (data.path): no
// output in it or around it, as for a text tree.
TEST_F(RunPathsTest, OutputsInOrAroundADocumentTreeAreRefused) {
  job_.data.dataset = DatasetKind::kDocGraph;
  job_.data.docgraph.path = at("data");
  job_.logging.metrics = at("data/metrics.jsonl");
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.logging.metrics = "";
  job_.checkpoint.dir = at("data/ckpt");
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.checkpoint.dir = root_.string();  // contains the tree
  EXPECT_NE(check().find("data.path"), std::string::npos) << check();
  job_.checkpoint.dir = at("ckpt");
  EXPECT_EQ(check(), "");
}

TEST_F(RunPathsTest, OutputsThatShareAPathAreRefused) {
  job_.checkpoint.dir = at("ckpt");
  job_.logging.metrics = at("ckpt");
  std::string m = check();
  EXPECT_NE(m.find("checkpoint.dir"), std::string::npos) << m;
  EXPECT_NE(m.find("logging.metrics"), std::string::npos) << m;
  job_.logging.metrics = at("ckpt/latest-run.json");
  m = check();
  EXPECT_NE(m.find("checkpoint.dir"), std::string::npos) << m;
  job_.logging.metrics = at("ckpt/metrics.jsonl");  // a name the directory does not write
  EXPECT_EQ(check(), "");
  // The run directory is a job file; its metrics file is the checkpoint directory's marker.
  job_.logging.metrics = "";
  m = check("", at("job.yaml"));
  EXPECT_NE(m.find("--run-dir"), std::string::npos) << m;
  EXPECT_NE(m.find("--config"), std::string::npos) << m;
}

}  // namespace
}  // namespace coppice
