// What a run reads and what it writes, by the key or option that names each,
// and the check that no output can overwrite an input or another output.
//
// Inputs: the job file (--config), the checkpoint resumed from (--resume or
// checkpoint.resume, a file or a directory), the dataset (data.path, or the
// dataset's default: Fashion-MNIST's directory, the text file or tree, the
// docgraph's document tree). Outputs: the metrics file (logging.metrics, or
// <--run-dir>/metrics.jsonl), the checkpoint directory (checkpoint.dir), the
// run directory (--run-dir). Paths are compared after resolving symbolic
// links and `..` (std::filesystem::weakly_canonical), and by inode where both
// exist (hard links).
//
// A file output conflicts with anything that is the same file, with a
// directory of that name, and with the files of an output directory (a
// metrics file named ckpt/latest-run.json). A directory output writes only
// the names it owns, at its top level (checkpoints: ckpt-*, .ckpt-*,
// latest-run.json, the run lock; a run directory: metrics.jsonl, plan.jsonl
// and the run lock); it conflicts with an input file of that name or of its own path,
// and with a dataset directory that it is, contains or lies in (a text
// dataset reads every file of its tree). A checkpoint directory may hold the
// checkpoint a run resumes from: that is how a run goes on.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "train/config.h"

namespace coppice {

struct RunPath {
  enum class Kind { kFile, kDirectory };
  std::string key;   // "logging.metrics", "--config", ...: what messages name
  std::string path;  // as given
  Kind kind = Kind::kFile;
  // Inputs: a directory read whole (a dataset), not only at known names.
  bool read_whole = false;
  // Inputs: the checkpoint resumed from, which a checkpoint directory may
  // hold (and prune, once the run has written newer ones).
  bool checkpoint = false;
  // Directory outputs: whether the directory writes a file of this name at
  // its top level.
  bool (*owns_name)(const std::string& file_name) = nullptr;
};

struct RunPaths {
  std::vector<RunPath> inputs;
  std::vector<RunPath> outputs;
};

// The paths of `job` run from the job file `job_file` ("" for a job made in
// code), resuming from `resume` ("" = the job's checkpoint.resume), with run
// directory `run_dir` ("" = none).
RunPaths run_paths(const JobConfig& job, const std::string& job_file, const std::string& resume,
                   const std::string& run_dir);

// The file a run with sparsity.propagate writes its plan to: sparsity.plan,
// else <run_dir>/plan.jsonl; "" when it writes none (no propagation, or
// neither is given).
inline constexpr char kPlanFileName[] = "plan.jsonl";
std::string job_plan_path(const JobConfig& job, const std::string& run_dir);

// InvalidArgument, one line naming both keys and both paths, for the first
// output that is, contains or lies in an input or another output as the top
// of this file says; OK otherwise.
absl::Status check_outputs_apart(const RunPaths& paths);

}  // namespace coppice
