#include "sparsifiers/name_regex.h"

#include "re2/re2.h"
#include "tensor/error.h"

namespace coppice {

absl::StatusOr<NameRegex> NameRegex::compile(const std::string& pattern) {
  // Checked before RE2 sees the pattern: its cost and its messages stay small.
  if (pattern.size() > kMaxNameRegexBytes) {
    return absl::InvalidArgumentError(
        str_cat("is ", pattern.size(), " bytes long, over the limit of ", kMaxNameRegexBytes, " bytes"));
  }
  RE2::Options options;
  options.set_log_errors(false);  // the error goes into the Status, not to stderr
  options.set_max_mem(kNameRegexMaxMem);
  auto re = std::make_shared<const RE2>(pattern, options);
  if (re->ok()) return NameRegex(std::move(re));
  if (re->error_code() == RE2::ErrorPatternTooLarge) {
    return absl::InvalidArgumentError(str_cat("needs more than ", kNameRegexMaxMem >> 20,
                                              " MiB to compile (RE2's memory limit for a name regex); "
                                              "use fewer or smaller repetitions"));
  }
  // RE2's own words ("missing ): (abc", "invalid perl operator: (?="), which
  // end with the offending part of the pattern: shortened like the pattern.
  std::string what = re->error();
  const std::string& arg = re->error_arg();
  if (!arg.empty() && what.size() >= arg.size() && what.compare(what.size() - arg.size(), arg.size(), arg) == 0) {
    what = what.substr(0, what.size() - arg.size()) + shown_pattern(arg);
  }
  // Where a pattern written for std::regex or PCRE most often fails.
  const bool backtracking_feature = re->error_code() == RE2::ErrorBadEscape || re->error_code() == RE2::ErrorBadPerlOp;
  return absl::InvalidArgumentError(
      str_cat("does not parse: ", what, backtracking_feature ? " (RE2 syntax: no backreferences or lookaround)" : ""));
}

bool NameRegex::full_match(const std::string& name) const { return RE2::FullMatch(name, *re_); }

const std::string& NameRegex::pattern() const { return re_->pattern(); }

std::string shown_pattern(const std::string& pattern) {
  constexpr size_t kShown = 60;
  if (pattern.size() <= kShown + 20) return pattern;
  return str_cat(pattern.substr(0, kShown), "... (", pattern.size(), " bytes)");
}

}  // namespace coppice
