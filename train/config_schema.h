// The keys of a job file (config.h) as data: one declaration per key path
// (train/job_keys.cc, of the shape key_spec.h gives), with its type, default,
// range or choices and a line of documentation. The loader checks every map
// of the YAML tree against it (an unknown key is refused with a did-you-mean
// suggestion by edit distance) and its readers take each key's default,
// range and choices from it (train/config_section.h); --set overrides are
// resolved and type-checked through it before they touch the tree; the job
// reference page is printed from it (train/job_reference.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "train/key_spec.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

// Every key, sections before their keys, in the order README.md lists them
// (train/job_keys.cc).
const std::vector<SchemaKey>& job_schema();

// ---- the numbers' ranges --------------------------------------------------------------
//
// Every numeric key (kInt, kDouble) has a range, and the loader refuses a
// value outside it with one line naming the key, the value and the range.
// The limits below are where a value stops being a job and becomes a mistake:
// counts whose products would overflow (steps x batch x ranks, epochs x
// batches), sizes no machine holds, timeouts whose deadlines would overflow
// the clock.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;      // steps, epochs, step counts and intervals
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 24;   // examples per batch
inline constexpr int64_t kMaxExamples = int64_t{1} << 40;    // synthetic examples
inline constexpr int64_t kMaxDimension = int64_t{1} << 24;   // features, classes, block sizes, n:m, seq_len
inline constexpr int64_t kMaxWorldSize = 65536;              // ranks
inline constexpr int64_t kMaxInprocWorldSize = 256;          // ranks as threads of one process (backend inproc)
inline constexpr int64_t kMaxKeepLast = 1'000'000;           // checkpoints kept
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;  // a week
inline constexpr double kMaxBucketMb = 65536;                // 64 GiB

// The range of the key at `pattern` ("data.batch_size",
// "sparsity.rules[].density", "sparsity.overrides.*"), or null.
const KeyRange* key_range(const std::string& pattern);

// The entry at `pattern` ("" is the root section), or null.
const SchemaKey* find_schema_key(const std::string& pattern);
// The names of the keys directly under section `pattern` ("" for the root).
std::vector<std::string> schema_children(const std::string& pattern);

// Edit distance of bytes: insertions, deletions, substitutions and
// transpositions of neighbours ("adma" is 1 from "adam").
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `word` when it is close enough to be a likely
// typo (distance <= max(1, |word| / 3), or a candidate that differs only in
// case, '-' for '_', or contains it); "" otherwise. Ties go to the first.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "<path>.<key>: unknown key; did you mean '<path>.<best>'?" (or "...; known
// keys here: a, b, c" when nothing is close), for key `key` in the section at
// display path `path` whose schema pattern is `pattern`. Also suggests a key
// of the same name elsewhere in the schema ("lr" at the top: optimizer.lr).
std::string unknown_key_message(const std::string& path, const std::string& pattern, const std::string& key);

// Applies one override "key.path=value" to `root` (a map, or null for an
// empty document). The path follows the schema: list elements by index
// ("sparsity.rules.0.density" or "sparsity.rules[0].density"), the rest of
// the path after a free-form map is one key ("sparsity.overrides.fc3.weight").
// The value is read as YAML (a scalar, or a flow list / map for a list or
// section key) and must fit the key's type. Errors name the override and the
// key path, with a did-you-mean for a key that does not exist.
absl::Status apply_override(YAML::Node& root, const std::string& assignment);

}  // namespace coppice
