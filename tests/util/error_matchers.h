// Assertions on coppice::Error shared by the test suites: a statement throws
// it and its message names what is wrong.
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/error.h"

// Expects `stmt` to throw coppice::Error whose message contains `text`.
#define EXPECT_ERROR_NAMING(stmt, text)                                                          \
  do {                                                                                           \
    try {                                                                                        \
      stmt;                                                                                      \
      ADD_FAILURE() << "expected coppice::Error from: " #stmt;                                   \
    } catch (const ::coppice::Error& e) {                                                        \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what(); \
    }                                                                                            \
  } while (0)

namespace coppice::testing {

// The message of the Error that `fn` throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) { return e.what(); }
  return "";
}

// Expects `fn` to throw coppice::Error whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected coppice::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// Expects `fn` to throw coppice::Error whose message contains every one of
// `parts` (an AssertionResult, for EXPECT_TRUE).
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
