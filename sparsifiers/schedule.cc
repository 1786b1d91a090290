#include "sparsifiers/schedule.h"

#include "tensor/error.h"

namespace coppice {

namespace {

bool same_options(const FormatOptions& a, const FormatOptions& b) {
  return a.block_rows == b.block_rows && a.block_cols == b.block_cols && a.n == b.n && a.m == b.m;
}

bool same_format(const OutputFormat& a, const OutputFormat& b) {
  return a.name == b.name && same_options(a.options, b.options);
}

bool same_spec(const std::optional<SparsifierSpec>& a, const std::optional<SparsifierSpec>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->name == b->name && a->params == b->params);
}

bool same_stage(const StageSpec& a, const StageSpec& b) {
  return same_spec(a.inline_sparsifier, b.inline_sparsifier) && same_format(a.temporary_format, b.temporary_format) &&
         same_spec(a.external_sparsifier, b.external_sparsifier) && same_format(a.output_format, b.output_format);
}

bool same_stages(const std::vector<StageSpec>& a, const std::vector<StageSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_stage(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

Selector Selector::regex(std::string pattern) {
  absl::StatusOr<NameRegex> re = NameRegex::compile(pattern);
  return {Kind::kRegex, std::move(pattern), re.ok() ? std::make_shared<const NameRegex>(*std::move(re)) : nullptr};
}

absl::StatusOr<std::shared_ptr<const NameRegex>> Selector::compiled_regex() const {
  // `compiled` is missing for a bad pattern, and stale if `pattern` was
  // assigned after regex().
  if (compiled != nullptr && compiled->pattern() == pattern) return compiled;
  absl::StatusOr<NameRegex> re = NameRegex::compile(pattern);
  if (!re.ok()) return re.status();
  return std::make_shared<const NameRegex>(*std::move(re));
}

bool Selector::matches(const std::string& name) const {
  if (kind == Kind::kExact) return name == pattern;
  absl::StatusOr<std::shared_ptr<const NameRegex>> re = compiled_regex();
  if (!re.ok()) fail("sparsity schedule: ", describe(), " ", re.status().message());
  return (*re)->full_match(name);
}

std::string Selector::describe() const {
  return kind == Kind::kExact ? str_cat("'", pattern, "'") : str_cat("regex '", shown_pattern(pattern), "'");
}

bool same_settings(const ParameterRule& a, const ParameterRule& b) {
  return same_spec(a.sparsifier, b.sparsifier) && same_format(a.format, b.format) && a.density == b.density;
}

bool same_settings(const OutputRule& a, const OutputRule& b) {
  return same_stages(a.forward, b.forward) && same_stages(a.backward, b.backward);
}

std::string describe(const SparsifierSpec& spec) {
  std::string params;
  for (const auto& [key, value] : spec.params) params += str_cat(params.empty() ? "" : ", ", key, "=", value);
  return str_cat(spec.name, "(", params, ")");
}

}  // namespace coppice
