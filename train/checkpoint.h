// Training checkpoints: one safetensors file per checkpoint that PyTorch's
// safetensors can read, written atomically, checksummed, and naming the job
// and the run that wrote it. (File names, runs and which file a resume from
// a directory takes: train/checkpoint_files.h.)
//
// File: <dir>/ckpt-<step, 10 digits>-<run id>.safetensors, holding
//   model.<name>            every parameter and buffer (Module::state_dict);
//                           sparse ones as their parts with the metadata that
//                           rebuilds them (sparse/io/sparse_safetensors.h), so
//                           the masks travel with the weights
//   optim.<param>.<state>   the optimizer's state (optim/state_io.h), its
//                           metadata under "optim." (hyperparameters, step
//                           counts, group layout)
//   updater.<layer>.<...>   the state of the method that drives the masks
//                           (optim/mask_state.h: the mask updater's ITOP
//                           record and movement scores, SR-STE's masks), when
//                           there is one
//   metadata "trainer.*"    TrainerState: the format ("coppice-checkpoint-2"),
//                           step, epoch and batch of the data loader, the
//                           default generator's seed and offset, the LR
//                           scheduler's step, the train loader's seed, the
//                           run id and the checkpoint the run resumed from
//   metadata "job.*"        the fingerprint of the job (train/fingerprint.h)
//   metadata "checksum.*"   a CRC-32 (zlib's) of every stored entry (its name,
//                           dtype, shape and bytes) and one of all other
//                           metadata ("checksum.metadata")
//
// Writing: the bytes go to a temporary file in the same directory, which is
// fsynced, renamed over the final name and the directory fsynced; so a kill
// at any moment leaves either the old set of checkpoints or the old set plus
// the new one, never a partial file under a checkpoint's name. Then all but
// the newest keep_last checkpoints of the same run are deleted (keep_last 0:
// keep all), and so are temporary files left by an earlier, interrupted
// writer.
//
// Writing refuses a state that holds an inf or a NaN (a diverged run's), naming
// the entry: every checkpoint is a state a run can go on from.
//
// Reading (read_checkpoint) checks, before anything is interpreted, that the
// file is a complete safetensors file of this format whose every entry and
// metadata match their checksums and whose every value is finite; then that
// every trainer field is in range.
// Applying (apply_checkpoint) checks the whole file against the components
// (names, shapes, formats and dtypes of the parameters, the optimizer's and
// the updater's state) before it changes any of them, so an error leaves
// them as they were. Errors are Status values naming the file and the entry
// or field. A sparse parameter is replaced by a new Variable in the loaded
// pattern; the optimizer is rebound to it (Optimizer::replace_param) before
// its state is loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/module.h"
#include "optim/mask_state.h"
#include "optim/mask_updater.h"  // the usual MaskState
#include "optim/optimizer.h"
#include "tensor/io/safetensors.h"
#include "train/checkpoint_files.h"
#include "train/fingerprint.h"

namespace coppice {

// The format this code writes and reads.
inline constexpr char kCheckpointFormat[] = "coppice-checkpoint-2";

// Where the loop stands; everything beyond the components' own state that a
// resumed run needs to continue bit for bit.
struct TrainerState {
  int64_t step = 0;       // optimizer steps done
  int64_t epoch = 0;      // the epoch of the next batch
  int64_t batch = 0;      // the index of the next batch within that epoch
  uint64_t rng_seed = 0;  // default_generator()
  uint64_t rng_offset = 0;
  int64_t lr_step = -1;                      // LrScheduler::current_step(); -1: no scheduler
  uint64_t data_seed = 0;                    // the train loader's shuffle seed (checked on resume)
  std::string run_id;                        // the run that wrote it (checkpoint_files.h); "" none
  std::string resumed_from;                  // the checkpoint that run resumed from; "" for a fresh run
  Fingerprint fingerprint;                   // of the job (saved as "job.<key>"); empty: none
  std::map<std::string, std::string> extra;  // free-form, saved as "trainer.extra.<key>"
};

// The checkpoint's bytes in memory.
// `updater`: the mask method's state (a MaskUpdater, SrSte), or null.
// FailedPrecondition naming the entry when a value is inf or NaN.
absl::StatusOr<std::string> serialize_checkpoint(const Module& model, const Optimizer& optimizer,
                                                 const MaskState* updater, const TrainerState& state);
// The bytes of `file` (flat entries on the host and their metadata, as
// parse_safetensors gives them) with every checksum computed afresh: the last
// step of serialize_checkpoint, and for tests that edit a checkpoint on
// purpose (a well-formed file that lies, e.g. about a value).
absl::StatusOr<std::string> seal_checkpoint(SafetensorsFile file);
// Creates `dir` when needed, writes <dir>/checkpoint_file_name(state.step,
// state.run_id) atomically, prunes that run's checkpoints to keep_last;
// returns the file's path. Every parameter must carry its name (the loop
// names them after the model's).
absl::StatusOr<std::string> save_checkpoint(const std::string& dir, const Module& model, const Optimizer& optimizer,
                                            const MaskState* updater, const TrainerState& state, int64_t keep_last = 0,
                                            const AtomicWriteOptions& write_options = {});

// A checkpoint file read and verified, not yet applied to anything.
struct CheckpointFile {
  std::string path;
  TrainerState state;
  NamedTensors model;                     // without the "model." prefix
  SafetensorsFile optimizer;              // entries and metadata without "optim."
  std::map<std::string, Tensor> updater;  // without "updater."
  bool has_updater = false;
};

// Reads `path` (a file; resolve_checkpoint first for a directory) and
// verifies its format, checksums, values (all finite) and trainer fields.
// DataLoss naming the file and what is wrong for unreadable, truncated,
// foreign, corrupted, non-finite or out-of-range content.
absl::StatusOr<CheckpointFile> read_checkpoint(const std::string& path);

// Loads `file` into freshly built components after checking that all of it
// fits them (FailedPrecondition naming the file and the mismatch, with the
// components unchanged). `updater` must be given exactly when the checkpoint
// has updater state. With restore_hyperparameters the optimizer's groups take
// the checkpoint's hyperparameters; without, they keep their own (a job's
// resume: the fingerprint compared them already, and a deliberate change
// must win).
absl::Status apply_checkpoint(const CheckpointFile& file, Module& model, Optimizer& optimizer, MaskState* updater,
                              bool restore_hyperparameters = true);

// read_checkpoint, then apply_checkpoint; returns the trainer state.
absl::StatusOr<TrainerState> load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer,
                                             MaskState* updater);

// Gives every parameter of `model` its dotted name (Variable::set_name), as
// optimizer state files require.
void name_parameters(const Module& model);

}  // namespace coppice
