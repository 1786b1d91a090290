// Fuzz harness: load_checkpoint (train/checkpoint.h) on arbitrary bytes, as
// a file named like a checkpoint, into fresh small components
// (checkpoint_fixture.h): once into an SGD optimizer with a mask updater and
// once into Adam without one, so both kinds of optimizer state and the
// updater's are read. Only the public API is used, so the harness survives
// changes of the file format; regenerate the seed corpus after one
// (bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz/corpus).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_util.h"

namespace coppice::fuzz {
namespace {

// The file every input is written to, in a directory of this process.
const std::string& input_path() {
  static const std::string path = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string dir = std::string(base != nullptr ? base : "/tmp") + "/checkpoint_fuzz.XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) property_failed("mkdtemp " + dir + " failed");
    static const std::string dir_to_remove = dir;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir_to_remove, ec);
    });
    return dir + "/" + checkpoint_file_name(1);
  }();
  return path;
}

void try_load(const std::string& path, OptimizerKind kind, bool with_updater) {
  // Fresh components for every input: a load that succeeds, or one that fails
  // after validation, may leave them changed (train/checkpoint.h).
  CheckpointComponents c = make_checkpoint_components(kind, with_updater, 7, false);
  absl::StatusOr<TrainerState> state = load_checkpoint(path, *c.model, *c.optimizer, c.updater.get());
  if (!state.ok() && state.status().message().empty()) property_failed("an error without a message");
}

}  // namespace
}  // namespace coppice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice::fuzz;
  const std::string& path = input_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) property_failed("cannot write " + path);
  }
  try_load(path, OptimizerKind::kSgd, true);
  try_load(path, OptimizerKind::kAdam, false);
  return 0;
}
