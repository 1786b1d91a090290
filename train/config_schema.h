// The keys of a job file (config.h) as data: one entry per key path, with
// its type and a line of documentation. The loader checks every map of the
// YAML tree against it (an unknown key is refused with a did-you-mean
// suggestion by edit distance), and --set overrides are resolved and
// type-checked through it before they touch the tree.
//
// Paths are dotted; "[]" stands for any element of a list and "*" for any
// key of a free-form map (model options, sparsifier parameters, per-layer
// density overrides):
//   optimizer.lr   sparsity.rules[].format   model.options.*
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

enum class KeyType {
  kSection,     // a map of the keys below it
  kList,        // a list of sections (path + "[]")
  kFreeMap,     // a map whose keys are free (path + ".*" holds the values' type)
  kInt,
  kDouble,      // also accepts an integer
  kBool,        // true/false, yes/no, on/off
  kString,
  kStringList,  // a list of strings (a single string counts as a list of one)
  kScalar,      // any scalar or list of scalars (model options, sparsifier parameters)
};
const char* key_type_name(KeyType type);  // "an integer", "a number", ...
// Whether a YAML value fits `type` (null fits anything: the default).
bool value_fits(const YAML::Node& value, KeyType type);

struct SchemaKey {
  std::string path;  // "optimizer.lr", "sparsity.rules[].format", "model.options.*"
  KeyType type;
  std::string doc;   // one line: allowed values and the default
};

// Every key, sections before their keys, in the order README.md lists them.
const std::vector<SchemaKey>& job_schema();
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
