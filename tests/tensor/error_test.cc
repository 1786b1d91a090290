// tensor/error.h: the message helpers every layer's errors are built with.
#include "tensor/error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace coppice {
namespace {

TEST(OneLine, EscapesWhatWouldBreakTheLine) {
  EXPECT_EQ(one_line("plain text: 1.5"), "plain text: 1.5");
  EXPECT_EQ(one_line("a\nb\r\nc\td"), "a\\nb\\r\\nc\\td");
  EXPECT_EQ(one_line(std::string("nul\0esc\x1b del\x7f", 13)), "nul\\x00esc\\x1b del\\x7f");
  // Bytes above 0x7f (UTF-8) pass unchanged.
  EXPECT_EQ(one_line("caf\xc3\xa9"), "caf\xc3\xa9");
}

TEST(StrJoinSome, ShowsTheFirstFewAndCountsTheRest) {
  const std::vector<int> v = {1, 2, 3, 4, 5};
  EXPECT_EQ(str_join_some(v, ", ", 8), "1, 2, 3, 4, 5");
  EXPECT_EQ(str_join_some(v, ", ", 2), "1, 2, ... (5 in all)");
}

TEST(Check, ThrowsTheConcatenatedMessage) {
  try {
    COPPICE_CHECK(1 + 1 == 3, "arithmetic: ", 1, " + ", 1);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("arithmetic: 1 + 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace coppice
