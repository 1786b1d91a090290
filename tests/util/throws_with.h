// A GoogleTest assertion shared by the test suites: `fn` throws
// coppice::Error and its message names every one of `parts`.
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/error.h"

namespace coppice::testing {

template <typename Fn>
::testing::AssertionResult throws_with(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      if (msg.find(p) == std::string::npos) {
        return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << p << "'";
      }
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no coppice::Error thrown";
}

}  // namespace coppice::testing
