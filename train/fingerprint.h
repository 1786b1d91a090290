// The fingerprint of a job (job_fingerprint in train/job_fingerprint.h): the settings that shape a run's state and its
// trajectory, as flat "key: value" pairs that a checkpoint records and a
// resume compares (train/checkpoint.h, docs/guide/checkpoints.md "What a resume checks").
//
// Keys follow the job file's paths where there is one ("optimizer.momentum",
// "mask_update.interval"); the sparsity is recorded per parameter as the
// resolved schedule has it ("sparsity.fc1.weight": "csr density=0.1", so a
// rule rewritten in another form that selects the same does not count as a
// change); "data.files" names the dataset's files with their sizes and
// CRC-32s. Values are exact (%.17g for numbers).
//
// Two kinds of keys:
//   structural  what the saved tensors are: the model and its options, the
//               parameters' formats and densities, output rules, the numeric
//               dtype, the optimizer, the mask-update method and its
//               densify_step (which steps' checkpoints hold dense weights).
//               A checkpoint whose structural keys differ cannot be loaded
//               into this job.
//   adjustable  everything else (hyperparameters, schedules, training length,
//               data, seeds, world size, exchange, loss scaling). A resume
//               may change them on purpose (--allow-changes KEY,...): the
//               job's values then win over the checkpoint's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace coppice {

using Fingerprint = std::map<std::string, std::string>;

// Whether a change of `key` changes what the checkpoint's tensors are.
bool is_structural_key(const std::string& key);

struct FingerprintChange {
  std::string key;
  std::string saved;    // "(none)" when the checkpoint lacks the key
  std::string current;  // "(none)" when the job lacks it
};

// The keys whose values differ, in key order.
std::vector<FingerprintChange> fingerprint_changes(const Fingerprint& saved, const Fingerprint& current);

// Whether `allowed` (exact keys, "prefix.*" for every key under a prefix, or
// "*" for every key) lets `key` change. (Structural keys are refused by the
// caller whatever this says.)
bool change_allowed(const std::string& key, const std::vector<std::string>& allowed);

// "optimizer.lr: 0.1 -> 0.05; training.steps: 100 -> 200".
std::string describe_changes(const std::vector<FingerprintChange>& changes);

// Whether job_fingerprint (train/job_fingerprint.h) may record `key` as an
// adjustable setting: the keys a resume may be allowed to change. (It checks
// every key it records against this list, so that the two cannot drift.)
bool is_adjustable_fingerprint_key(const std::string& key);

// Checks a list of changes a resume may make (checkpoint.allow_changes,
// --allow-changes): each "*", an adjustable key or "prefix.*" over at least
// one, of lowercase letters, digits, '_', '.', '[', ']'; none structural (no
// resume can change those). InvalidArgument naming the first bad entry: an
// unknown key with a did-you-mean ("'optimizer.lrr' is not a setting that a
// resume may change; did you mean 'optimizer.lr'?"), a job key that no
// checkpoint records (a resume may change it anyway).
absl::Status check_allowed_changes(const std::vector<std::string>& allowed);

}  // namespace coppice
