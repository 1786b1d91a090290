// A sparsity schedule: which parameters of a model are sparsified, how and in
// which format, and which module outputs (and the gradients of their inputs)
// go through which sparsifiers. Plain data, so that the job file's
// `sparsity:` section fills it one to one; sparsity_builder.h writes it from
// C++, apply_schedule.h checks it against a model and applies it.
//
// Rules select names exactly or by regex (RE2 syntax, matching the whole
// name; name_regex.h: no backreferences or lookaround, at most
// kMaxNameRegexBytes bytes). Precedence, for a name that several rules select: an exact
// rule wins over regex rules; two rules of the same kind that select one name
// must have the same settings, else the schedule is refused (rule order never
// matters).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sparsifiers/name_regex.h"
#include "sparsifiers/registry.h"
#include "sparsifiers/sparsifier.h"

namespace coppice {

struct Selector {
  enum class Kind { kExact, kRegex };
  Kind kind = Kind::kExact;
  std::string pattern;
  // `pattern` compiled, once: regex() fills it when the pattern is valid.
  std::shared_ptr<const NameRegex> compiled;

  static Selector exact(std::string name) { return {Kind::kExact, std::move(name), nullptr}; }
  static Selector regex(std::string pattern);

  // Whole-name match; throws coppice::Error for a regex that does not
  // compile (see compiled_regex).
  bool matches(const std::string& name) const;
  // A regex selector's compiled pattern: `compiled` when it is current, else
  // compiled now. The error says what is wrong with the pattern ("does not
  // parse: missing ]: [", "is 1200 bytes long, ..."; NameRegex::compile).
  absl::StatusOr<std::shared_ptr<const NameRegex>> compiled_regex() const;
  std::string describe() const;  // "'fc1.weight'" or "regex 'fc[0-9]+\.weight'"
};

// A parameter's treatment, applied once when the schedule is applied.
//
// `density` (in (0, 1]) is the fraction of entries the parameter keeps: the
// target that the optimizer's mask updates hold. Without a sparsifier it
// also picks the initial one, magnitude(sparsity = 1 - density); with one
// that has a sparsity parameter, the two must agree.
struct ParameterRule {
  Selector selector;
  std::optional<SparsifierSpec> sparsifier;  // none: the values are only converted
  OutputFormat format;                       // the weight's format ("dense" by default)
  std::optional<double> density;
};

// STen's four for one value: inline sparsifier, temporary format, external
// sparsifier, output format (sparsified_op.h); no spec means keep-all.
struct StageSpec {
  std::optional<SparsifierSpec> inline_sparsifier;
  OutputFormat temporary_format;
  std::optional<SparsifierSpec> external_sparsifier;
  OutputFormat output_format;
};

// A module's outputs and its inputs' gradients, in the module's order
// (for example linear: inputs x, weight, bias). Empty lists keep all.
struct OutputRule {
  Selector selector;
  std::vector<StageSpec> forward;   // one per output of the module
  std::vector<StageSpec> backward;  // one per input of the module
};

struct SparsitySchedule {
  std::vector<ParameterRule> parameters;
  std::vector<OutputRule> outputs;
};

// Same settings (the selectors are not compared).
bool same_settings(const ParameterRule& a, const ParameterRule& b);
bool same_settings(const OutputRule& a, const OutputRule& b);

std::string describe(const SparsifierSpec& spec);  // "magnitude(sparsity=0.9)"

}  // namespace coppice
