// distributed/job_token.h: the rules a token must follow (and errors that
// never quote it), and the comparison.
#include "distributed/job_token.h"

#include <string>

#include "gtest/gtest.h"

namespace coppice {
namespace {

TEST(JobToken, GoodTokens) {
  EXPECT_EQ(job_token_problem(std::string(16, 'a')), "");
  EXPECT_EQ(job_token_problem(std::string(256, '~')), "");
  EXPECT_EQ(job_token_problem("0123456789abcdef0123456789abcdef"), "");  // openssl rand -hex 16
  EXPECT_EQ(job_token_problem("!#$%&()*+,-./:;<=>?@[]^_{|}"), "");
}

TEST(JobToken, BadTokensAreNamedWithoutBeingQuoted) {
  struct Case {
    std::string token, problem;
  };
  const Case cases[] = {
      {"hunter2", "has 7 characters, fewer than 16"},
      {std::string(257, 'k'), "has 257 characters, more than 256"},
      {"with a space in it", "holds a space, a control character or a non-ASCII byte"},
      {"tab\there-0123456789", "holds a space"},
      {"newline\n-0123456789", "holds a space"},
      {"caf\xc3\xa9-0123456789abc", "non-ASCII byte"},
      {std::string("nul\0-0123456789abc", 18), "control character"},
  };
  for (const Case& c : cases) {
    const std::string p = job_token_problem(c.token);
    EXPECT_NE(p.find(c.problem), std::string::npos) << p;
    EXPECT_EQ(p.find(c.token), std::string::npos) << p;
  }
}

TEST(JobToken, Match) {
  const std::string t = "0123456789abcdef0123456789abcdef";
  EXPECT_TRUE(job_tokens_match(t, t));
  EXPECT_FALSE(job_tokens_match(t, "1123456789abcdef0123456789abcdef"));  // first byte
  EXPECT_FALSE(job_tokens_match(t, "0123456789abcdef0123456789abcdee"));  // last byte
  EXPECT_FALSE(job_tokens_match(t, t.substr(0, 31)));                     // a prefix
  EXPECT_FALSE(job_tokens_match(t, t + "0"));                             // longer
  EXPECT_FALSE(job_tokens_match(t, t + std::string(1, '\0')));            // longer by padding
  EXPECT_FALSE(job_tokens_match("", t));
  const std::string huge(300, 'x');
  EXPECT_FALSE(job_tokens_match(huge, huge));  // past the bound, never a match
}

}  // namespace
}  // namespace coppice
