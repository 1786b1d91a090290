#include "train/config.h"

#include <filesystem>
#include <map>

#include "optim/growth.h"
#include "train/config_checks.h"
#include "train/config_readers.h"
#include "train/config_schema.h"
#include "train/config_section.h"
#include "train/error_quote.h"
#include "train/yaml_limits.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

const char* dataset_kind_name(DatasetKind kind) {
  switch (kind) {
    case DatasetKind::kFashionMnist: return "fashion_mnist";
    case DatasetKind::kSynthetic: return "synthetic";
    case DatasetKind::kText: return "text";
    case DatasetKind::kDocGraph: return "docgraph";
  }
  return "?";
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdagrad: return "adagrad";
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

using namespace job_config;

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
  job.seed = top.seed("seed");
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
    const ParameterRule* r = job_config::chosen_rule(sched, l.name);
    if (r == nullptr) continue;
    rule_of[l.name] = r;
    const std::optional<double> fixed = job_config::fixed_density(*r);
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
