#include "train/error_quote.h"

#include <string>

#include "gtest/gtest.h"

namespace coppice {
namespace {

TEST(ErrorQuote, ShortValuesWhole) {
  EXPECT_EQ(quote_for_error("cuda:9"), "'cuda:9'");
  EXPECT_EQ(quote_for_error(""), "''");
  EXPECT_EQ(quote_for_error("a\nb\tc"), "'a\\nb\\tc'");
  EXPECT_EQ(quote_for_error(std::string(kQuotedMaxBytes, 'x')), "'" + std::string(kQuotedMaxBytes, 'x') + "'");
  EXPECT_EQ(shorten_for_error("fc1.weight"), "fc1.weight");
}

TEST(ErrorQuote, LongValuesByTheirStartAndSize) {
  EXPECT_EQ(quote_for_error(std::string(100000, '9')), "'" + std::string(kQuotedMaxBytes, '9') + "...' (100000 bytes)");
  EXPECT_EQ(shorten_for_error(std::string(61, 'k')), std::string(kQuotedMaxBytes, 'k') + "... (61 bytes)");
  // Cut before a character, not inside one: 'é' is two bytes.
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xc3\xa9";
  const std::string q = quote_for_error(accents);
  EXPECT_EQ(q, "'" + accents.substr(0, kQuotedMaxBytes) + "...' (80 bytes)");
  EXPECT_EQ(quote_for_error("x" + accents), "'x" + accents.substr(0, kQuotedMaxBytes - 2) + "...' (81 bytes)");
}

TEST(ErrorQuote, BoundedLineShortensLongWordsAndKeepsBothEnds) {
  EXPECT_EQ(bounded_error_line("data.path: 'x' not found"), "data.path: 'x' not found");
  EXPECT_EQ(bounded_error_line("a\nb"), "a\\nb");
  const std::string word(100000, 'w');
  EXPECT_EQ(bounded_error_line("device: got " + word + " here"),
            "device: got " + std::string(kQuotedMaxBytes, 'w') + "... (100000 bytes) here");
  // Many short words: the middle goes, the start and the end stay.
  std::string many = "key.path:";
  for (int i = 0; i < 10000; ++i) many += " ab";
  many += " did you mean 'x'?";
  const std::string line = bounded_error_line(many);
  EXPECT_LE(line.size(), kErrorLineMaxBytes + 64);
  EXPECT_EQ(line.rfind("key.path: ab", 0), 0u);
  EXPECT_NE(line.find("bytes left out"), std::string::npos);
  EXPECT_EQ(line.substr(line.size() - 17), "did you mean 'x'?");
}

}  // namespace
}  // namespace coppice
