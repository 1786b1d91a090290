// Helpers for the fuzz harnesses (tests/fuzz/BUILD).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace coppice::fuzz {

// A property of the code under test that an input broke: print it and
// abort, which libFuzzer (and the replay test) report as a crash with the
// input kept.
[[noreturn]] inline void property_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Tensors with more elements than this are not densified or copied by the
// harnesses' extra checks (a valid file may describe a huge, empty sparse
// tensor; allocating it would be the harness's doing, not the reader's).
inline constexpr int64_t kMaxCheckedElements = int64_t{1} << 20;

// The job config harness's --set overrides: the lines of `text` that begin
// with "#set " (YAML comments), without that prefix.
inline std::vector<std::string> set_lines(const std::string& text) {
  std::vector<std::string> overrides;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, 5, "#set ") == 0) overrides.push_back(text.substr(pos + 5, end - pos - 5));
    pos = end + 1;
  }
  return overrides;
}

}  // namespace coppice::fuzz
