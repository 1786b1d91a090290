#include "train/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "data/text_corpus.h"
#include "optim/growth.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparsifiers/apply_schedule.h"
#include "sparsifiers/registry.h"
#include "tensor/checked_math.h"
#include "tensor/error.h"
#include "tensor/host_memory.h"
#include "tensor/io/input_file.h"
#include "train/config_schema.h"
#include "train/error_quote.h"
#include "train/fingerprint.h"
#include "train/yaml_limits.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

const char* dataset_kind_name(DatasetKind kind) {
  switch (kind) {
    case DatasetKind::kFashionMnist: return "fashion_mnist";
    case DatasetKind::kSynthetic: return "synthetic";
    case DatasetKind::kText: return "text";
  }
  return "?";
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

const char* lr_schedule_kind_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kStep: return "step";
    case LrScheduleKind::kCosine: return "cosine";
  }
  return "?";
}

const char* mask_method_name(MaskMethod m) {
  switch (m) {
    case MaskMethod::kDense: return "dense";
    case MaskMethod::kStatic: return "static";
    case MaskMethod::kSet: return "set";
    case MaskMethod::kRigL: return "rigl";
    case MaskMethod::kRigLNm: return "rigl_nm";
    case MaskMethod::kSnfs: return "snfs";
    case MaskMethod::kGmp: return "gmp";
    case MaskMethod::kSrSte: return "sr_ste";
  }
  return "?";
}

const char* default_growth(MaskMethod m) {
  return m == MaskMethod::kSet ? "random" : m == MaskMethod::kSnfs ? "momentum" : "gradient";
}

const char* sparse_exchange_name(SparseExchange e) { return e == SparseExchange::kDense ? "dense" : "compact"; }

bool SparsityConfig::sparse_weights() const {
  for (const ParameterRule& r : schedule.parameters) {
    if (r.density && *r.density < 1.0) return true;
    if (r.sparsifier && r.sparsifier->name != "keep_all") return true;
    if (!r.density && distribution.density < 1.0) return true;
  }
  return false;
}

int config_error(const std::string& path, const absl::Status& status, std::ostream& err) {
  err << bounded_error_line(str_cat(path, ": ", status.message())) << "\n";
  return kConfigErrorExitCode;
}

namespace {

// Thrown inside the loader and turned into a Status at its boundary.
struct Issue {
  absl::StatusCode code;
  std::string message;
};

template <typename... Parts>
[[noreturn]] void bad(const std::string& path, const Parts&... parts) {
  throw Issue{absl::StatusCode::kInvalidArgument, str_cat(path, ": ", parts...)};
}

template <typename... Parts>
[[noreturn]] void missing(const std::string& path, const Parts&... parts) {
  throw Issue{absl::StatusCode::kNotFound, str_cat(path, ": ", parts...)};
}

std::string join_key(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

// Prune-and-regrow and GMP change masks: they need a built-in sparse format
// that holds any pattern (n:m's groups do not; the mask updater does not
// know a user's format).
bool is_mask_changing_format(const FormatSpec& spec) {
  return spec.layout != Layout::kDense && spec.layout != Layout::kCustom && spec.holds_any_pattern;
}

std::vector<std::string> mask_changing_format_names() {
  std::vector<std::string> names;
  for (const std::string& name : format_names())
    if (is_mask_changing_format(*find_format(name))) names.push_back(name);
  return names;
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The int64 a YAML integer scalar holds; one that does not fit (yaml-cpp
// refuses it) is refused as such, naming `where`.
int64_t scalar_integer(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {}
  if (is_integer_literal(n.Scalar()))
    bad(where, shorten_for_error(n.Scalar()), " does not fit in a 64-bit integer (",
        std::numeric_limits<int64_t>::min(), " to ", std::numeric_limits<int64_t>::max(), ")");
  bad(where, "expected an integer, got ", quote_for_error(n.Scalar()));
}

// A seed: an integer in [0, 2^64).
uint64_t scalar_seed(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<uint64_t>();  // refuses a sign
  } catch (const YAML::Exception&) {}
  if (!is_integer_literal(n.Scalar())) bad(where, "expected an integer, got ", quote_for_error(n.Scalar()));
  bad(where, "must be ", key_range("seed")->text(), ", got ", shorten_for_error(n.Scalar()),
      n.Scalar()[0] == '-' ? "" : " (it does not fit in 64 bits)");
}

// One map of the tree: refuses unknown keys and values of the wrong type on
// construction, then reads typed values with defaults.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string pattern)
      : node_(node), path_(std::move(path)), pattern_(std::move(pattern)) {
    if (!node_.IsDefined() || node_.IsNull()) return;
    if (!node_.IsMap()) bad(shown(), "expected a section (a map of keys), got ", describe(node_));
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) bad(shown(), "a key is not a plain name");
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second) bad(at(key), "given twice (YAML would keep only the first)");
      const SchemaKey* k = find_schema_key(join_key(pattern_, key));
      if (k == nullptr) throw Issue{absl::StatusCode::kInvalidArgument, unknown_key_message(path_, pattern_, key)};
      if (!value_fits(kv.second, k->type))
        bad(at(key), "expected ", key_type_name(k->type), ", got ", describe(kv.second));
    }
  }

  const std::string& path() const { return path_; }
  std::string shown() const { return path_.empty() ? std::string("the job") : path_; }
  std::string at(const std::string& key) const { return join_key(path_, key); }

  bool has(const std::string& key) const {
    if (!node_.IsMap()) return false;
    const YAML::Node v = node_[key];
    return v.IsDefined() && !v.IsNull();
  }
  YAML::Node get(const std::string& key) const { return node_[key]; }

  // Numbers are checked against their key's range (config_schema.h); a
  // fallback is the caller's and is not.
  int64_t integer(const std::string& key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const int64_t v = scalar_integer(get(key), at(key));
    check_range(key, v, [&] { return std::to_string(v); });
    return v;
  }
  // The key's range and a lower bound of the caller's (a contextual one).
  int64_t at_least(const std::string& key, int64_t fallback, int64_t low) const {
    const int64_t v = integer(key, fallback);
    if (v < low) bad(at(key), "must be >= ", low, ", got ", v);
    return v;
  }
  // Seeds: any unsigned 64-bit integer.
  uint64_t seed(const std::string& key, uint64_t fallback) const {
    return has(key) ? scalar_seed(get(key), at(key)) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const double v = get(key).as<double>();
    if (!std::isfinite(v)) bad(at(key), "must be a finite number, got ", shorten_for_error(get(key).Scalar()));
    check_range(key, v, [&] { return fmt(v); });
    return v;
  }
  bool boolean(const std::string& key, bool fallback) const { return has(key) ? get(key).as<bool>() : fallback; }
  std::string string(const std::string& key, const std::string& fallback) const {
    return has(key) ? get(key).Scalar() : fallback;
  }
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& options) const {
    std::string v = string(key, fallback);
    if (std::find(options.begin(), options.end(), v) != options.end()) return v;
    const std::string best = closest_match(v, options);
    bad(at(key), "must be one of ", str_join(options, " | "), ", got ", quote_for_error(v),
        best.empty() ? std::string() : str_cat("; did you mean '", best, "'?"));
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    if (!has(key)) return out;
    const YAML::Node v = get(key);
    if (v.IsScalar()) return {v.Scalar()};
    for (const auto& e : v) out.push_back(e.Scalar());
    return out;
  }
  Section section(const std::string& key) const {
    return Section(has(key) ? get(key) : YAML::Node(), at(key), join_key(pattern_, key));
  }
  std::vector<Section> list(const std::string& key) const {
    std::vector<Section> out;
    if (!has(key)) return out;
    const YAML::Node v = get(key);
    for (size_t i = 0; i < v.size(); ++i)
      out.emplace_back(v[i], str_cat(at(key), "[", i, "]"), join_key(pattern_, key) + "[]");
    return out;
  }
  // A free-form map of scalars, in file order.
  std::vector<std::pair<std::string, YAML::Node>> entries(const std::string& key) const {
    std::vector<std::pair<std::string, YAML::Node>> out;
    if (!has(key)) return out;
    std::set<std::string> seen;
    for (const auto& kv : get(key)) {
      if (!seen.insert(kv.first.Scalar()).second)
        bad(join_key(at(key), kv.first.Scalar()), "given twice (YAML would keep only the first)");
      if (!kv.second.IsScalar() && !kv.second.IsSequence())
        bad(join_key(at(key), kv.first.Scalar()), "expected a scalar, got ", describe(kv.second));
      out.emplace_back(kv.first.Scalar(), kv.second);
    }
    return out;
  }
  // Refuses `keys` when present: they belong to another choice.
  void refuse(const std::vector<std::string>& keys, const std::string& why) const {
    for (const std::string& k : keys)
      if (has(k)) bad(at(k), why);
  }

  template <typename T, typename Shown>
  void check_range(const std::string& key, T v, const Shown& shown) const {
    const KeyRange* r = key_range(join_key(pattern_, key));
    if (r != nullptr && !r->contains(v)) bad(at(key), "must be ", r->text(), ", got ", shown());
  }

  static std::string describe(const YAML::Node& n) {
    if (n.IsMap()) return "a map";
    if (n.IsSequence()) return "a list";
    if (n.IsScalar()) return quote_for_error(n.Scalar());
    return "nothing";
  }

 private:
  YAML::Node node_;
  std::string path_;
  std::string pattern_;
};

bool is_int(const YAML::Node& n, int64_t* out) {
  try {
    *out = n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

// A model option's value (the zoo checks it); an integer that does not fit
// int64 is refused here, naming `where`, rather than read as a float.
ModelOption model_option(const YAML::Node& n, const std::string& where) {
  if (n.IsSequence()) {  // sizes: [784, 300, 100, 10]
    std::vector<std::string> parts;
    for (const auto& e : n) {
      if (is_integer_literal(e.Scalar())) scalar_integer(e, where);
      parts.push_back(e.Scalar());
    }
    return str_join(parts, ",");
  }
  int64_t i = 0;
  if (is_int(n, &i)) return i;
  if (n.Tag() != "!" && is_integer_literal(n.Scalar())) scalar_integer(n, where);
  if (n.Tag() != "!") {  // a quoted scalar stays a string
    try {
      return n.as<double>();
    } catch (const YAML::Exception&) {}
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {}
  }
  return n.Scalar();
}

// precision: dtype and loss scaling (f16 needs scaling, so it defaults to
// dynamic there; bf16 and f32 default to none).
PrecisionConfig read_precision(const Section& s) {
  PrecisionConfig c;
  c.allow_tf32 = s.boolean("allow_tf32", false);
  const std::string dtype = s.choice("dtype", "f32", {"f32", "bf16", "f16"});
  c.dtype = dtype == "bf16" ? DType::kBF16 : dtype == "f16" ? DType::kF16 : DType::kF32;
  const std::string scale = s.string("loss_scale", c.dtype == DType::kF16 ? "dynamic" : "none");
  if (scale == "dynamic") {
    c.loss_scale.mode = LossScaleMode::kDynamic;
  } else if (scale != "none") {
    char* end = nullptr;
    const double v = std::strtod(scale.c_str(), &end);
    if (scale.empty() || end != scale.c_str() + scale.size())
      bad(s.at("loss_scale"), "expected dynamic, none or a number, got ", quote_for_error(scale));
    const KeyRange* range = key_range("precision.loss_scale");
    if (!range->contains(v))
      bad(s.at("loss_scale"), "a static loss scale must be ", range->text(), ", got ", shorten_for_error(scale));
    c.loss_scale.mode = LossScaleMode::kStatic;
    c.loss_scale.init_scale = v;
  }
  return c;
}

SparsifierSpec read_spec(const Section& s, const std::string& key) {
  SparsifierSpec spec;
  for (const auto& [name, value] : s.entries(key)) {
    if (!value.IsScalar()) bad(join_key(s.at(key), name), "expected a scalar, got a list");
    if (name == "name")
      spec.name = value.Scalar();
    else
      spec.params[name] = value.Scalar();
  }
  const std::string where = s.at(key);
  if (spec.name.empty()) bad(where, "needs a name (one of ", str_join(registered_sparsifiers(), ", "), ")");
  if (!is_sparsifier_registered(spec.name)) {
    const std::string best = closest_match(spec.name, registered_sparsifiers());
    bad(where + ".name", "unknown sparsifier ", quote_for_error(spec.name),
        "; known: ", str_join(registered_sparsifiers(), ", "),
        best.empty() ? std::string() : str_cat("; did you mean '", best, "'?"));
  }
  try {
    make_sparsifier(spec);
  } catch (const Error& e) { bad(where, e.what()); }
  return spec;
}

Selector read_selector(const Section& s) {
  const bool has_name = s.has("name"), has_regex = s.has("regex");
  if (has_name && has_regex) bad(s.at("regex"), "give name or regex, not both");
  if (!has_name && !has_regex) bad(s.path(), "needs a name or a regex selecting what the rule applies to");
  if (has_name) return Selector::exact(s.string("name", ""));
  Selector selector = Selector::regex(s.string("regex", ""));
  absl::StatusOr<std::shared_ptr<const NameRegex>> re = selector.compiled_regex();
  if (!re.ok()) bad(s.at("regex"), "'", shown_pattern(selector.pattern), "' ", re.status().message());
  return selector;
}

OutputFormat read_format(const Section& s, const std::string& key) {
  OutputFormat f;
  f.name = s.choice(key, "dense", format_names());
  return f;
}

StageSpec read_stage(const Section& s) {
  StageSpec st;
  if (s.has("inline")) st.inline_sparsifier = read_spec(s, "inline");
  if (s.has("external")) st.external_sparsifier = read_spec(s, "external");
  st.temporary_format = read_format(s, "temporary_format");
  st.output_format = read_format(s, "format");
  return st;
}

ParameterRule read_parameter_rule(const Section& r) {
  ParameterRule rule;
  rule.selector = read_selector(r);
  rule.format = read_format(r, "format");
  const std::string& f = rule.format.name;
  const FormatOptionKind options = format_spec(f, "format").options;
  if (has_block_shape(options)) {
    if (!r.has("block_rows")) bad(r.at("block_rows"), "required for format ", f);
    rule.format.options.block_rows = r.at_least("block_rows", 0, 1);
    rule.format.options.block_cols = r.at_least("block_cols", rule.format.options.block_rows, 1);
    if (options == FormatOptionKind::kSquareBlock && rule.format.options.block_cols != rule.format.options.block_rows)
      bad(r.at("block_cols"), f, " blocks are square: must equal block_rows (", rule.format.options.block_rows,
          "), got ", rule.format.options.block_cols);
  } else {
    r.refuse({"block_rows", "block_cols"},
             str_cat("only for block formats (", str_join(block_format_names(), ", "), "), not ", f));
  }
  if (r.has("density")) {
    const double d = r.number("density", 1.0);
    rule.density = d;
  }
  if (r.has("sparsifier")) rule.sparsifier = read_spec(r, "sparsifier");
  if (options == FormatOptionKind::kNm) {
    // The n:m format holds only what the nm sparsifier produces.
    int64_t n = 2, m = 4;
    if (rule.sparsifier) {
      if (rule.sparsifier->name != "nm")
        bad(r.at("sparsifier.name"), "format nm needs the nm sparsifier, got ", quote_for_error(rule.sparsifier->name));
      SpecParams p(*rule.sparsifier);
      n = p.get_int("n");
      m = p.get_int("m");
    }
    n = r.integer("n", n);
    m = r.integer("m", m);
    if (n < 1) bad(r.at("n"), "must be >= 1, got ", n);
    if (m < n) bad(r.at("m"), "must be >= n (", n, "), got ", m);
    if (rule.sparsifier) {
      SpecParams p(*rule.sparsifier);
      if (p.get_int("n") != n || p.get_int("m") != m)
        bad(r.at("sparsifier"), "nm(n=", p.get_int("n"), ", m=", p.get_int("m"), ") disagrees with the rule's ", n, ":",
            m);
    } else {
      rule.sparsifier = SparsifierSpec{"nm", {{"n", std::to_string(n)}, {"m", std::to_string(m)}}};
    }
    // Transposable: n:m along the columns too (so W^T runs n:m), a parameter of the nm sparsifier.
    if (r.has("transposable")) {
      const std::string t = r.boolean("transposable", false) ? "true" : "false";
      auto given = rule.sparsifier->params.find("transposable");
      if (given != rule.sparsifier->params.end() && given->second != t)
        bad(r.at("transposable"), "disagrees with the sparsifier's transposable: ", given->second);
      rule.sparsifier->params["transposable"] = t;
    }
    if (rule.density && std::abs(*rule.density - static_cast<double>(n) / static_cast<double>(m)) > 1e-9)
      bad(r.at("density"), "an ", n, ":", m, " weight keeps ", fmt(static_cast<double>(n) / m), " of its entries, got ",
          fmt(*rule.density));
    rule.format.options.n = n;
    rule.format.options.m = m;
  } else {
    r.refuse({"n", "m", "transposable"}, str_cat("only for format nm, not ", f));
    if (rule.sparsifier && rule.sparsifier->name == "nm")
      bad(r.at("format"), "the nm sparsifier makes n:m weights; use format nm (or masked / a general format), got ", f);
  }
  if (rule.density && rule.sparsifier && rule.sparsifier->params.count("sparsity")) {
    const double s = std::stod(rule.sparsifier->params.at("sparsity"));
    if (std::abs((1.0 - s) - *rule.density) > 1e-9)
      bad(r.at("density"), fmt(*rule.density), " contradicts the sparsifier's sparsity ", fmt(s),
          " (density = 1 - sparsity)");
  }
  return rule;
}

void read_sparsity(const Section& sp, JobConfig& job) {
  SparsityConfig& c = job.sparsity;
  c.has_density = sp.has("density");
  c.distribution.density = sp.number("density", 1.0);
  c.distribution.distribution = parse_density_distribution(sp.choice("distribution", "erk", {"uniform", "er", "erk"}));
  for (const auto& [name, value] : sp.entries("overrides")) {
    const std::string key = join_key(sp.at("overrides"), name);
    if (!value_fits(value, KeyType::kDouble) || value.IsNull())
      bad(key, "expected a number, got ", Section::describe(value));
    const double d = value.as<double>();
    if (!(d > 0.0 && d <= 1.0)) bad(key, "must be in (0, 1], got ", fmt(d));
    c.distribution.overrides[name] = d;
  }
  for (const std::string& name : sp.strings("dense")) {
    if (c.distribution.overrides.count(name))
      bad(sp.at("dense"), quote_for_error(name), " also has a density in sparsity.overrides");
    c.distribution.dense.insert(name);
  }
  for (const Section& r : sp.list("rules")) c.schedule.parameters.push_back(read_parameter_rule(r));
  if (c.schedule.parameters.empty()) {
    for (const char* key : {"density", "overrides", "dense"})
      if (sp.has(key)) bad(sp.at(key), "applies to the parameters that sparsity.rules select, and there are no rules");
  }
  for (const Section& o : sp.list("outputs")) {
    OutputRule rule;
    rule.selector = read_selector(o);
    for (const Section& st : o.list("forward")) rule.forward.push_back(read_stage(st));
    for (const Section& st : o.list("backward")) rule.backward.push_back(read_stage(st));
    c.schedule.outputs.push_back(std::move(rule));
  }
}

void read_optimizer(const Section& o, OptimizerConfig& c) {
  const std::string name = o.choice("name", "sgd", {"sgd", "adam", "adamw"});
  const double lr = o.number("lr", 1e-3);
  c.grad_clip = o.number("grad_clip", 0.0);
  if (name == "sgd") {
    c.kind = OptimizerKind::kSgd;
    o.refuse({"beta1", "beta2", "eps"}, "not an option of sgd (it is adam's and adamw's)");
    c.sgd.lr = lr;
    c.sgd.momentum = o.number("momentum", 0.0);
    c.sgd.dampening = o.number("dampening", 0.0);
    c.sgd.nesterov = o.boolean("nesterov", false);
    if (c.sgd.nesterov && (c.sgd.momentum <= 0.0 || c.sgd.dampening != 0.0))
      bad(o.at("nesterov"), "needs momentum > 0 and dampening 0, got momentum ", fmt(c.sgd.momentum), " and dampening ",
          fmt(c.sgd.dampening));
    c.sgd.weight_decay = o.number("weight_decay", 0.0);
    return;
  }
  c.kind = name == "adam" ? OptimizerKind::kAdam : OptimizerKind::kAdamW;
  o.refuse({"momentum", "dampening", "nesterov"}, str_cat("not an option of ", name, " (it is sgd's)"));
  c.adam = name == "adam" ? AdamOptions{} : AdamWOptions{};
  c.adam.lr = lr;
  c.adam.beta1 = o.number("beta1", c.adam.beta1);
  c.adam.beta2 = o.number("beta2", c.adam.beta2);
  c.adam.eps = o.number("eps", c.adam.eps);
  c.adam.weight_decay = o.number("weight_decay", c.adam.weight_decay);
}

void read_lr_schedule(const Section& s, double lr, LrScheduleConfig& c) {
  const std::string name = s.choice("name", "constant", {"constant", "step", "cosine"});
  c.kind = name == "step"     ? LrScheduleKind::kStep
           : name == "cosine" ? LrScheduleKind::kCosine
                              : LrScheduleKind::kConstant;
  if (c.kind != LrScheduleKind::kStep)
    s.refuse({"step_size", "gamma"}, str_cat("only for the step schedule, not ", name));
  if (c.kind != LrScheduleKind::kCosine)
    s.refuse({"t_max", "eta_min"}, str_cat("only for the cosine schedule, not ", name));
  if (c.kind == LrScheduleKind::kStep) {
    if (!s.has("step_size")) bad(s.at("step_size"), "required for the step schedule");
    c.step_size = s.at_least("step_size", 0, 1);
    c.gamma = s.number("gamma", 0.1);
  }
  if (c.kind == LrScheduleKind::kCosine) {
    c.t_max = s.at_least("t_max", 0, 0);
    c.eta_min = s.number("eta_min", 0.0);
    if (!(c.eta_min >= 0.0 && c.eta_min <= lr))
      bad(s.at("eta_min"), "must be in [0, optimizer.lr = ", fmt(lr), "], got ", fmt(c.eta_min));
  }
  c.warmup_steps = s.at_least("warmup_steps", 0, 0);
  c.warmup_start_factor = s.number("warmup_start_factor", 0.0);
  if (c.warmup_steps == 0 && c.warmup_start_factor != 0.0)
    bad(s.at("warmup_start_factor"), "has no effect without lr_schedule.warmup_steps > 0");
}

const std::vector<std::string> kRegrowKeys = {"interval", "drop_fraction",        "drop_schedule",
                                              "prune",    "allow_regrow_dropped", "growth"};
const std::vector<std::string> kGmpKeys = {"initial_density", "final_density", "frequency"};

void read_mask_update(const Section& s, const JobConfig& job, MaskUpdateConfig& c) {
  const std::string method =
      s.choice("method", "dense", {"dense", "static", "set", "rigl", "rigl_nm", "snfs", "gmp", "sr_ste"});
  const std::map<std::string, MaskMethod> methods = {{"dense", MaskMethod::kDense},    {"static", MaskMethod::kStatic},
                                                     {"set", MaskMethod::kSet},        {"rigl", MaskMethod::kRigL},
                                                     {"rigl_nm", MaskMethod::kRigLNm}, {"snfs", MaskMethod::kSnfs},
                                                     {"gmp", MaskMethod::kGmp},        {"sr_ste", MaskMethod::kSrSte}};
  c.method = methods.at(method);
  if (c.method == MaskMethod::kDense || c.method == MaskMethod::kStatic) {
    std::vector<std::string> all = kRegrowKeys;
    all.insert(all.end(), kGmpKeys.begin(), kGmpKeys.end());
    all.push_back("start_step");
    all.push_back("end_step");
    all.push_back("decay");
    s.refuse(all, str_cat("not used by method ", method, " (masks never change)"));
    return;
  }
  if (c.method == MaskMethod::kSrSte) {
    // Every interval steps, from the first to the last: no start or end.
    std::vector<std::string> others = {"start_step", "end_step"};
    for (const std::string& k : kRegrowKeys)
      if (k != "interval") others.push_back(k);
    others.insert(others.end(), kGmpKeys.begin(), kGmpKeys.end());
    s.refuse(others, "not used by method sr_ste (its keys: interval, decay)");
    c.sr_ste.interval = s.at_least("interval", 1, 1);
    c.sr_ste.decay = s.number("decay", 2e-4);
    try {
      validate(c.sr_ste);
    } catch (const Error& e) { bad(s.path(), e.what()); }
    return;
  }
  s.refuse({"decay"}, str_cat("only for method sr_ste, not ", method));
  const int64_t start = s.at_least("start_step", 0, 0);
  if (!s.has("end_step")) bad(s.at("end_step"), "required for method ", method);
  const int64_t end = s.integer("end_step", 0);
  if (end <= start) bad(s.at("end_step"), "must be > start_step (", start, "), got ", end);
  if (c.method == MaskMethod::kGmp) {
    s.refuse(kRegrowKeys, "not used by method gmp (it only prunes)");
    c.gmp.start_step = start;
    c.gmp.end_step = end;
    c.gmp.frequency = s.at_least("frequency", 100, 1);
    c.gmp.initial_density = s.number("initial_density", 1.0);
    if (!s.has("final_density") && !job.sparsity.has_density)
      bad(s.at("final_density"), "required for method gmp (or set sparsity.density)");
    c.gmp.final_density = s.number("final_density", job.sparsity.distribution.density);
    if (c.gmp.final_density > c.gmp.initial_density)
      bad(s.at("final_density"), "must be <= mask_update.initial_density (", fmt(c.gmp.initial_density), "), got ",
          fmt(c.gmp.final_density));
    if (job.sparsity.has_density && std::abs(job.sparsity.distribution.density - c.gmp.final_density) > 1e-12)
      bad(s.at("final_density"), "disagrees with sparsity.density (", fmt(job.sparsity.distribution.density),
          "), the target it prunes to; got ", fmt(c.gmp.final_density));
    try {
      validate(c.gmp);
    } catch (const Error& e) { bad(s.path(), e.what()); }
    return;
  }
  s.refuse(kGmpKeys, str_cat("only for method gmp, not ", method));
  MaskUpdaterConfig& u = c.updater;
  u.start_step = start;
  u.end_step = end;
  u.interval = s.at_least("interval", 100, 1);
  u.drop_fraction = s.number("drop_fraction", 0.3);
  u.schedule = parse_drop_schedule(s.choice("drop_schedule", "cosine", {"constant", "cosine", "linear"}));
  u.prune = parse_prune_criterion(s.choice("prune", "magnitude", {"magnitude", "movement"}));
  u.allow_regrow_dropped = s.boolean("allow_regrow_dropped", false);
  u.growth = default_growth(c.method);
  // A growth policy by name (optim/growth.h's registry: the built-ins, or one
  // the program registered before loading the job) instead of the method's.
  if (s.has("growth")) {
    u.growth = s.string("growth", u.growth);
    if (!is_growth_policy_registered(u.growth))
      bad(s.at("growth"), "unknown growth policy ", quote_for_error(u.growth),
          "; registered: ", str_join(registered_growth_policies(), ", "),
          " (a program registers its own with register_growth_policy)");
  }
  u.seed = job.seed;
  try {
    validate(u);
  } catch (const Error& e) { bad(s.path(), e.what()); }
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

enum PathKinds { kFileOnly = 1, kDirOnly = 2, kFileOrDir = 3, kCharDevice = 4, kFileOrCharDevice = 5 };

// Refuses `path` (the value of `key`; `noun` says what it is, "text file or
// directory ") unless it is a regular file or a directory as `allowed`
// says: NotFound "'<path>' not found<hint>", or InvalidArgument "'<path>' is
// a FIFO, not a regular file". Found by stat, so nothing is opened here: a
// FIFO or a device is refused before any reader meets it.
void require_path(const std::string& key, const std::string& noun, const std::string& path, PathKinds allowed,
                  const std::string& hint = "") {
  const absl::StatusOr<mode_t> type = file_type_at(path);
  if (!type.ok()) missing(key, noun, quote_for_error(path), " not found", hint);
  if ((S_ISREG(*type) && (allowed & kFileOnly)) || (S_ISDIR(*type) && (allowed & kDirOnly)) ||
      (S_ISCHR(*type) && (allowed & kCharDevice)))
    return;
  const char* wanted = allowed == kFileOnly           ? "a regular file"
                       : allowed == kDirOnly          ? "a directory"
                       : allowed == kFileOrCharDevice ? "a regular file or a character device (/dev/null)"
                                                      : "a regular file or a directory";
  bad(key, noun, quote_for_error(path), " is ", file_type_name(*type), ", not ", wanted);
}

void read_data(const Section& d, JobConfig& job) {
  DataConfig& c = job.data;
  const std::string kind = d.choice("dataset", "fashion_mnist", {"fashion_mnist", "synthetic", "text"});
  c.dataset = kind == "synthetic" ? DatasetKind::kSynthetic
              : kind == "text"    ? DatasetKind::kText
                                  : DatasetKind::kFashionMnist;
  c.path = d.string("path", "");
  c.loader.batch_size = d.integer("batch_size", 64);
  c.eval_batch_size = d.integer("eval_batch_size", 0);
  c.validation_split = d.number("validation_split", 0.0);
  c.loader.shuffle = d.boolean("shuffle", true);
  c.loader.seed = d.seed("shuffle_seed", job.seed);
  c.loader.drop_last = d.boolean("drop_last", false);

  const std::vector<std::string> mnist_keys = {"flatten", "normalize", "mean", "std"};
  const std::vector<std::string> text_keys = {"seq_len", "stride", "suffix", "vocab"};
  if (c.dataset != DatasetKind::kFashionMnist)
    d.refuse(mnist_keys, str_cat("only for dataset fashion_mnist, not ", kind));
  if (c.dataset != DatasetKind::kText) d.refuse(text_keys, str_cat("only for dataset text, not ", kind));
  if (c.dataset != DatasetKind::kSynthetic) d.refuse({"synthetic"}, str_cat("only for dataset synthetic, not ", kind));
  if (c.dataset == DatasetKind::kSynthetic) d.refuse({"path"}, "dataset synthetic reads no files");

  switch (c.dataset) {
    case DatasetKind::kFashionMnist: {
      FashionMnistOptions& f = c.fashion_mnist;
      if (!c.path.empty()) f.dir = c.path;
      f.flatten = d.boolean("flatten", false);
      f.normalize = d.boolean("normalize", true);
      f.mean = d.number("mean", kFashionMnistMean);
      f.std = d.number("std", kFashionMnistStd);
      const std::string key = c.path.empty() ? std::string("data.dataset") : d.at("path");
      require_path(key, "Fashion-MNIST directory ", f.dir, kDirOnly,
                   c.path.empty() ? " (install the Debian package dataset-fashion-mnist: tools/setup)" : "");
      for (FashionMnistSplit split : {FashionMnistSplit::kTrain, FashionMnistSplit::kTest})
        for (const std::string& file :
             {fashion_mnist_images_path(f.dir, split), fashion_mnist_labels_path(f.dir, split)})
          require_path(key, "", file, kFileOnly);
      break;
    }
    case DatasetKind::kText: {
      c.text.seq_len = d.integer("seq_len", 64);
      c.text.stride = d.integer("stride", 0);
      c.text.suffix = d.string("suffix", "");
      c.text.byte_vocab = d.choice("vocab", "distinct", {"distinct", "bytes"}) == "bytes";
      const std::string file = c.text_path();
      const std::string key = c.path.empty() ? std::string("data.dataset") : d.at("path");
      std::string hint;
      if (c.path.empty()) hint = str_cat(" (install the Debian package ", kDefaultTextCorpusPackage, ")");
      if (file == kLinuxDocCorpus) hint = str_cat(" (install the Debian package ", kLinuxDocCorpusPackage, ")");
      require_path(key, "text file or directory ", file, kFileOrDir, hint);
      if (is_file(file) && !c.text.suffix.empty())
        d.refuse({"suffix"}, str_cat("only for a directory, not the file ", file));
      break;
    }
    case DatasetKind::kSynthetic: {
      const Section s = d.section("synthetic");
      BlobsOptions& b = c.synthetic;
      b.n = s.integer("examples", 1000);
      c.synthetic_test_examples = s.integer("test_examples", 0);
      b.features = s.integer("features", 2);
      b.classes = s.integer("classes", 3);
      b.center_scale = s.number("center_scale", 5.0);
      b.spread = s.number("spread", 1.0);
      b.seed = s.seed("seed", job.seed);
      // Drawn whole before training: refused here when larger than memory.
      BlobsOptions all = b;
      all.n = b.n + c.synthetic_test_examples;  // each at most kMaxExamples
      try {
        check_host_memory(blobs_bytes(all), str_cat(all.n, " examples of ", b.features, " features"));
      } catch (const Error& e) { bad(s.at("examples"), e.what()); }
      break;
    }
  }
}

// The training set's examples where they are known without reading data
// (fashion_mnist, synthetic): all, held out for validation, and per rank.
struct TrainExamples {
  int64_t all = 0;
  int64_t held_out = 0;  // floor(all * validation_split)
  int64_t per_rank = 0;  // ceil((all - held_out) / world_size): data/loader.h pads as DistributedSampler does
};

std::optional<TrainExamples> train_examples(const JobConfig& job) {
  TrainExamples e;
  if (job.data.dataset == DatasetKind::kFashionMnist)
    e.all = kFashionMnistTrainSize;
  else if (job.data.dataset == DatasetKind::kSynthetic)
    e.all = job.data.synthetic.n;
  else
    return std::nullopt;
  e.held_out = static_cast<int64_t>(std::floor(static_cast<double>(e.all) * job.data.validation_split));
  e.per_rank = ceil_div(e.all - e.held_out, job.distributed.world_size);
  return e;
}

// An upper bound on the optimizer steps of the job, where it can be known
// without reading data (one process; no drop_last).
std::optional<int64_t> planned_steps(const JobConfig& job) {
  if (job.training.steps) return job.training.steps;
  const std::optional<TrainExamples> examples = train_examples(job);
  if (!examples) return std::nullopt;
  const int64_t batches = ceil_div(examples->per_rank, job.data.loader.batch_size);
  const int64_t epochs = *job.training.epochs;
  int64_t steps = 0;
  if (mul_overflows(epochs, batches, &steps) || steps > kMaxSteps)
    bad("training.epochs", epochs, " epochs of ", batches, " steps make more than ", kMaxSteps, " steps");
  return steps;
}

// What the loop counts (steps x batch_size x world_size examples) must fit
// its counters.
void check_examples_countable(const JobConfig& job, int64_t steps) {
  int64_t examples = 0;
  if (mul_overflows(steps, job.data.loader.batch_size, &examples) ||
      mul_overflows(examples, job.distributed.world_size, &examples))
    bad(job.training.steps ? "training.steps" : "training.epochs", steps, " steps of ", job.data.loader.batch_size,
        " examples on ", job.distributed.world_size, " ranks are more examples than a 64-bit integer counts");
}

// The rule that decides `name`: an exact rule over regex rules; null if none.
const ParameterRule* chosen_rule(const SparsitySchedule& sched, const std::string& name) {
  const ParameterRule* chosen = nullptr;
  for (const ParameterRule& r : sched.parameters) {
    if (!r.selector.matches(name)) continue;
    if (chosen == nullptr || r.selector.kind == Selector::Kind::kExact) chosen = &r;
  }
  return chosen;
}

// The density a rule fixes by itself: its own, or its sparsifier's.
std::optional<double> fixed_density(const ParameterRule& r) {
  if (r.density) return r.density;
  if (!r.sparsifier) return std::nullopt;
  const auto& p = r.sparsifier->params;
  if (p.count("sparsity")) return 1.0 - std::stod(p.at("sparsity"));
  if (r.sparsifier->name == "nm" && p.count("n") && p.count("m")) return std::stod(p.at("n")) / std::stod(p.at("m"));
  return std::nullopt;
}

// The key of a model option ("model" where the model fixes the value).
std::string option_key(const ModelInput::From& from) {
  return from.option.empty() ? std::string("model") : str_cat("model.options.", from.option);
}

// "<part> must be" or "must be", as the option states the value.
std::string must_be(const ModelInput::From& from) { return from.part.empty() ? "must be" : from.part + " must be"; }

// Images (fashion_mnist, not flattened) against what an image model reads.
void check_images_fit(const JobConfig& job, const ModelInput& in) {
  const std::string& model = job.model.name;
  const DataConfig& d = job.data;
  if (d.dataset != DatasetKind::kFashionMnist)
    bad("data.dataset", model, " reads images: must be fashion_mnist, got ", dataset_kind_name(d.dataset));
  if (d.fashion_mnist.flatten)
    bad("data.flatten", model, " reads [N, ", str_join(in.example, ", "), "] images: must be false");
  if (in.example != Shape{1, kFashionMnistSide, kFashionMnistSide})
    bad(option_key(in.input_from), "Fashion-MNIST images are 1 x ", kFashionMnistSide, " x ", kFashionMnistSide);
  if (in.classes != kFashionMnistClasses)
    bad(option_key(in.classes_from), must_be(in.classes_from), " the ", kFashionMnistClasses, " classes of ",
        dataset_kind_name(d.dataset), ", got ", in.classes);
}

// Feature vectors (synthetic blobs, or Fashion-MNIST images flattened)
// against what a model of features reads.
void check_features_fit(const JobConfig& job, const ModelInput& in) {
  const DataConfig& d = job.data;
  const std::string dataset = dataset_kind_name(d.dataset);
  const bool blobs = d.dataset == DatasetKind::kSynthetic;
  const int64_t features = blobs ? d.synthetic.features : kFashionMnistSide * kFashionMnistSide;
  const int64_t classes = blobs ? d.synthetic.classes : kFashionMnistClasses;
  if (in.example.front() != features)
    bad(option_key(in.input_from), must_be(in.input_from), " the ", features, " input features of ", dataset, ", got ",
        in.example.front());
  if (in.classes != classes)
    bad(option_key(in.classes_from), must_be(in.classes_from), " the ", classes, " classes of ", dataset, ", got ",
        in.classes);
}

// The text corpus against what a model of tokens reads: windows within its
// context, every byte of the corpus within its vocabulary.
void check_text_fits(const JobConfig& job, const ModelInput& in) {
  const DataConfig& d = job.data;
  const int64_t context = in.example.front();
  if (d.text.seq_len > context)
    bad("data.seq_len", "must be <= ", option_key(in.input_from), " (", context, "), got ", d.text.seq_len);
  // The corpus, read as the trainer will (bounded: data/text.h), and the
  // dataset made of it must fit in memory.
  const std::string key = d.path.empty() ? "data.dataset" : "data.path";
  const absl::StatusOr<std::string> text = read_text_corpus(d.text_path(), d.text.suffix, kTextMaxBytes);
  if (!text.ok()) bad(key, text.status().message());
  try {
    check_host_memory(CharTextDataset::memory_bytes(static_cast<int64_t>(text->size())),
                      str_cat("the text dataset of '", d.text_path(), "'"));
  } catch (const Error& e) { bad(key, e.what()); }
  if (static_cast<int64_t>(text->size()) <= d.text.seq_len)
    bad("data.seq_len", "the corpus '", d.text_path(), "' has ", text->size(),
        " bytes, too few for one window of seq_len ", d.text.seq_len, " and its next-byte target");
  // The embedding needs a row for every token: each distinct byte of the
  // corpus, or all 256 with vocab: bytes.
  if (d.text.byte_vocab) {
    if (in.classes < 256) bad(option_key(in.classes_from), "data.vocab is bytes: must be >= 256, got ", in.classes);
    return;
  }
  const int64_t distinct = CharVocab(*text).size();
  if (in.classes < distinct)
    bad(option_key(in.classes_from), "the corpus '", d.text_path(), "' has ", distinct,
        " distinct bytes: must be >= ", distinct, ", got ", in.classes);
}

// What the model reads (the zoo says: models/zoo.h, model_input) against
// what the dataset gives. The model is already built, so its options are
// valid.
void check_model_fits_data(const JobConfig& job) {
  const std::string& model = job.model.name;
  const ModelInput in = model_input(job.model);
  const bool tokens = in.kind == InputKind::kTokens;
  if (tokens != (job.data.dataset == DatasetKind::kText))
    bad("data.dataset",
        tokens ? str_cat(model, " reads token ids: must be text") : str_cat(model, " does not read text"), ", got ",
        dataset_kind_name(job.data.dataset), " with model ", model);
  switch (in.kind) {
    case InputKind::kImage: return check_images_fit(job, in);
    case InputKind::kFeatures: return check_features_fit(job, in);
    case InputKind::kTokens: return check_text_fits(job, in);
  }
}

// Checks that need the model: its options, the rules' selectors against its
// parameter and module names, the density split over its layers, and the
// mask method against the weights the rules make sparse. Returns the job
// with the model and the resolved schedule, for the run to take over.
ValidatedJob check_against_model(JobConfig job) {
  // Building it is what shows a model too large: a size that overflows, or
  // parameters beyond the host's memory (the zoo and the allocator refuse
  // them, with the bytes, before allocating).
  ModulePtr model;
  try {
    model = make_model(job.model);
  } catch (const ModelOptionError& e) {
    bad(str_cat("model.options.", e.option()), e.reason());
  } catch (const Error& e) { bad("model", e.what()); }
  std::vector<std::string> params, modules;
  std::map<std::string, Shape> shapes;
  for (const auto& [name, v] : model->named_parameters()) {
    params.push_back(name);
    shapes[name] = v.value().shape();
  }
  for (const auto& [name, m] : model->named_modules()) modules.push_back(name);
  const SparsitySchedule& sched = job.sparsity.schedule;
  try {
    check_schedule(sched, params, modules);
  } catch (const Error& e) { bad("sparsity", e.what()); }
  auto near = [&](const std::string& name) {
    const std::string best = closest_match(name, params);
    return best.empty() ? std::string() : str_cat("; did you mean '", best, "'?");
  };
  for (const auto& [name, d] : job.sparsity.distribution.overrides)
    if (!shapes.count(name))
      bad(str_cat("sparsity.overrides.", name), "the model has no parameter ", quote_for_error(name), near(name));
  for (const std::string& name : job.sparsity.distribution.dense)
    if (!shapes.count(name)) bad("sparsity.dense", "the model has no parameter ", quote_for_error(name), near(name));

  std::vector<LayerShape> layers;
  for (const std::string& name : params) layers.push_back({name, shapes[name]});
  std::set<std::string> selected;
  for (const std::string& name : params)
    if (chosen_rule(sched, name) != nullptr) selected.insert(name);
  for (const auto& [name, d] : job.sparsity.distribution.overrides)
    if (!selected.count(name))
      bad(str_cat("sparsity.overrides.", name), "no rule in sparsity.rules selects '", name, "'");
  for (const std::string& name : job.sparsity.distribution.dense)
    if (!selected.count(name)) bad("sparsity.dense", "no rule in sparsity.rules selects '", name, "'");
  // Shapes the formats cannot hold (to_format would refuse them at run time).
  for (const std::string& name : params) {
    const ParameterRule* r = chosen_rule(sched, name);
    if (r == nullptr || job.sparsity.distribution.dense.count(name)) continue;
    const std::string key = str_cat("sparsity.rules[", r - sched.parameters.data(), "].format");
    const std::string& f = r->format.name;
    const Shape& shape = shapes[name];
    const FormatSpec& spec = format_spec(f, key);
    if (spec.rank == FormatRank::kMatrix && shape.size() != 2)
      bad(key, f, " holds matrices; '", name, "' has shape ", shape_to_string(shape), " (use coo or masked)");
    if (has_block_shape(spec.options)) {
      const FormatOptions& o = r->format.options;
      if (shape[0] % o.block_rows != 0 || shape[1] % o.block_cols != 0)
        bad(key, o.block_rows, "x", o.block_cols, " blocks do not divide '", name, "' of shape ",
            shape_to_string(shape));
    }
    if (spec.options == FormatOptionKind::kNm && (shape.empty() || shape.back() % r->format.options.m != 0))
      bad(key, "groups of ", r->format.options.m, " do not divide the last dimension of '", name, "' of shape ",
          shape_to_string(shape));
    // Shapes the rule's sparsifier cannot take (its blocks or groups).
    if (r->sparsifier) {
      const std::string why = make_sparsifier(*r->sparsifier)->shape_mismatch(shape);
      if (!why.empty())
        bad(str_cat("sparsity.rules[", r - sched.parameters.data(), "].sparsifier"), "cannot take '", name, "': ", why);
    }
  }
  SparsitySchedule resolved;
  try {
    resolved = resolve_schedule(job, layers);
  } catch (const Error& e) { bad("sparsity.density", e.what()); }
  try {
    check_schedule(resolved, params, modules);
  } catch (const Error& e) {
    bad("sparsity", e.what(), " (with densities from sparsity.density and sparsity.distribution)");
  }

  const MaskMethod method = job.mask_update.method;
  const std::string mname = mask_method_name(method);
  const bool sparse = job.sparsity.sparse_weights();
  if (method == MaskMethod::kDense && sparse)
    bad("mask_update.method",
        "dense trains every weight, but sparsity.rules make weights sparse; use static (a fixed mask) "
        "or a prune-and-regrow method");
  if ((method == MaskMethod::kStatic || method == MaskMethod::kSrSte || job.mask_update.is_prune_and_regrow()) &&
      !sparse)
    bad("mask_update.method", mname, " needs sparse weights: add sparsity.rules and a density below 1");
  if (method == MaskMethod::kSrSte) {
    // Dense weights seen through their n:m projection by the layer that reads them.
    for (size_t i = 0; i < sched.parameters.size(); ++i) {
      const std::string& f = sched.parameters[i].format.name;
      if (format_spec(f, "format").layout != Layout::kNm)
        bad(str_cat("sparsity.rules[", i, "].format"),
            "sr_ste trains dense weights through their n:m projection and needs format nm, got ", f,
            " (for other formats use static, set, rigl or snfs)");
    }
    for (const std::string& name : params) {
      const ParameterRule* r = chosen_rule(sched, name);
      if (r == nullptr || job.sparsity.distribution.dense.count(name) || model->accepts_view(name)) continue;
      bad(str_cat("sparsity.rules[", r - sched.parameters.data(), "]"), "sr_ste sees a weight through its n:m ",
          "projection where its layer reads it, which Linear and Conv2d weights allow; '", name, "' is not one");
    }
  }
  if (method == MaskMethod::kGmp) {
    if (sched.parameters.empty()) bad("mask_update.method", "gmp needs sparsity.rules selecting the weights it prunes");
    for (size_t i = 0; i < sched.parameters.size(); ++i)
      if (sched.parameters[i].density)
        bad(str_cat("sparsity.rules[", i, "].density"),
            "gmp schedules the density; set mask_update.final_density instead");
  }
  if (job.mask_update.is_prune_and_regrow() || method == MaskMethod::kGmp) {
    for (size_t i = 0; i < sched.parameters.size(); ++i) {
      const std::string& f = sched.parameters[i].format.name;
      // n:m regrows within its groups (optim/group_regrow.h); GMP cannot keep n per group.
      const bool nm = format_spec(f, "format").layout == Layout::kNm;
      const std::optional<SparsifierSpec>& spec = sched.parameters[i].sparsifier;
      if (nm && spec && spec->params.count("transposable") && spec->params.at("transposable") == "true")
        bad(str_cat("sparsity.rules[", i, "].transposable"),
            "transposable masks stay fixed (method static) or are chosen whole (sr_ste): ", mname,
            " regrows within the groups of a row, which leaves the columns' groups uneven");
      if (method == MaskMethod::kRigLNm && !nm)
        bad(str_cat("sparsity.rules[", i, "].format"), "rigl_nm regrows n:m layers within their groups and needs ",
            "format nm, got ", f, " (method rigl takes any format)");
      if (!is_mask_changing_format(format_spec(f, "format")) && !(nm && method != MaskMethod::kGmp))
        bad(str_cat("sparsity.rules[", i, "].format"), mname, " changes masks and needs one of ",
            str_join(mask_changing_format_names(), ", "), method == MaskMethod::kGmp ? "" : " or nm", ", got ", f);
    }
  }
  if (method == MaskMethod::kSnfs && job.optimizer.kind == OptimizerKind::kSgd && job.optimizer.sgd.momentum <= 0.0)
    bad("optimizer.momentum", "snfs grows by momentum: must be > 0 with sgd, got ", fmt(job.optimizer.sgd.momentum));
  check_model_fits_data(job);
  return ValidatedJob(std::move(job), std::move(model), std::move(resolved));
}

// Settings that are each valid but cannot work together; refused with the
// reason rather than left to misbehave quietly at run time.
void check_combinations(const JobConfig& job) {
  const DistributedConfig& d = job.distributed;
  const MaskMethod method = job.mask_update.method;
  if (d.topk_fraction > 0.0) {
    if (d.world_size == 1)
      bad("distributed.topk_fraction", "has no effect with one rank (distributed.world_size 1); leave it 0");
    // On update steps the growth policies read gradients that the top-k
    // exchange has truncated: ranks would grow from a partial gradient.
    if (method == MaskMethod::kRigL || method == MaskMethod::kRigLNm || method == MaskMethod::kSnfs)
      bad("distributed.topk_fraction", mask_method_name(method), " grows from the ",
          method == MaskMethod::kSnfs ? "momentum" : "dense gradient",
          " averaged over ranks, which the top-k exchange truncates: use 0 (exact exchange) with ",
          mask_method_name(method));
  }
  // Examples per rank, where known without reading data.
  if (const std::optional<TrainExamples> e = train_examples(job)) {
    if (job.data.validation_split > 0.0 && e->held_out == 0)
      bad("data.validation_split", "holds out no example of the ", e->all, " (", fmt(job.data.validation_split), " x ",
          e->all, " < 1)");
    if (job.data.loader.drop_last && e->per_rank < job.data.loader.batch_size)
      bad("data.drop_last", "leaves no batch: each rank has ", e->per_rank,
          " training examples, fewer than data.batch_size ", job.data.loader.batch_size);
  }
}

// device: auto, or a device Device::parse reads.
void read_device(const Section& top, JobConfig& job) {
  const std::string device = top.string("device", "auto");
  if (device != "auto") {
    try {
      job.device.device = Device::parse(device);
      job.device.is_auto = false;
    } catch (const Error&) { bad("device", "must be auto, cpu, cuda or cuda:N, got ", quote_for_error(device)); }
  }
}

// model: a zoo model by name, with options the zoo knows (the seed defaults
// to the job's).
void read_model(const Section& model, JobConfig& job) {
  if (!model.has("name")) bad("model.name", "required (one of ", str_join(model_names(), ", "), ")");
  job.model.name = model.choice("name", "", model_names());
  const std::vector<std::string> known = model_option_names(job.model.name);
  for (const auto& [name, value] : model.entries("options")) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      const std::string best = closest_match(name, known);
      bad(str_cat("model.options.", name), "unknown option of ", job.model.name,
          best.empty() ? str_cat("; known: ", str_join(known, ", "))
                       : str_cat("; did you mean 'model.options.", best, "'?"));
    }
    const std::string where = str_cat("model.options.", name);
    // The zoo takes a seed as int64 and uses its bits: any u64 is one.
    job.model.options[name] =
        name == "seed" ? ModelOption(static_cast<int64_t>(scalar_seed(value, where))) : model_option(value, where);
  }
  if (!job.model.options.count("seed")) job.model.options["seed"] = static_cast<int64_t>(job.seed);
}

// training: exactly one of epochs and steps.
void read_training(const Section& training, JobConfig& job) {
  if (training.has("epochs") && training.has("steps"))
    bad("training.steps", "training.epochs is set too; give one of epochs and steps");
  if (!training.has("epochs") && !training.has("steps"))
    bad("training", "give one of training.epochs and training.steps");
  if (training.has("epochs")) job.training.epochs = training.integer("epochs", 1);
  if (training.has("steps")) job.training.steps = training.integer("steps", 1);
  job.training.cuda_graph = training.boolean("cuda_graph", false);
  NonfiniteOptions& nf = job.training.nonfinite;
  nf.policy = training.choice("on_nonfinite", "stop", {"stop", "skip_step"}) == "skip_step" ? NonfinitePolicy::kSkipStep
                                                                                            : NonfinitePolicy::kStop;
  if (nf.policy == NonfinitePolicy::kStop)
    training.refuse({"max_consecutive_skips"}, "applies only with training.on_nonfinite: skip_step");
  nf.max_consecutive_skips = training.integer("max_consecutive_skips", nf.max_consecutive_skips);
}

// evaluation: how often, and on a split the data has.
void read_evaluation(const Section& eval, JobConfig& job) {
  job.evaluation.every_steps = eval.integer("every_steps", 0);
  job.evaluation.max_batches = eval.integer("max_batches", 0);
  const std::string split =
      eval.choice("split", job.data.dataset == DatasetKind::kText ? "validation" : "test", {"validation", "test"});
  job.evaluation.split = split == "validation" ? EvalSplit::kValidation : EvalSplit::kTest;
  if (job.evaluation.split == EvalSplit::kValidation && job.data.validation_split <= 0.0)
    bad("evaluation.split", "validation needs data.validation_split > 0");
  if (job.evaluation.split == EvalSplit::kTest && job.data.dataset == DatasetKind::kText)
    bad("evaluation.split", "the text dataset has no test split; use validation with data.validation_split > 0");
  if (job.evaluation.split == EvalSplit::kTest && job.data.dataset == DatasetKind::kSynthetic &&
      job.data.synthetic_test_examples == 0)
    bad("evaluation.split", "test needs data.synthetic.test_examples > 0");
}

// checkpoint: where, how often, what to resume from and which changes a
// resume may make.
void read_checkpoint_settings(const Section& ckpt, JobConfig& job) {
  job.checkpoint.dir = ckpt.string("dir", "");
  job.checkpoint.every_steps = ckpt.integer("every_steps", 0);
  job.checkpoint.keep_last = ckpt.integer("keep_last", 0);
  job.checkpoint.resume = ckpt.string("resume", "");
  if (job.checkpoint.dir.empty() && job.checkpoint.every_steps > 0)
    bad(ckpt.at("every_steps"), "has no effect without checkpoint.dir");
  if (job.checkpoint.dir.empty() && job.checkpoint.keep_last > 0)
    bad(ckpt.at("keep_last"), "has no effect without checkpoint.dir");
  if (!job.checkpoint.resume.empty()) require_path("checkpoint.resume", "", job.checkpoint.resume, kFileOrDir);
  job.checkpoint.allow_changes = ckpt.strings("allow_changes");
  if (absl::Status st = check_allowed_changes(job.checkpoint.allow_changes); !st.ok())
    bad(ckpt.at("allow_changes"), st.message());
}

// logging: the metrics file, the progress line, how often.
void read_logging(const Section& log, JobConfig& job) {
  job.logging.metrics = log.string("metrics", "");
  // An existing metrics file is appended to, and read on resume: a FIFO
  // would stall the run, a directory cannot be written. A character device
  // (/dev/null) is written as asked, every write checked (/dev/full fails
  // the run), and never read or replaced on resume (train/metrics.h).
  if (!job.logging.metrics.empty() && file_type_at(job.logging.metrics).ok())
    require_path(log.at("metrics"), "", job.logging.metrics, kFileOrCharDevice);
  job.logging.progress = log.boolean("progress", true);
  job.logging.every_steps = log.integer("every_steps", 50);
}

// distributed: ranks, a backend that fits the device, exchange settings.
void read_distributed(const Section& dist, JobConfig& job) {
  job.distributed.world_size = dist.integer("world_size", 1);
  job.distributed.backend =
      dist.choice("backend", "inproc", {"inproc", "nccl"}) == "nccl" ? CommBackend::kNccl : CommBackend::kInProc;
  if (job.distributed.backend == CommBackend::kNccl && !job.device.is_auto && job.device.device.is_cpu())
    bad("distributed.backend", "nccl needs a CUDA device, got device cpu; use inproc");
  if (job.distributed.backend == CommBackend::kInProc && job.distributed.world_size > kMaxInprocWorldSize)
    bad(dist.at("world_size"),
        "backend inproc runs a thread (and a model and dataset) per rank: must be <= ", kMaxInprocWorldSize,
        " with it, got ", job.distributed.world_size);
  if (job.distributed.backend == CommBackend::kInProc && job.distributed.world_size > 1 && !job.device.is_auto &&
      !job.device.device.is_cpu())
    bad("distributed.backend", "inproc runs its ranks on the CPU, got device ", job.device.device.to_string(),
        "; use nccl for GPUs");
  job.distributed.timeout_s = dist.number("timeout_s", 300.0);
  job.distributed.bucket_mb = dist.number("bucket_mb", 25.0);
  job.distributed.sparse_exchange = dist.choice("sparse_exchange", "compact", {"compact", "dense"}) == "dense"
                                        ? SparseExchange::kDense
                                        : SparseExchange::kCompact;
  job.distributed.topk_fraction = dist.number("topk_fraction", 0.0);
}

// Steps the job names (the end of mask updates, the warm-up) must fall within
// the training length, where it is known without reading data.
void check_lengths(const JobConfig& job) {
  if (const std::optional<int64_t> steps = planned_steps(job)) {
    check_examples_countable(job, *steps);
    const std::string what = job.training.steps ? "training.steps" : "the planned steps";
    auto within = [&](const std::string& key, int64_t v) {
      if (v > *steps) bad(key, "must be <= ", what, " (", *steps, "), got ", v);
    };
    const MaskUpdateConfig& mu = job.mask_update;
    if (mu.is_prune_and_regrow()) within("mask_update.end_step", mu.updater.end_step);
    if (mu.method == MaskMethod::kGmp) within("mask_update.end_step", mu.gmp.end_step);
    if (job.lr_schedule.warmup_steps > 0) within("lr_schedule.warmup_steps", job.lr_schedule.warmup_steps);
  }
}

// The checks across sections and against the model and the data, once each
// section has been read and checked.
ValidatedJob validated(JobConfig job) {
  check_combinations(job);
  check_lengths(job);
  return check_against_model(std::move(job));
}

// The job file section by section (each reader checks its own keys), then
// the checks across sections.
ValidatedJob read_job(const YAML::Node& root, const std::string& default_name) {
  const Section top(root, "", "");
  JobConfig job;
  job.name = top.string("name", default_name);
  job.seed = top.seed("seed", 0);
  read_device(top, job);
  read_model(top.section("model"), job);
  read_data(top.section("data"), job);
  read_sparsity(top.section("sparsity"), job);
  read_optimizer(top.section("optimizer"), job.optimizer);
  read_lr_schedule(top.section("lr_schedule"), job.optimizer.lr(), job.lr_schedule);
  read_training(top.section("training"), job);
  read_mask_update(top.section("mask_update"), job, job.mask_update);
  read_evaluation(top.section("evaluation"), job);
  read_checkpoint_settings(top.section("checkpoint"), job);
  read_logging(top.section("logging"), job);
  job.precision = read_precision(top.section("precision"));
  read_distributed(top.section("distributed"), job);
  return validated(std::move(job));
}

// What `check` returns, or what it throws as a Status (`source` names the
// job in messages that have no key).
template <typename Check>
absl::StatusOr<ValidatedJob> as_status(const std::string& source, const Check& check) {
  try {
    return check();
  } catch (const Issue& issue) { return absl::Status(issue.code, issue.message); } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(str_cat(source, ": ", e.msg));
  } catch (const std::exception& e) { return absl::InvalidArgumentError(str_cat(source, ": ", e.what())); }
}

// Messages quote keys and values from the file and the --set arguments: made
// one printable line of bounded length here, once for every way a job is
// refused (values that no quote_for_error shortened are shortened here).
absl::StatusOr<ValidatedJob> one_line_status(absl::StatusOr<ValidatedJob> job) {
  if (!job.ok()) return absl::Status(job.status().code(), bounded_error_line(std::string(job.status().message())));
  return job;
}

absl::StatusOr<ValidatedJob> parse_lines(const std::string& text, const std::vector<std::string>& overrides,
                                         const std::string& source, const std::string& default_name) {
  // Size and nesting before yaml-cpp (which recurses per level) reads the
  // text; nodes, with aliases expanded, before anything walks the tree.
  if (absl::Status s = check_yaml_text(text, source, "the job file"); !s.ok()) return s;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own guard, should the scan ever miss a level
    return absl::InvalidArgumentError(str_cat(source, ": line ", e.mark.line + 1, ", column ", e.mark.column + 1,
                                              ": nested deeper than the YAML parser allows"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        str_cat(source, ": not valid YAML: line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ", e.msg));
  }
  if (absl::Status s = check_yaml_tree(root, source); !s.ok()) return s;
  if (root.IsDefined() && !root.IsNull() && !root.IsMap())
    return absl::InvalidArgumentError(str_cat(source, ": a job file is a map of keys (model:, data:, ...)"));
  for (const std::string& o : overrides) {
    absl::Status s = apply_override(root, o);
    if (!s.ok()) return s;
  }
  return as_status(source, [&] { return read_job(root, default_name); });
}

// The job without what validation built (for callers that only read it).
absl::StatusOr<JobConfig> config_of(absl::StatusOr<ValidatedJob> job) {
  if (!job.ok()) return job.status();
  return std::move(job->config);
}

}  // namespace

SparsitySchedule resolve_schedule(const JobConfig& job, const std::vector<LayerShape>& parameters) {
  const SparsitySchedule& sched = job.sparsity.schedule;
  DensityOptions dist = job.sparsity.distribution;
  if (job.mask_update.method == MaskMethod::kGmp) dist.density = job.mask_update.gmp.initial_density;
  std::vector<LayerShape> shared;  // the layers the distribution splits over
  std::map<std::string, const ParameterRule*> rule_of;
  for (const LayerShape& l : parameters) {
    const ParameterRule* r = chosen_rule(sched, l.name);
    if (r == nullptr) continue;
    rule_of[l.name] = r;
    const std::optional<double> fixed = fixed_density(*r);
    if (fixed && !dist.overrides.count(l.name) && !dist.dense.count(l.name)) dist.overrides[l.name] = *fixed;
    if (fixed || dist.overrides.count(l.name) || dist.dense.count(l.name) || !r->sparsifier) shared.push_back(l);
  }
  std::map<std::string, double> density;
  if (!shared.empty())
    for (const LayerDensity& d : layer_densities(shared, dist)) density[d.name] = d.density;
  SparsitySchedule out;
  out.outputs = sched.outputs;
  for (const LayerShape& l : parameters) {
    auto it = rule_of.find(l.name);
    if (it == rule_of.end() || dist.dense.count(l.name)) continue;
    ParameterRule rule = *it->second;
    rule.selector = Selector::exact(l.name);
    if (!rule.density && density.count(l.name)) rule.density = density.at(l.name);
    out.parameters.push_back(std::move(rule));
  }
  return out;
}

absl::StatusOr<ValidatedJob> parse_validated_job(const std::string& yaml_text,
                                                 const std::vector<std::string>& overrides, const std::string& source) {
  return one_line_status(parse_lines(yaml_text, overrides, source, "job"));
}

absl::StatusOr<ValidatedJob> load_validated_job(const std::string& path, const std::vector<std::string>& overrides) {
  absl::StatusOr<std::string> text = read_job_yaml_file(path);
  if (!text.ok()) return absl::Status(text.status().code(), one_line(std::string(text.status().message())));
  return one_line_status(parse_lines(*text, overrides, path, std::filesystem::path(path).stem().string()));
}

absl::StatusOr<ValidatedJob> validate_job(JobConfig job) {
  const std::string source = job.name;
  return one_line_status(as_status(source, [&] { return validated(std::move(job)); }));
}

absl::StatusOr<JobConfig> parse_job_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                                           const std::string& source) {
  return config_of(parse_validated_job(yaml_text, overrides, source));
}

absl::StatusOr<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides) {
  return config_of(load_validated_job(path, overrides));
}

}  // namespace coppice
