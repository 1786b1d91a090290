// Checkpoint files in a directory: their names, the runs they belong to, the
// run marker, pruning, and which file a resume from a directory takes.
//
// A run id (16 hex digits) names one line of checkpoints. A fresh run draws a
// new one; a run that resumes from the newest checkpoint of its run continues
// that run (same id); a run that resumes from an older checkpoint forks and
// draws a new id (its checkpoints would otherwise interleave with the ones it
// abandoned). File names carry the id:
//   <dir>/ckpt-<step, 10 digits>-<run id>.safetensors
// (ckpt-<step>.safetensors, without an id, is what checkpoints of a run
// without an id are called; they list with run id "").
//
// The run marker <dir>/latest-run.json ({"run_id": ..., "resumed_from": ...,
// "started": unix seconds}) is written atomically by every run when it
// starts, before its first step. Resuming from a directory takes:
//   1. the newest checkpoint of the marker's run (the run that started there
//      last), or, when that run wrote none, the checkpoint it had resumed
//      from; an error naming the runs there when it has neither (a fresh run
//      that died before its first checkpoint: the older runs' checkpoints are
//      not its own, so none is taken silently);
//   2. without a marker: the newest checkpoint when every checkpoint there
//      belongs to one run; an error listing the runs when there are several.
// A run prunes (keep_last) only its own checkpoints; other runs' files stay.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/atomic_file.h"

namespace coppice {

// A new random run id (16 lowercase hex digits).
std::string new_run_id();
// Whether `id` has the form of a run id.
bool is_run_id(const std::string& id);

// "ckpt-0000000100-0123456789abcdef.safetensors" ("ckpt-0000000100.safetensors"
// for an empty run id).
std::string checkpoint_file_name(int64_t step, const std::string& run_id = "");

struct CheckpointEntry {
  int64_t step = 0;
  std::string run_id;  // "" for a name without one
  std::string path;
};

// The complete checkpoints in `dir` (temporary files and other names
// ignored), ordered by step, then run id. A missing directory gives an empty
// list.
absl::StatusOr<std::vector<CheckpointEntry>> list_checkpoints(const std::string& dir);

struct RunMarker {
  std::string run_id;
  std::string resumed_from;  // the checkpoint the run resumed from; "" for a fresh run
  int64_t started = 0;       // unix seconds
};
inline constexpr char kRunMarkerName[] = "latest-run.json";

absl::Status write_run_marker(const std::string& dir, const RunMarker& marker);
// nullopt when `dir` has no marker; an error naming the file when it cannot
// be read or is not a marker.
absl::StatusOr<std::optional<RunMarker>> read_run_marker(const std::string& dir);

struct ResolvedCheckpoint {
  std::string path;
  std::string why;  // one line: which rule chose it ("" when `path` named a file)
};

// `path` itself when it is a file; for a directory, the checkpoint the rules
// at the top of this file choose. NotFound naming `path` when there is none.
absl::StatusOr<ResolvedCheckpoint> resolve_checkpoint(const std::string& path);

// Whether `path` is the newest checkpoint of its run in its directory
// (resuming from it continues the run; from an older one forks).
bool is_newest_of_its_run(const std::string& path, const std::string& run_id);

// Deletes all but the newest `keep_last` checkpoints of run `run_id` in
// `dir` (0: keep all), and the temporary files of interrupted writers: this
// process's, and those whose writer (the pid in their name) is gone.
// Another live process's temporary files are left alone.
absl::Status prune_checkpoints(const std::string& dir, const std::string& run_id, int64_t keep_last);

// FailedPrecondition naming both when the step or run id that the file name
// of `path` carries (checkpoint_file_name) is not `step` and `run_id`, the
// ones its contents hold; OK for a name of another form (a file the user
// named).
absl::Status check_checkpoint_name(const std::string& path, int64_t step, const std::string& run_id);

// One line on the checkpoints in `dir` that belong to runs other than
// `run_id` ("" when there are none): "N checkpoints of run X (steps a..b)".
std::string other_runs_note(const std::string& dir, const std::string& run_id);

}  // namespace coppice
