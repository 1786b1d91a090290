#include "train/run_paths.h"

#include <filesystem>
#include <system_error>

#include "data/fashion_mnist.h"
#include "tensor/error.h"
#include "train/checkpoint_files.h"
#include "train/run_lock.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;
using Kind = RunPath::Kind;

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// What a checkpoint directory writes: checkpoints, their temporary files,
// the run marker (and its temporary file), the run lock and its holder's line.
bool checkpoint_dir_owns(const std::string& name) {
  return starts_with(name, "ckpt-") || starts_with(name, ".ckpt-") || name == kRunMarkerName ||
         starts_with(name, str_cat(".", kRunMarkerName, ".tmp.")) || name == kRunLockName || name == kRunHolderName;
}

// What a run directory writes: the metrics file and its temporary file (a
// resumed run rewrites it), and the propagation plan and its temporary file.
bool is_metrics_file(const std::string& name) {
  return name == "metrics.jsonl" || starts_with(name, ".metrics.jsonl.");
}
bool is_plan_file(const std::string& name) {
  return name == kPlanFileName || starts_with(name, str_cat(".", kPlanFileName, "."));
}
bool run_dir_owns_metrics(const std::string& name) { return is_metrics_file(name); }
bool run_dir_owns_plan(const std::string& name) { return is_plan_file(name); }
bool run_dir_owns_both(const std::string& name) { return is_metrics_file(name) || is_plan_file(name); }

// The path as the file system will resolve it: absolute, `..` and symbolic
// links of its existing part resolved.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

// Whether `inner` is `outer` or lies below it, component by component.
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

bool same(const fs::path& a, const fs::path& b) {
  if (a == b) return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);  // hard links
}

std::string describe(const RunPath& p) { return str_cat(p.key, " '", p.path, "'"); }

// Why output `out` may write over or into `other` (an input, or an earlier
// output); "" when it cannot.
std::string conflict(const RunPath& out, const RunPath& other, bool other_is_input) {
  const fs::path o = resolved(out.path), x = resolved(other.path);
  if (same(o, x)) {
    // A checkpoint directory resumed from, or shared by two outputs that
    // write different names, is how runs go on.
    if (out.kind == Kind::kDirectory && other.kind == Kind::kDirectory && !other.read_whole) return "";
    return other_is_input ? "is the same path as the input" : "is the same path as the output";
  }
  if (out.kind == Kind::kFile) {
    if (other.kind == Kind::kDirectory && within(o, x)) {
      if (other.read_whole) return "lies inside the input directory, which is read whole";
      if (other.owns_name != nullptr && o.parent_path() == x && other.owns_name(o.filename().string()))
        return "has a name that the output directory writes";
    }
    return "";
  }
  // A directory output.
  if (within(x, o)) {
    if (other.read_whole) return "contains the input directory, which is read whole";
    if (x.parent_path() == o && out.owns_name != nullptr && !other.checkpoint && out.owns_name(x.filename().string()))
      return str_cat("would write over ", other_is_input ? "the input" : "the output");
  }
  if (within(o, x) && other.kind == Kind::kDirectory && other.read_whole)
    return "lies inside the input directory, which is read whole";
  return "";
}

}  // namespace

RunPaths run_paths(const JobConfig& job, const std::string& job_file, const std::string& resume,
                   const std::string& run_dir) {
  RunPaths p;
  if (!job_file.empty()) p.inputs.push_back({"--config", job_file, Kind::kFile});
  const std::string resumed = !resume.empty() ? resume : job.checkpoint.resume;
  if (!resumed.empty()) {
    std::error_code ec;
    const Kind kind = fs::is_directory(resumed, ec) ? Kind::kDirectory : Kind::kFile;
    p.inputs.push_back({resume.empty() ? "checkpoint.resume" : "--resume", resumed, kind, /*read_whole=*/false,
                        /*checkpoint=*/true});
  }
  switch (job.data.dataset) {
    case DatasetKind::kFashionMnist:
      p.inputs.push_back({"data.path", job.data.path.empty() ? kFashionMnistDir : job.data.path, Kind::kDirectory,
                          /*read_whole=*/true});
      break;
    case DatasetKind::kText: {
      std::error_code ec;
      const std::string path = job.data.text_path();
      const bool dir = fs::is_directory(path, ec);
      p.inputs.push_back({"data.path", path, dir ? Kind::kDirectory : Kind::kFile, /*read_whole=*/dir});
      break;
    }
    case DatasetKind::kDocGraph:  // every document of the tree is read
      p.inputs.push_back({"data.path", job.data.docgraph.root(), Kind::kDirectory, /*read_whole=*/true});
      break;
    case DatasetKind::kSynthetic: break;
  }
  if (!job.logging.metrics.empty()) {
    p.outputs.push_back({"logging.metrics", job.logging.metrics, Kind::kFile});
  } else if (!run_dir.empty()) {
    p.outputs.push_back({"--run-dir", (fs::path(run_dir) / "metrics.jsonl").string(), Kind::kFile});
  }
  if (!job.checkpoint.dir.empty())
    p.outputs.push_back({"checkpoint.dir", job.checkpoint.dir, Kind::kDirectory, false, false, checkpoint_dir_owns});
  const std::string plan = job_plan_path(job, run_dir);
  if (!job.sparsity.plan.empty()) p.outputs.push_back({"sparsity.plan", plan, Kind::kFile});
  if (!run_dir.empty()) {
    const bool metrics_here = job.logging.metrics.empty();
    const bool plan_here = !plan.empty() && job.sparsity.plan.empty();
    if (plan_here) p.outputs.push_back({"--run-dir", plan, Kind::kFile});
    bool (*owns)(const std::string&) = metrics_here && plan_here ? run_dir_owns_both
                                       : metrics_here            ? run_dir_owns_metrics
                                       : plan_here               ? run_dir_owns_plan
                                                                 : nullptr;
    p.outputs.push_back({"--run-dir", run_dir, Kind::kDirectory, false, false, owns});
  }
  return p;
}

std::string job_plan_path(const JobConfig& job, const std::string& run_dir) {
  if (!job.sparsity.propagate) return "";
  if (!job.sparsity.plan.empty()) return job.sparsity.plan;
  return run_dir.empty() ? "" : (fs::path(run_dir) / kPlanFileName).string();
}

absl::Status check_outputs_apart(const RunPaths& paths) {
  for (size_t i = 0; i < paths.outputs.size(); ++i) {
    const RunPath& out = paths.outputs[i];
    for (const RunPath& in : paths.inputs) {
      const std::string why = conflict(out, in, /*other_is_input=*/true);
      if (!why.empty()) {
        return absl::InvalidArgumentError(str_cat(describe(out), " ", why, " ", describe(in),
                                                  "; an output must never overwrite an input: choose another path"));
      }
    }
    for (size_t j = 0; j < paths.outputs.size(); ++j) {
      if (j == i) continue;
      const RunPath& other = paths.outputs[j];
      // One option's own outputs (the run directory and its metrics file).
      if (out.key == other.key) continue;
      const std::string why = conflict(out, other, /*other_is_input=*/false);
      if (!why.empty()) {
        return absl::InvalidArgumentError(
            str_cat(describe(out), " ", why, " ", describe(other), "; two outputs must not share a path"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace coppice
