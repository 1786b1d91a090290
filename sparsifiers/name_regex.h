// The regexes users write to select parameters and modules by name (the
// `regex` of a sparsity rule, SparsityBuilder::regex): RE2 syntax, matched
// against the whole name.
//
// RE2 (https://github.com/google/re2/wiki/Syntax) matches in time linear in
// the name, never backtracks and never recurses on a pattern's nesting, so a
// hostile pattern cannot hang or crash validation. Its syntax is Perl's
// without the features that need backtracking: no backreferences (\1) and no
// lookaround ((?=...), (?!...), (?<=...), (?<!...)); those are refused as
// not parsing. Limits: a pattern of at most kMaxNameRegexBytes bytes, and
// kNameRegexMaxMem bytes of memory per compiled regex (RE2's max_mem; a
// pattern whose program needs more, such as \pL{1000}, is refused).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace re2 {
class RE2;
}

namespace coppice {

inline constexpr size_t kMaxNameRegexBytes = 1000;
inline constexpr int64_t kNameRegexMaxMem = int64_t{2} << 20;

// A compiled name regex; cheap to copy (copies share the compiled program,
// which RE2 lets several threads match with at once).
class NameRegex {
 public:
  // The compiled `pattern`, or an InvalidArgument error that says what is
  // wrong but not where the pattern came from (the caller adds that):
  // "does not parse: missing ): (abc", "is 1200 bytes long, over the limit of
  // 1000 bytes", "needs more than ... bytes of memory to compile ...".
  static absl::StatusOr<NameRegex> compile(const std::string& pattern);

  // Whether the whole of `name` matches.
  bool full_match(const std::string& name) const;
  const std::string& pattern() const;

 private:
  explicit NameRegex(std::shared_ptr<const re2::RE2> re) : re_(std::move(re)) {}
  std::shared_ptr<const re2::RE2> re_;
};

// `pattern` as a message shows it: whole when short, else its first bytes,
// "..." and its length, so that an over-long pattern still gives one
// readable line.
std::string shown_pattern(const std::string& pattern);

}  // namespace coppice
