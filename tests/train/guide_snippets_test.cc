// Every code block of the user guide (docs/guide/*.md) runs, so the guide
// cannot drift from the code:
//   ```yaml                  a whole job that must load and train to its end;
//   ```yaml refused: TEXT    a job the loader must refuse, its message holding TEXT;
//   ```sh                    `tools/train CONFIG ARGS` lines, run in order in one
//                            scratch directory as tools/train runs the trainer
//                            (so a later line may resume an earlier one's
//                            checkpoint), each with --max-steps, each exiting 0;
//                            other lines (not comments) fail the test;
//   ```cpp                   a whole program: examples/run.sh (tools/test) compiles
//                            it against tools/package's library and runs it;
//   ```python                run against the installed wheel by python/tests/test_guide.py;
// and a block in any other language fails the test until it has a runner.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/train/train_test_util.h"
#include "train/config.h"
#include "train/job.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;
using testing_train::run_trainer;
using testing_train::runfiles_root;
using testing_train::temp_dir;

struct Block {
  std::string file, language, text;
  int line = 0;  // of the opening fence
};

std::vector<Block> guide_blocks() {
  std::vector<Block> blocks;
  const fs::path guide = fs::path(runfiles_root()) / "docs" / "guide";
  for (const auto& entry : fs::directory_iterator(guide)) {
    if (entry.path().extension() != ".md") continue;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    Block* open = nullptr;
    while (std::getline(in, line)) {
      ++n;
      if (line.rfind("```", 0) == 0) {
        if (open == nullptr) {
          blocks.push_back({entry.path().filename().string(), line.substr(3), "", n});
          open = &blocks.back();
        } else {
          open = nullptr;
        }
      } else if (open != nullptr) {
        open->text += line + "\n";
      }
    }
  }
  return blocks;
}

TEST(GuideSnippets, EveryBlockRuns) {
  const std::vector<Block> blocks = guide_blocks();
  ASSERT_GE(blocks.size(), 3u) << "no guide found under " << runfiles_root() << "/docs/guide";
  int yaml = 0, commands = 0;
  for (const Block& b : blocks) {
    const std::string where = b.file + ":" + std::to_string(b.line);
    const std::string refused = "yaml refused: ";
    if (b.language.rfind(refused, 0) == 0) {
      const std::string expected = b.language.substr(refused.size());
      absl::StatusOr<ValidatedJob> job = parse_validated_job(b.text);
      ASSERT_FALSE(job.ok()) << where << ": the job loads, but the guide says it is refused";
      EXPECT_NE(std::string(job.status().message()).find(expected), std::string::npos)
          << where << ": the message is '" << job.status().message() << "', the guide says '" << expected << "'";
      ++yaml;
    } else if (b.language == "yaml") {
      absl::StatusOr<ValidatedJob> job = parse_validated_job(b.text);
      ASSERT_TRUE(job.ok()) << where << ": " << job.status();
      const TrainingSummary s = run_job(std::move(*job));
      EXPECT_EQ(s.final_step, s.total_steps) << where;
      EXPECT_GT(s.final_step, 0) << where;
      ++yaml;
    } else if (b.language == "sh") {
      std::istringstream lines(b.text);
      std::string line;
      const std::string dir = temp_dir("guide_commands");
      while (std::getline(lines, line)) {
        if (line.empty() || line[0] == '#') continue;
        if (line.rfind("tools/wheel", 0) == 0) continue;  // python/run_tests.sh runs the wheel's smoke test
        ASSERT_EQ(line.rfind("tools/train ", 0), 0u) << where << ": no runner for the command '" << line << "'";
        std::istringstream words(line.substr(12));
        std::string config, args, w;
        words >> config;
        while (words >> w) args += " " + w;
        // Guide commands are quick trials: the test runs them as written.
        ASSERT_NE(args.find("--max-steps"), std::string::npos) << where << ": give '" << line << "' --max-steps";
        const std::string cmd = "--config '" + runfiles_root() + "/" + config + "'" + args;
        const testing_train::RunResult r = run_trainer(cmd, dir, "", dir);
        EXPECT_EQ(r.code, 0) << where << ": " << line << "\n" << r.err;
        ++commands;
      }
    } else if (b.language == "python") {
      // python/tests/test_guide.py runs it (tools/test's Python step).
    } else if (b.language == "cpp") {
      EXPECT_NE(b.text.find("int main("), std::string::npos) << where << ": a ```cpp block is a whole program";
    } else {
      ADD_FAILURE() << where << ": no runner for ```" << b.language << " blocks (add one to this test)";
    }
  }
  EXPECT_GE(yaml, 3);
  EXPECT_GE(commands, 1);
}

}  // namespace
}  // namespace coppice
