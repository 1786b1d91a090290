#include "train/config_readers.h"

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
#include "sparse/levels/level_impl.h"
#include "sparsifiers/apply_schedule.h"
#include "sparsifiers/registry.h"
#include "tensor/checked_math.h"
#include "tensor/error.h"
#include "tensor/host_memory.h"
#include "tensor/io/input_file.h"
#include "train/config_schema.h"
#include "train/error_quote.h"
#include "train/fingerprint.h"
#include "yaml-cpp/yaml.h"

namespace coppice::job_config {

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
  c.allow_tf32 = s.boolean("allow_tf32");
  const std::string dtype = s.choice("dtype");
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
      spec.params[name] = SpecValue::from_text(value.Scalar());  // typed once, here
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
  if (has_name) return Selector::exact(s.string("name"));
  Selector selector = Selector::regex(s.string("regex"));
  absl::StatusOr<std::shared_ptr<const NameRegex>> re = selector.compiled_regex();
  if (!re.ok()) bad(s.at("regex"), "'", shown_pattern(selector.pattern), "' ", re.status().message());
  return selector;
}

OutputFormat read_format(const Section& s, const std::string& key) {
  OutputFormat f;
  f.name = s.choice(key);
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
  const FormatSpec& spec = format_spec(f, "format");
  const FormatOptionKind options = spec.options;
  // A user's format declared with n:m groups fixes them; nm takes the rule's.
  const std::optional<NmGroups> declared_groups =
      options == FormatOptionKind::kNm ? std::nullopt : format_nm_groups(spec, FormatOptions{});
  if (has_block_shape(options)) {
    if (!r.has("block_rows")) bad(r.at("block_rows"), "required for format ", f);
    rule.format.options.block_rows = r.integer("block_rows");
    rule.format.options.block_cols = r.integer("block_cols", rule.format.options.block_rows);
    if (options == FormatOptionKind::kSquareBlock && rule.format.options.block_cols != rule.format.options.block_rows)
      bad(r.at("block_cols"), f, " blocks are square: must equal block_rows (", rule.format.options.block_rows,
          "), got ", rule.format.options.block_cols);
  } else {
    r.refuse({"block_rows", "block_cols"},
             str_cat("only for block formats (", str_join(block_format_names(), ", "), "), not ", f));
  }
  if (r.has("density")) rule.density = r.number("density");
  if (r.has("sparsifier")) rule.sparsifier = read_spec(r, "sparsifier");
  if (options == FormatOptionKind::kNm || declared_groups) {
    // An n:m format holds only what the nm sparsifier produces.
    int64_t n = declared_groups ? declared_groups->n : 2, m = declared_groups ? declared_groups->m : 4;
    if (rule.sparsifier) {
      if (rule.sparsifier->name != "nm")
        bad(r.at("sparsifier.name"), "format ", f, " needs the nm sparsifier, got ",
            quote_for_error(rule.sparsifier->name));
      SpecParams p(*rule.sparsifier);
      n = p.get_int("n");
      m = p.get_int("m");
    }
    n = r.integer("n", n);
    m = r.integer("m", m);
    if (n < 1) bad(r.at("n"), "must be >= 1, got ", n);
    if (m < n) bad(r.at("m"), "must be >= n (", n, "), got ", m);
    if (declared_groups && (n != declared_groups->n || m != declared_groups->m))
      bad(r.at(r.has("n") || r.has("m") ? (r.has("n") && n != declared_groups->n ? "n" : "m") : "sparsifier"),
          "format ", f, " is declared with ", declared_groups->n, ":", declared_groups->m, " groups, got ", n, ":", m);
    if (rule.sparsifier) {
      SpecParams p(*rule.sparsifier);
      if (p.get_int("n") != n || p.get_int("m") != m)
        bad(r.at("sparsifier"), "nm(n=", p.get_int("n"), ", m=", p.get_int("m"), ") disagrees with the rule's ", n, ":",
            m);
    } else {
      rule.sparsifier = SparsifierSpec{"nm", {{"n", n}, {"m", m}}};
    }
    // Transposable: n:m along the columns too (so W^T runs n:m), a parameter of the nm sparsifier.
    if (r.has("transposable")) {
      const bool t = r.boolean("transposable");
      auto given = rule.sparsifier->params.find("transposable");
      if (given != rule.sparsifier->params.end() && given->second.boolean() != t)
        bad(r.at("transposable"), "disagrees with the sparsifier's transposable: ", given->second);
      rule.sparsifier->params["transposable"] = t;
    }
    if (rule.density && std::abs(*rule.density - static_cast<double>(n) / static_cast<double>(m)) > 1e-9)
      bad(r.at("density"), "an ", n, ":", m, " weight keeps ", fmt(static_cast<double>(n) / m), " of its entries, got ",
          fmt(*rule.density));
    if (options == FormatOptionKind::kNm) {
      rule.format.options.n = n;
      rule.format.options.m = m;
    }
  } else {
    r.refuse({"n", "m", "transposable"},
             str_cat("only for n:m formats (nm, or one declared with n:m groups), not ", f));
    if (rule.sparsifier && rule.sparsifier->name == "nm")
      bad(r.at("format"), "the nm sparsifier makes n:m weights; use format nm (or masked / a general format), got ", f);
  }
  if (rule.density && rule.sparsifier && rule.sparsifier->params.count("sparsity")) {
    const SpecValue& sparsity = rule.sparsifier->params.at("sparsity");
    if (!sparsity.number())
      bad(r.at("sparsifier.sparsity"), "expected a number, got ", quote_for_error(sparsity.text()));
    const double s = *sparsity.number();
    if (std::abs((1.0 - s) - *rule.density) > 1e-9)
      bad(r.at("density"), fmt(*rule.density), " contradicts the sparsifier's sparsity ", fmt(s),
          " (density = 1 - sparsity)");
  }
  return rule;
}

// One format of sparsity.formats, its errors under the key they are about.
levels::LevelFormat read_declared_format(const Section& f) {
  const std::vector<int64_t> block = f.integers("block");
  if (f.has("block") && block.empty()) bad(f.at("block"), "expected [rows, columns] or one size for both, got 0 sizes");
  const std::string values = f.has("values") ? f.choice("values") : std::string();
  try {
    return levels::level_format_from_fields(f.strings("levels"), block, f.choice("index"), values, f.path());
  } catch (const Error& e) { throw Issue{absl::StatusCode::kInvalidArgument, e.what()}; }
}

// sparsity.formats, read whole and then registered (again, where a resumed
// or repeated job declares one alike) in the format table, so that a file
// whose second format is wrong registers nothing. A format stays registered
// for the process once a job declared it, whichever error a later section
// finds.
void read_declared_formats(const Section& sp, SparsityConfig& c) {
  const std::vector<std::pair<std::string, Section>> named = sp.named_sections("formats");
  for (const auto& [name, f] : named) c.formats.emplace_back(name, read_declared_format(f));
  for (size_t i = 0; i < named.size(); ++i) {
    try {
      levels::register_level_format(c.formats[i].first, c.formats[i].second, "declared");
    } catch (const Error& e) { bad(named[i].second.path(), e.what()); }
  }
}

void read_sparsity(const Section& sp, JobConfig& job) {
  SparsityConfig& c = job.sparsity;
  read_declared_formats(sp, c);
  c.has_density = sp.has("density");
  c.distribution.density = sp.number("density");
  c.distribution.distribution = parse_density_distribution(sp.choice("distribution"));
  for (const auto& [name, value] : sp.entries("overrides")) {
    const std::string key = join_key(sp.at("overrides"), name);
    if (!value_fits(value, KeyType::kDouble) || value.IsNull())
      bad(key, "expected a number, got ", Section::describe(value));
    const double d = value.as<double>();
    const KeyRange* range = key_range("sparsity.overrides.*");
    if (!range->contains(d)) bad(key, "must be ", range->text(), ", got ", fmt(d));
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
  c.propagate = sp.boolean("propagate");
  c.propagate_max_density = sp.number("propagate_max_density");
  c.plan = sp.string("plan");
  for (const char* key : {"plan", "propagate_max_density"}) {
    if (sp.has(key) && !c.propagate) bad(sp.at(key), "applies when sparsity.propagate is true, and it is not");
  }
}

void read_optimizer(const Section& o, OptimizerConfig& c) {
  const std::string name = o.choice("name");
  const double lr = o.number("lr");
  c.grad_clip = o.number("grad_clip");
  if (name == "sgd") {
    c.kind = OptimizerKind::kSgd;
    o.refuse({"beta1", "beta2", "eps"}, "not an option of sgd (it is adam's and adamw's)");
    o.refuse({"lr_decay", "initial_accumulator_value"}, "not an option of sgd (it is adagrad's)");
    c.sgd.lr = lr;
    c.sgd.momentum = o.number("momentum");
    c.sgd.dampening = o.number("dampening");
    c.sgd.nesterov = o.boolean("nesterov");
    if (c.sgd.nesterov && (c.sgd.momentum <= 0.0 || c.sgd.dampening != 0.0))
      bad(o.at("nesterov"), "needs momentum > 0 and dampening 0, got momentum ", fmt(c.sgd.momentum), " and dampening ",
          fmt(c.sgd.dampening));
    c.sgd.weight_decay = o.number("weight_decay", SgdOptions{}.weight_decay);
    return;
  }
  o.refuse({"momentum", "dampening", "nesterov"}, str_cat("not an option of ", name, " (it is sgd's)"));
  if (name == "adagrad") {
    c.kind = OptimizerKind::kAdagrad;
    o.refuse({"beta1", "beta2"}, "not an option of adagrad (it is adam's and adamw's)");
    c.adagrad.lr = lr;
    c.adagrad.lr_decay = o.number("lr_decay");
    c.adagrad.initial_accumulator_value = o.number("initial_accumulator_value");
    c.adagrad.eps = o.number("eps", AdagradOptions{}.eps);
    c.adagrad.weight_decay = o.number("weight_decay", AdagradOptions{}.weight_decay);
    return;
  }
  c.kind = name == "adam" ? OptimizerKind::kAdam : OptimizerKind::kAdamW;
  o.refuse({"lr_decay", "initial_accumulator_value"}, str_cat("not an option of ", name, " (it is adagrad's)"));
  c.adam = name == "adam" ? AdamOptions{} : AdamWOptions{};
  c.adam.lr = lr;
  c.adam.beta1 = o.number("beta1");
  c.adam.beta2 = o.number("beta2");
  c.adam.eps = o.number("eps", c.adam.eps);
  c.adam.weight_decay = o.number("weight_decay", c.adam.weight_decay);
}

void read_lr_schedule(const Section& s, double lr, LrScheduleConfig& c) {
  const std::string name = s.choice("name");
  c.kind = name == "step"     ? LrScheduleKind::kStep
           : name == "cosine" ? LrScheduleKind::kCosine
                              : LrScheduleKind::kConstant;
  if (c.kind != LrScheduleKind::kStep)
    s.refuse({"step_size", "gamma"}, str_cat("only for the step schedule, not ", name));
  if (c.kind != LrScheduleKind::kCosine)
    s.refuse({"t_max", "eta_min"}, str_cat("only for the cosine schedule, not ", name));
  if (c.kind == LrScheduleKind::kStep) {
    if (!s.has("step_size")) bad(s.at("step_size"), "required for the step schedule");
    c.step_size = s.integer("step_size");
    c.gamma = s.number("gamma");
  }
  if (c.kind == LrScheduleKind::kCosine) {
    c.t_max = s.integer("t_max");
    c.eta_min = s.number("eta_min");
    if (!(c.eta_min >= 0.0 && c.eta_min <= lr))
      bad(s.at("eta_min"), "must be in [0, optimizer.lr = ", fmt(lr), "], got ", fmt(c.eta_min));
  }
  c.warmup_steps = s.integer("warmup_steps");
  c.warmup_start_factor = s.number("warmup_start_factor");
  if (c.warmup_steps == 0 && c.warmup_start_factor != 0.0)
    bad(s.at("warmup_start_factor"), "has no effect without lr_schedule.warmup_steps > 0");
}

const std::vector<std::string> kRegrowKeys = {"interval", "drop_fraction",        "drop_schedule",
                                              "prune",    "allow_regrow_dropped", "growth"};
const std::vector<std::string> kGmpKeys = {"initial_density", "final_density", "frequency"};

void read_mask_update(const Section& s, const JobConfig& job, MaskUpdateConfig& c) {
  const std::string method = s.choice("method");
  const std::map<std::string, MaskMethod> methods = {{"dense", MaskMethod::kDense},    {"static", MaskMethod::kStatic},
                                                     {"set", MaskMethod::kSet},        {"rigl", MaskMethod::kRigL},
                                                     {"rigl_nm", MaskMethod::kRigLNm}, {"snfs", MaskMethod::kSnfs},
                                                     {"gmp", MaskMethod::kGmp},        {"sr_ste", MaskMethod::kSrSte}};
  c.method = methods.at(method);
  if (c.method == MaskMethod::kDense)
    s.refuse({"densify_step"},
             "method dense trains dense weights from the start; densify_step makes sparse weights dense (methods "
             "static, set, rigl, rigl_nm, snfs and gmp)");
  if (c.method == MaskMethod::kSrSte)
    s.refuse({"densify_step"}, "sr_ste keeps its weights dense already (forward sees their n:m projection)");
  if (s.has("densify_step")) c.densify_step = s.integer("densify_step");
  // The ramp after densify_step (train/job.cc); where it ends against the
  // training steps is checked with them (config_checks.cc).
  if (s.has("densify_warmup_steps")) {
    c.densify_warmup_steps = s.integer("densify_warmup_steps");
    if (c.densify_step == 0)
      bad(s.at("densify_warmup_steps"),
          "ramps the learning rate up after mask_update.densify_step, which this job "
          "does not set (set densify_step too, or leave densify_warmup_steps out)");
  }
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
    c.sr_ste.interval = s.integer("interval", c.sr_ste.interval);
    c.sr_ste.decay = s.number("decay");
    try {
      validate(c.sr_ste);
    } catch (const Error& e) { bad(s.path(), e.what()); }
    return;
  }
  s.refuse({"decay"}, str_cat("only for method sr_ste, not ", method));
  const int64_t start = s.integer("start_step");
  if (!s.has("end_step")) bad(s.at("end_step"), "required for method ", method);
  const int64_t end = s.integer("end_step");
  if (end <= start) bad(s.at("end_step"), "must be > start_step (", start, "), got ", end);
  // Dense weights have no mask: the masks' last change comes first (gmp
  // prunes at end_step itself; set, rigl and snfs update before it).
  const bool gmp = c.method == MaskMethod::kGmp;
  if (c.densify_step > 0 && (gmp ? c.densify_step <= end : c.densify_step < end))
    bad(s.at("densify_step"), "must be ", gmp ? ">" : ">=", " mask_update.end_step (", end,
        "): the masks change until then, and dense weights have no mask; got ", c.densify_step);
  if (c.method == MaskMethod::kGmp) {
    s.refuse(kRegrowKeys, "not used by method gmp (it only prunes)");
    c.gmp.start_step = start;
    c.gmp.end_step = end;
    c.gmp.frequency = s.integer("frequency");
    c.gmp.initial_density = s.number("initial_density");
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
  u.interval = s.integer("interval", u.interval);
  u.drop_fraction = s.number("drop_fraction");
  u.schedule = parse_drop_schedule(s.choice("drop_schedule"));
  u.prune = parse_prune_criterion(s.choice("prune"));
  u.allow_regrow_dropped = s.boolean("allow_regrow_dropped");
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
  const std::string kind = d.choice("dataset");
  c.dataset = kind == "synthetic"  ? DatasetKind::kSynthetic
              : kind == "text"     ? DatasetKind::kText
              : kind == "docgraph" ? DatasetKind::kDocGraph
                                   : DatasetKind::kFashionMnist;
  c.path = d.string("path");
  c.loader.batch_size = d.integer("batch_size");
  c.eval_batch_size = d.integer("eval_batch_size");
  c.validation_split = d.number("validation_split");
  c.loader.shuffle = d.boolean("shuffle");
  c.loader.seed = d.seed("shuffle_seed", job.seed);
  c.loader.drop_last = d.boolean("drop_last");

  const std::vector<std::string> mnist_keys = {"flatten", "normalize", "mean", "std"};
  const std::vector<std::string> text_keys = {"seq_len", "stride", "suffix", "vocab"};
  if (c.dataset != DatasetKind::kFashionMnist)
    d.refuse(mnist_keys, str_cat("only for dataset fashion_mnist, not ", kind));
  if (c.dataset != DatasetKind::kText) d.refuse(text_keys, str_cat("only for dataset text, not ", kind));
  if (c.dataset != DatasetKind::kSynthetic) d.refuse({"synthetic"}, str_cat("only for dataset synthetic, not ", kind));
  if (c.dataset == DatasetKind::kSynthetic) d.refuse({"path"}, "dataset synthetic reads no files");
  if (c.dataset != DatasetKind::kDocGraph) {
    // Named by the key inside, where there is one (the one a --set gave).
    const std::string why = str_cat("only for dataset docgraph, not ", kind);
    if (d.has("docgraph") && d.get("docgraph").IsMap())
      d.section("docgraph")
          .refuse({"suffix", "vocabulary", "min_class_documents", "train_fraction", "validation_fraction", "seed",
                   "toctree"},
                  why);
    d.refuse({"docgraph"}, why);
  }
  if (c.dataset == DatasetKind::kDocGraph)
    d.refuse({"validation_split"}, "dataset docgraph splits by data.docgraph.validation_fraction");

  switch (c.dataset) {
    case DatasetKind::kFashionMnist: {
      FashionMnistOptions& f = c.fashion_mnist;
      if (!c.path.empty()) f.dir = c.path;
      f.flatten = d.boolean("flatten");
      f.normalize = d.boolean("normalize");
      f.mean = d.number("mean");
      f.std = d.number("std");
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
      c.text.seq_len = d.integer("seq_len");
      c.text.stride = d.integer("stride");
      c.text.suffix = d.string("suffix");
      c.text.byte_vocab = d.choice("vocab") == "bytes";
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
      b.n = s.integer("examples");
      c.synthetic_test_examples = s.integer("test_examples");
      b.features = s.integer("features");
      b.classes = s.integer("classes");
      b.center_scale = s.number("center_scale");
      b.spread = s.number("spread");
      b.seed = s.seed("seed", job.seed);
      // Drawn whole before training: refused here when larger than memory.
      BlobsOptions all = b;
      all.n = b.n + c.synthetic_test_examples;  // each at most kMaxExamples
      try {
        check_host_memory(blobs_bytes(all), str_cat(all.n, " examples of ", b.features, " features"));
      } catch (const Error& e) { bad(s.at("examples"), e.what()); }
      break;
    }
    case DatasetKind::kDocGraph: {
      const Section s = d.section("docgraph");
      DocGraphOptions& g = c.docgraph;
      g.path = c.path;
      g.suffix = s.string("suffix");
      g.vocabulary = s.integer("vocabulary");
      g.min_class_documents = s.integer("min_class_documents");
      g.train_fraction = s.number("train_fraction");
      g.validation_fraction = s.number("validation_fraction");
      g.seed = s.seed("seed", job.seed);
      g.toctree = s.boolean("toctree");
      g.max_bytes = kTextMaxBytes;
      if (g.train_fraction + g.validation_fraction > 1.0)
        bad(s.at("validation_fraction"), "train_fraction + validation_fraction must be <= 1, got ",
            fmt(g.train_fraction), " + ", fmt(g.validation_fraction));
      const std::string key = c.path.empty() ? std::string("data.dataset") : d.at("path");
      require_path(
          key, "document tree ", g.root(), kDirOnly,
          g.root() == kLinuxDocCorpus ? str_cat(" (install the Debian package ", kLinuxDocCorpusPackage, ")") : "");
      break;
    }
  }
}

// device: auto, or a device Device::parse reads.
void read_device(const Section& top, JobConfig& job) {
  const std::string device = top.string("device");
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
  job.model.name = model.choice("name");
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
  if (training.has("epochs")) job.training.epochs = training.integer("epochs");
  if (training.has("steps")) job.training.steps = training.integer("steps");
  job.training.cuda_graph = training.boolean("cuda_graph");
  NonfiniteOptions& nf = job.training.nonfinite;
  nf.policy = training.choice("on_nonfinite") == "skip_step" ? NonfinitePolicy::kSkipStep : NonfinitePolicy::kStop;
  if (nf.policy == NonfinitePolicy::kStop)
    training.refuse({"max_consecutive_skips"}, "applies only with training.on_nonfinite: skip_step");
  nf.max_consecutive_skips = training.integer("max_consecutive_skips");
}

// evaluation: how often, and on a split the data has.
void read_evaluation(const Section& eval, JobConfig& job) {
  job.evaluation.every_steps = eval.integer("every_steps");
  job.evaluation.max_batches = eval.integer("max_batches");
  const std::string split = eval.choice("split", job.data.dataset == DatasetKind::kText ? "validation" : "test");
  job.evaluation.split = split == "validation" ? EvalSplit::kValidation : EvalSplit::kTest;
  if (job.evaluation.split == EvalSplit::kValidation && job.data.dataset == DatasetKind::kDocGraph) {
    if (job.data.docgraph.validation_fraction <= 0.0)
      bad("evaluation.split", "validation needs data.docgraph.validation_fraction > 0");
  } else if (job.evaluation.split == EvalSplit::kValidation && job.data.validation_split <= 0.0) {
    bad("evaluation.split", "validation needs data.validation_split > 0");
  }
  if (job.evaluation.split == EvalSplit::kTest && job.data.dataset == DatasetKind::kDocGraph &&
      job.data.docgraph.train_fraction + job.data.docgraph.validation_fraction >= 1.0)
    bad("evaluation.split", "test needs data.docgraph.train_fraction + validation_fraction < 1");
  if (job.evaluation.split == EvalSplit::kTest && job.data.dataset == DatasetKind::kText)
    bad("evaluation.split", "the text dataset has no test split; use validation with data.validation_split > 0");
  if (job.evaluation.split == EvalSplit::kTest && job.data.dataset == DatasetKind::kSynthetic &&
      job.data.synthetic_test_examples == 0)
    bad("evaluation.split", "test needs data.synthetic.test_examples > 0");
}

// checkpoint: where, how often, what to resume from and which changes a
// resume may make.
void read_checkpoint_settings(const Section& ckpt, JobConfig& job) {
  job.checkpoint.dir = ckpt.string("dir");
  job.checkpoint.every_steps = ckpt.integer("every_steps");
  job.checkpoint.keep_last = ckpt.integer("keep_last");
  job.checkpoint.resume = ckpt.string("resume");
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
  job.logging.metrics = log.string("metrics");
  // An existing metrics file is appended to, and read on resume: a FIFO
  // would stall the run, a directory cannot be written. A character device
  // (/dev/null) is written as asked, every write checked (/dev/full fails
  // the run), and never read or replaced on resume (train/metrics.h).
  if (!job.logging.metrics.empty() && file_type_at(job.logging.metrics).ok())
    require_path(log.at("metrics"), "", job.logging.metrics, kFileOrCharDevice);
  job.logging.progress = log.boolean("progress");
  job.logging.every_steps = log.integer("every_steps");
}

// distributed: ranks, a backend that fits the device, exchange settings.
void read_distributed(const Section& dist, JobConfig& job) {
  job.distributed.world_size = dist.integer("world_size");
  job.distributed.backend = dist.choice("backend") == "nccl" ? CommBackend::kNccl : CommBackend::kInProc;
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
  job.distributed.timeout_s = dist.number("timeout_s");
  job.distributed.bucket_mb = dist.number("bucket_mb");
  job.distributed.sparse_exchange =
      dist.choice("sparse_exchange") == "dense" ? SparseExchange::kDense : SparseExchange::kCompact;
  job.distributed.topk_fraction = dist.number("topk_fraction");
}

}  // namespace coppice::job_config
