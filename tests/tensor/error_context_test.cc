// tensor/error_context.h: the words a call puts around an error its device
// reports later (a deferred CUDA index check, tensor/cuda/deferred_checks.h).
#include "tensor/error_context.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace coppice {
namespace {

TEST(ErrorContext, WrapsOutermostFirstAsNestedCatchesWould) {
  EXPECT_TRUE(ErrorContext::current().empty());
  std::vector<std::string> kept;
  {
    const ErrorContext outer("cross_entropy: a target is not a class index");
    {
      const ErrorContext inner("gather");
      kept = ErrorContext::current();
    }
    EXPECT_EQ(ErrorContext::current(), std::vector<std::string>{"cross_entropy: a target is not a class index"});
  }
  EXPECT_TRUE(ErrorContext::current().empty());
  // Kept at queue time, applied later, after both scopes have closed.
  EXPECT_EQ(ErrorContext::wrap(kept, "index 7 (at position 1)"),
            "cross_entropy: a target is not a class index: gather: index 7 (at position 1)");
  EXPECT_EQ(ErrorContext::wrap({}, "index 7"), "index 7");
}

TEST(ErrorContext, ClosesWhenAnExceptionLeavesItsScope) {
  try {
    const ErrorContext c("embedding");
    throw std::runtime_error("bad");
  } catch (const std::runtime_error&) {}
  EXPECT_TRUE(ErrorContext::current().empty());
}

TEST(ErrorContext, IsTheCallingThreadsOwn) {
  const ErrorContext mine("this thread");
  std::vector<std::string> seen_there = {"not read"};
  std::thread other([&] { seen_there = ErrorContext::current(); });
  other.join();
  EXPECT_TRUE(seen_there.empty());
  EXPECT_EQ(ErrorContext::current(), std::vector<std::string>{"this thread"});
}

}  // namespace
}  // namespace coppice
