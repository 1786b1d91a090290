// A fresh directory for a test's files, shared by the test suites of every
// layer: under $TEST_TMPDIR (which Bazel clears), else /tmp.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace coppice::testing {

// A new, empty directory named after `tag` (unique per call).
inline std::string temp_dir(const std::string& tag = "test") {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* dir = ::mkdtemp(buf.data());
  EXPECT_NE(dir, nullptr) << "mkdtemp " << tmpl;
  return dir != nullptr ? std::string(dir) : std::string("/tmp");
}

}  // namespace coppice::testing
