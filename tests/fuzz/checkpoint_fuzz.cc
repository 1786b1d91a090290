// Fuzz harness: load_checkpoint (train/checkpoint.h) on arbitrary bytes, as
// a file named like a checkpoint, into small components built once per
// process (checkpoint_fixture.h): once into an SGD optimizer with a mask
// updater and once into Adam without one, so both kinds of optimizer state
// and the updater's are read. Only the public API is used, so the harness
// survives changes of the file format; regenerate the seed corpus after one
// (bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz).
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

// The components an input is loaded into: built once per process, and again
// only when a load changed them (it succeeded, or failed after validation,
// which train/checkpoint.h allows), as their serialized state tells.
class Target {
 public:
  Target(OptimizerKind kind, bool with_updater) : kind_(kind), with_updater_(with_updater) { rebuild(); }

  void load(const std::string& path) {
    absl::StatusOr<TrainerState> state = load_checkpoint(path, *c_.model, *c_.optimizer, c_.updater.get());
    if (!state.ok() && state.status().message().empty()) property_failed("an error without a message");
    if (state.ok() || snapshot() != pristine_) rebuild();
  }

 private:
  // Partly loaded components may not serialize at all: "" then, which
  // differs from the pristine bytes.
  std::string snapshot() const {
    absl::StatusOr<std::string> bytes = serialize_checkpoint(*c_.model, *c_.optimizer, c_.updater.get(), {});
    return bytes.ok() ? *bytes : std::string();
  }
  void rebuild() {
    c_ = make_checkpoint_components(kind_, with_updater_, 7, false);
    pristine_ = snapshot();
  }

  OptimizerKind kind_;
  bool with_updater_;
  CheckpointComponents c_;
  std::string pristine_;
};

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
  static Target sgd(OptimizerKind::kSgd, true), adam(OptimizerKind::kAdam, false);
  sgd.load(path);
  adam.load(path);
  return 0;
}
