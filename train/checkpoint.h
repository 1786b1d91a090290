// Training checkpoints: one safetensors file per checkpoint that PyTorch's
// safetensors can read, written atomically.
//
// File: <dir>/ckpt-<step, 10 digits>.safetensors, holding
//   model.<name>            every parameter and buffer (Module::state_dict);
//                           sparse ones as their parts with the metadata that
//                           rebuilds them (sparse/io/sparse_safetensors.h), so
//                           the masks travel with the weights
//   optim.<param>.<state>   the optimizer's state (optim/state_io.h), its
//                           metadata under "optim." (hyperparameters, step
//                           counts, group layout)
//   updater.<layer>.<...>   the mask updater's state (ITOP record, movement
//                           scores), when there is an updater
//   metadata "trainer.*"    TrainerState: step, epoch and batch of the data
//                           loader, the default generator's seed and offset,
//                           the LR scheduler's step, the train loader's seed
//
// Writing: the bytes go to a temporary file in the same directory
// (".ckpt-<step>.safetensors.tmp.<pid>"), which is fsynced, renamed over the
// final name and the directory fsynced; so a kill at any moment leaves
// either the old set of checkpoints or the old set plus the new one, never a
// partial file under a checkpoint's name. Then all but the newest keep_last
// checkpoints are deleted (keep_last 0: keep all), and so are temporary files
// left by an earlier, interrupted writer.
//
// Loading validates the whole file before it touches the components and
// returns an error Status naming the file on unreadable or corrupt bytes,
// missing trainer metadata, or state that does not fit the components. A
// sparse parameter is replaced by a new Variable in the loaded pattern; the
// optimizer is rebound to it (Optimizer::replace_param) before its state is
// loaded. Should applying fail after validation (e.g. an optimizer of another
// kind), the components may be partly loaded: rebuild them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/module.h"
#include "optim/mask_updater.h"
#include "optim/optimizer.h"

namespace coppice {

// Where the loop stands; everything beyond the components' own state that a
// resumed run needs to continue bit for bit.
struct TrainerState {
  int64_t step = 0;     // optimizer steps done
  int64_t epoch = 0;    // the epoch of the next batch
  int64_t batch = 0;    // the index of the next batch within that epoch
  uint64_t rng_seed = 0;    // default_generator()
  uint64_t rng_offset = 0;
  int64_t lr_step = -1;     // LrScheduler::current_step(); -1: no scheduler
  uint64_t data_seed = 0;   // the train loader's shuffle seed (checked on resume)
  std::map<std::string, std::string> extra;  // free-form, saved as "trainer.extra.<key>"
};

// Test hooks for write_file_atomically.
struct AtomicWriteOptions {
  // >= 0: write only this many bytes of the temporary file, leave it there
  // and fail as a killed writer would (nothing is renamed).
  int64_t simulate_crash_after_bytes = -1;
};

// Writes `bytes` to `path` through a temporary file in the same directory:
// write, fsync, rename, fsync the directory.
absl::Status write_file_atomically(const std::string& path, const std::string& bytes,
                                   const AtomicWriteOptions& options = {});

// "ckpt-0000000100.safetensors".
std::string checkpoint_file_name(int64_t step);

// The complete checkpoints in `dir` (temporary files ignored), oldest first,
// as (step, path). A missing directory gives an empty list.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> list_checkpoints(const std::string& dir);
// `path` itself when it is a file; the newest checkpoint when it is a
// directory (NotFound naming it when it has none).
absl::StatusOr<std::string> resolve_checkpoint(const std::string& path);

// The checkpoint's bytes in memory.
absl::StatusOr<std::string> serialize_checkpoint(const Module& model, const Optimizer& optimizer,
                                                 const MaskUpdater* updater, const TrainerState& state);
// Creates `dir` when needed, writes <dir>/checkpoint_file_name(state.step)
// atomically, prunes to keep_last; returns the file's path. Every parameter
// must carry its name (the loop names them after the model's).
absl::StatusOr<std::string> save_checkpoint(const std::string& dir, const Module& model, const Optimizer& optimizer,
                                            const MaskUpdater* updater, const TrainerState& state,
                                            int64_t keep_last = 0, const AtomicWriteOptions& write_options = {});
// Loads checkpoint file `path` (resolve_checkpoint first for a directory)
// into freshly built components and returns the trainer state. `updater`
// must be given exactly when the checkpoint has updater state.
absl::StatusOr<TrainerState> load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer,
                                             MaskUpdater* updater);

// Gives every parameter of `model` its dotted name (Variable::set_name), as
// optimizer state files require.
void name_parameters(const Module& model);

}  // namespace coppice
