// Fuzz harness: the YAML job loader (parse_job_config, train/config.h) on
// arbitrary text. Lines that begin with "#set " (YAML comments, so the text
// stays what it was) are also given as --set overrides, which exercises the
// override path (apply_override) on the same tree:
//
//   #set optimizer.lr=0.05
//   model: {name: mlp}
//
// Besides never crashing: a refused job has a message, on one line.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice;
  const std::string text = fuzz::as_string(data, size);
  absl::StatusOr<JobConfig> job = parse_job_config(text, fuzz::set_lines(text), "fuzz.yaml");
  if (!job.ok()) {
    const std::string message(job.status().message());
    if (message.empty()) fuzz::property_failed("a refused job without a message");
    // The trainer prints it as its last line, which must name the key.
    if (message.find_first_of("\r\n") != std::string::npos) {
      fuzz::property_failed("a message of more than one line: " + message);
    }
  }
  return 0;
}
