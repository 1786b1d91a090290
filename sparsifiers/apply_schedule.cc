#include "sparsifiers/apply_schedule.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "sparse/formats.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/registry.h"
#include "sparsifiers/sparsify_stage.h"
#include "tensor/error.h"

namespace coppice {

namespace {

constexpr const char* kPrefix = "sparsity schedule: ";

std::string rule_label(const Selector& selector, size_t index, const char* kind) {
  return str_cat(kind, " rule ", index, " (", selector.describe(), ")");
}

SparsifierPtr build(const SparsifierSpec& spec, const std::string& where) {
  try {
    return make_sparsifier(spec);
  } catch (const Error& e) { fail(kPrefix, where, ": ", e.what()); }
}

// A null sparsifier keeps all: it must still name a format that exists.
void check_format(const Sparsifier* s, const OutputFormat& format, const std::string& where) {
  KeepAllSparsifier keep_all;
  const Sparsifier& checked = s != nullptr ? *s : keep_all;
  const std::string why = checked.format_mismatch(format);
  COPPICE_CHECK(why.empty(), kPrefix, where, ": format '", describe(format), "' cannot hold what ", checked.describe(),
                " produces: ", why);
}

// The rule's initial sparsifier (null: convert only), checked against its format.
SparsifierPtr initial_sparsifier(const ParameterRule& rule, const std::string& where) {
  std::optional<SparsifierSpec> spec = rule.sparsifier;
  if (rule.density) {
    const double d = *rule.density;
    COPPICE_CHECK(d > 0.0 && d <= 1.0, kPrefix, where, ": density ", d, " is outside (0, 1]");
    const FormatSpec* format = find_format(rule.format.name);
    const std::optional<std::pair<int64_t, int64_t>> blocks =
        format == nullptr ? std::nullopt : block_unit(*format, rule.format.options);
    if (!spec && blocks) {
      // Whole blocks: an element mask at density d would touch nearly every
      // block, and the block format would store them all (density 1, silently).
      spec = SparsifierSpec{"block_magnitude",
                            {{"sparsity", 1.0 - d}, {"block_rows", blocks->first}, {"block_cols", blocks->second}}};
    } else if (!spec) {
      spec = SparsifierSpec{"magnitude", {{"sparsity", 1.0 - d}}};
    } else if (spec->params.count("sparsity") > 0) {
      const std::optional<double> s = spec->params.at("sparsity").number();
      COPPICE_CHECK(s && std::abs((1.0 - d) - *s) <= 1e-9, kPrefix, where, ": density ", d, " contradicts ",
                    describe(*spec), " (density = 1 - sparsity)");
    }
  }
  SparsifierPtr s = spec ? build(*spec, where) : nullptr;
  check_format(s.get(), rule.format, where);
  return s;
}

// A keep-all external stage holds what the inline stage produced.
ValueSparsity build_stages(const StageSpec& st, const std::string& where) {
  ValueSparsity v;
  if (st.inline_sparsifier) v.inline_sparsifier = build(*st.inline_sparsifier, where + ", inline");
  check_format(v.inline_sparsifier.get(), st.temporary_format, where + ", temporary format");
  if (st.external_sparsifier) v.external_sparsifier = build(*st.external_sparsifier, where + ", external");
  check_format(v.external_sparsifier ? v.external_sparsifier.get() : v.inline_sparsifier.get(), st.output_format,
               where + ", output format");
  v.temporary_format = st.temporary_format;
  v.output_format = st.output_format;
  return v;
}

std::vector<ValueSparsity> build_stage_list(const std::vector<StageSpec>& stages, const std::string& where,
                                            const char* which) {
  std::vector<ValueSparsity> out;
  for (size_t i = 0; i < stages.size(); ++i)
    out.push_back(build_stages(stages[i], str_cat(where, ", ", which, " ", i)));
  return out;
}

OutputSparsity build_output(const OutputRule& rule, size_t index) {
  const std::string where = rule_label(rule.selector, index, "output");
  return {index, build_stage_list(rule.forward, where, "forward output"),
          build_stage_list(rule.backward, where, "backward input")};
}

std::string some_names(const std::vector<std::string>& names) {
  return names.empty() ? std::string("none") : str_join_some(names, ", ");
}

// The rule that governs each name (none when no rule selects it). An exact
// rule wins over regex rules; rules of one kind that select one name must
// agree. Every rule must select something.
template <typename Rule>
std::vector<std::optional<size_t>> resolve(const std::vector<Rule>& rules, const std::vector<std::string>& names,
                                           const char* rule_kind, const char* name_kind) {
  std::vector<std::shared_ptr<const NameRegex>> compiled(rules.size());  // null: an exact rule
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].selector.kind != Selector::Kind::kRegex) continue;
    absl::StatusOr<std::shared_ptr<const NameRegex>> re = rules[i].selector.compiled_regex();
    if (!re.ok()) fail(kPrefix, rule_label(rules[i].selector, i, rule_kind), ": the regex ", re.status().message());
    compiled[i] = *std::move(re);
  }
  std::vector<bool> used(rules.size(), false);
  std::vector<std::optional<size_t>> governing;
  for (const std::string& name : names) {
    std::vector<size_t> exact, regex;
    for (size_t i = 0; i < rules.size(); ++i) {
      const bool hit = compiled[i] ? compiled[i]->full_match(name) : rules[i].selector.pattern == name;
      if (!hit) continue;
      used[i] = true;
      (compiled[i] ? regex : exact).push_back(i);
    }
    const std::vector<size_t>& chosen = exact.empty() ? regex : exact;
    for (size_t j = 1; j < chosen.size(); ++j) {
      COPPICE_CHECK(same_settings(rules[chosen[0]], rules[chosen[j]]), kPrefix, name_kind, " '", name,
                    "' is selected by ", rule_label(rules[chosen[0]].selector, chosen[0], rule_kind), " and ",
                    rule_label(rules[chosen[j]].selector, chosen[j], rule_kind),
                    " with different settings (rules of one kind must agree; an exact rule wins over regex rules)");
    }
    governing.push_back(chosen.empty() ? std::nullopt : std::optional<size_t>(chosen[0]));
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    COPPICE_CHECK(used[i], kPrefix, rule_label(rules[i].selector, i, rule_kind), " selects no ", name_kind, " (",
                  name_kind, "s: ", some_names(names), ")");
  }
  return governing;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace

const ScheduledParameter& AppliedSchedule::parameter(const std::string& name) const {
  for (const ScheduledParameter& p : parameters_) {
    if (p.name == name) return p;
  }
  fail("AppliedSchedule::parameter: no parameter '", name, "'");
}

const OutputSparsity* AppliedSchedule::output_rule(const std::string& module) const {
  auto it = outputs_.find(module);
  return it == outputs_.end() ? nullptr : &it->second;
}

void check_schedule(const SparsitySchedule& schedule, const std::vector<std::string>& parameter_names,
                    const std::vector<std::string>& module_names) {
  for (size_t i = 0; i < schedule.parameters.size(); ++i) {
    initial_sparsifier(schedule.parameters[i], rule_label(schedule.parameters[i].selector, i, "parameter"));
  }
  for (size_t i = 0; i < schedule.outputs.size(); ++i) build_output(schedule.outputs[i], i);
  resolve(schedule.parameters, parameter_names, "parameter", "parameter");
  resolve(schedule.outputs, module_names, "output", "module");
}

AppliedSchedule apply_schedule(const SparsitySchedule& schedule, const NamedParameters& parameters,
                               const std::vector<std::string>& module_names, const SparsifyContext& ctx) {
  std::vector<std::string> names;
  for (const auto& p : parameters) names.push_back(p.first);
  check_schedule(schedule, names, module_names);

  AppliedSchedule applied;
  const std::vector<std::optional<size_t>> governing = resolve(schedule.parameters, names, "parameter", "parameter");
  for (size_t k = 0; k < parameters.size(); ++k) {
    const auto& [name, old] = parameters[k];
    ScheduledParameter p{name, old, governing[k], std::nullopt, nullptr};
    if (p.rule) {
      const ParameterRule& rule = schedule.parameters[*p.rule];
      const std::string where = rule_label(rule.selector, *p.rule, "parameter");
      COPPICE_CHECK(old.defined(), kPrefix, where, ": parameter '", name, "' is an undefined Variable");
      p.sparsifier = initial_sparsifier(rule, where);
      if (p.sparsifier != nullptr) {
        const std::string why = p.sparsifier->shape_mismatch(old.shape());
        COPPICE_CHECK(why.empty(), kPrefix, where, ": parameter '", name, "': ", why);
      }
      p.density = rule.density;
      SparsifyContext c = ctx;
      c.purpose = ctx.purpose ^ fnv1a(name);
      Tensor value;
      try {
        value = sparsify_stage(old.value(), p.sparsifier.get(), rule.format, c);
      } catch (const Error& e) { fail(kPrefix, where, ": parameter '", name, "': ", e.what()); }
      // A rule that changes nothing (dense, no sparsifier) keeps the Variable.
      if (!value.is_same(old.value())) {
        p.value = Variable(value, old.requires_grad(), old.name().empty() ? name : old.name());
      }
    }
    applied.parameters_.push_back(std::move(p));
  }
  const std::vector<std::optional<size_t>> modules = resolve(schedule.outputs, module_names, "output", "module");
  for (size_t k = 0; k < module_names.size(); ++k) {
    if (modules[k]) applied.outputs_[module_names[k]] = build_output(schedule.outputs[*modules[k]], *modules[k]);
  }
  return applied;
}

}  // namespace coppice
