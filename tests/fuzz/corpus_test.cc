// The seed corpora are current (tests/fuzz/BUILD): in each corpus/<harness>/
// directory, files named valid-* are accepted by the code the harness fuzzes
// and files named bad-* are refused with a message. When this fails after a
// change of a file format, regenerate them:
//   bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "data/idx.h"
#include "gtest/gtest.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/levels/level_io.h"
#include "tensor/io/safetensors.h"
#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_util.h"
#include "train/config.h"

namespace coppice::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr char kRegenerate[] = " (regenerate the corpus: bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz)";

struct Seed {
  std::string path;
  std::string bytes;
  bool valid;
};

// The valid-* and bad-* files of one corpus.
std::vector<Seed> seeds(const std::string& harness) {
  std::vector<Seed> out;
  for (const auto& e : fs::directory_iterator("tests/fuzz/corpus/" + harness)) {
    const std::string name = e.path().filename().string();
    const bool valid = name.rfind("valid-", 0) == 0;
    if (!valid && name.rfind("bad-", 0) != 0) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out.push_back({e.path().string(), std::string(std::istreambuf_iterator<char>(in), {}), valid});
  }
  std::sort(out.begin(), out.end(), [](const Seed& a, const Seed& b) { return a.path < b.path; });
  return out;
}

// `check` returns the error message, or "" when the input was accepted.
void expect_seeds(const std::string& harness, const std::function<std::string(const Seed&)>& check) {
  const std::vector<Seed> all = seeds(harness);
  ASSERT_GE(all.size(), 2u) << harness << kRegenerate;
  for (const Seed& s : all) {
    const std::string error = check(s);
    if (s.valid) {
      EXPECT_EQ(error, "") << s.path << " is refused" << kRegenerate;
    } else {
      EXPECT_NE(error, "") << s.path << " is accepted" << kRegenerate;
    }
  }
}

template <typename T>
std::string error_of(const absl::StatusOr<T>& s) {
  if (s.ok()) return "";
  return s.status().message().empty() ? std::string("(an error without a message)") : std::string(s.status().message());
}

TEST(FuzzCorpus, Safetensors) {
  expect_seeds("safetensors", [](const Seed& s) { return error_of(parse_safetensors(s.bytes, s.path)); });
}

TEST(FuzzCorpus, SparseSafetensors) {
  expect_seeds("sparse_safetensors", [](const Seed& s) { return error_of(parse_sparse_safetensors(s.bytes, s.path)); });
}

TEST(FuzzCorpus, LevelSafetensors) {
  expect_seeds("level_safetensors", [](const Seed& s) {
    const absl::StatusOr<SafetensorsFile> file = parse_safetensors(s.bytes, s.path);
    return file.ok() ? error_of(levels::level_tensors_of(*file, s.path)) : error_of(file);
  });
}

TEST(FuzzCorpus, Idx) {
  expect_seeds("idx", [](const Seed& s) {
    std::string bytes = s.bytes;
    if (s.path.size() > 3 && s.path.compare(s.path.size() - 3, 3, ".gz") == 0) {
      absl::StatusOr<std::string> plain = gunzip(bytes, s.path);
      if (!plain.ok()) return error_of(plain);
      bytes = *plain;
    }
    return error_of(parse_idx(bytes, s.path));
  });
}

TEST(FuzzCorpus, JobConfig) {
  expect_seeds("job_config",
               [](const Seed& s) { return error_of(parse_job_config(s.bytes, set_lines(s.bytes), s.path)); });
}

TEST(FuzzCorpus, Checkpoint) {
  // valid-sgd-* load into SGD with a mask updater, valid-adam* into Adam
  // without one (as the harness tries both); bad-* into neither.
  expect_seeds("checkpoint", [](const Seed& s) {
    std::string error;
    for (const bool sgd : {true, false}) {
      const bool meant = s.path.find(sgd ? "valid-sgd" : "valid-adam") != std::string::npos;
      if (s.valid && !meant) continue;
      CheckpointComponents c =
          make_checkpoint_components(sgd ? OptimizerKind::kSgd : OptimizerKind::kAdam, sgd, 9, false);
      std::string e = error_of(load_checkpoint(s.path, *c.model, *c.optimizer, c.updater.get()));
      if (s.valid) return e;
      if (e.empty()) return std::string();  // a bad one accepted by either
      error = e;
    }
    return error;
  });
}

}  // namespace
}  // namespace coppice::fuzz
