// Name regexes (sparsifiers/name_regex.h): RE2 syntax, whole-name matches,
// the limits on pattern length and memory, and the messages that say what is
// wrong; patterns that crash or hang std::regex are refused or matched in
// linear time.
#include "sparsifiers/name_regex.h"

#include <string>

#include "gtest/gtest.h"
#include "sparsifiers/schedule.h"
#include "tensor/error.h"

namespace coppice {
namespace {

std::string compile_error(const std::string& pattern) {
  absl::StatusOr<NameRegex> re = NameRegex::compile(pattern);
  EXPECT_FALSE(re.ok()) << "accepted: " << pattern;
  return re.ok() ? "" : std::string(re.status().message());
}

TEST(NameRegexTest, MatchesWholeNames) {
  absl::StatusOr<NameRegex> re = NameRegex::compile("fc[0-9]+\\.weight");
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_TRUE(re->full_match("fc12.weight"));
  EXPECT_FALSE(re->full_match("fc12.weight.grad"));
  EXPECT_FALSE(re->full_match("xfc1.weight"));
  EXPECT_EQ(re->pattern(), "fc[0-9]+\\.weight");
  // Perl classes and alternation, as users write them.
  re = NameRegex::compile("(encoder|decoder)\\.layers\\.\\d+\\..*");
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_TRUE(re->full_match("decoder.layers.11.attn.weight"));
}

TEST(NameRegexTest, SaysWhatIsWrong) {
  EXPECT_EQ(compile_error("fc["), "does not parse: missing ]: [");
  EXPECT_EQ(compile_error("(fc1"), "does not parse: missing ): (fc1");
  EXPECT_EQ(compile_error("fc1)"), "does not parse: unexpected ): fc1)");
  EXPECT_EQ(compile_error("*fc"), "does not parse: no argument for repetition operator: *");
  EXPECT_EQ(compile_error("fc{1001}"), "does not parse: invalid repetition size: {1001}");
  // What std::regex has and RE2 does not.
  EXPECT_EQ(compile_error("(fc)\\1"),
            "does not parse: invalid escape sequence: \\1 (RE2 syntax: no backreferences or lookaround)");
  EXPECT_EQ(compile_error("fc(?!1)"),
            "does not parse: invalid perl operator: (?! (RE2 syntax: no backreferences or lookaround)");
}

TEST(NameRegexTest, BoundsPatternLengthAndMemory) {
  EXPECT_TRUE(NameRegex::compile(std::string(kMaxNameRegexBytes, 'a')).ok());
  EXPECT_EQ(compile_error(std::string(kMaxNameRegexBytes + 1, 'a')),
            "is 1001 bytes long, over the limit of 1000 bytes");
  // 20,000 nested groups (which overflowed std::regex's stack): refused by length, at once.
  const std::string nested = std::string(20000, '(') + "a" + std::string(20000, ')');
  EXPECT_EQ(compile_error(nested), "is 40001 bytes long, over the limit of 1000 bytes");
  // As deep as the length allows: RE2 parses it without recursing.
  const std::string deep = std::string(499, '(') + "a" + std::string(499, ')');
  absl::StatusOr<NameRegex> re = NameRegex::compile(deep);
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_TRUE(re->full_match("a"));
  // A short pattern whose program is large.
  EXPECT_EQ(compile_error("\\pL{1000}"),
            "needs more than 2 MiB to compile (RE2's memory limit for a name regex); use fewer or smaller repetitions");
}

// Patterns on which a backtracking engine takes exponential time match in
// time linear in the name.
TEST(NameRegexTest, NoCatastrophicBacktracking) {
  const std::string name = std::string(5000, 'a') + "!";
  for (const char* pattern : {"(a+)+b", "(a|a)*b", "(a|aa)*c", "(.*a){12}b"}) {
    absl::StatusOr<NameRegex> re = NameRegex::compile(pattern);
    ASSERT_TRUE(re.ok()) << pattern << ": " << re.status();
    EXPECT_FALSE(re->full_match(name)) << pattern;
  }
}

TEST(NameRegexTest, ShownPatternsStayShort) {
  EXPECT_EQ(shown_pattern("fc[0-9]+"), "fc[0-9]+");
  EXPECT_EQ(shown_pattern(std::string(5000, 'x')), std::string(60, 'x') + "... (5000 bytes)");
  // Messages quote RE2's offending part shortened the same way.
  const std::string long_group = "(" + std::string(900, 'x');
  EXPECT_EQ(compile_error(long_group), "does not parse: missing ): " + shown_pattern(long_group));
}

// Selectors compile their regex once, in Selector::regex, and report a bad
// one when asked or when matching.
TEST(NameRegexTest, SelectorsCompileOnce) {
  const Selector s = Selector::regex("fc[0-9]\\.weight");
  ASSERT_NE(s.compiled, nullptr);
  absl::StatusOr<std::shared_ptr<const NameRegex>> re = s.compiled_regex();
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->get(), s.compiled.get());
  EXPECT_TRUE(s.matches("fc1.weight"));

  const Selector bad = Selector::regex("fc(");
  EXPECT_EQ(bad.compiled, nullptr);
  EXPECT_EQ(bad.compiled_regex().status().message(), "does not parse: missing ): fc(");
  try {
    bad.matches("fc1");
    ADD_FAILURE() << "matched with a bad regex";
  } catch (const Error& e) { EXPECT_STREQ(e.what(), "sparsity schedule: regex 'fc(' does not parse: missing ): fc("); }
  // A pattern assigned after regex() is compiled for what it now says.
  Selector changed = Selector::regex("fc1");
  changed.pattern = "fc2";
  EXPECT_TRUE(changed.matches("fc2"));
  EXPECT_FALSE(changed.matches("fc1"));
}

}  // namespace
}  // namespace coppice
