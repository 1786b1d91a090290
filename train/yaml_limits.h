// Limits on the YAML a job brings (a job file, a --set value), so that a
// hostile or broken one costs bounded time, memory and stack:
//
//   * size: a job file, or a --set value, of at most kMaxJobYamlBytes
//     (1 MiB; the shipped configs are under 4 KB);
//   * nesting: at most kMaxYamlDepth collections (maps and lists) deep,
//     checked on the text before yaml-cpp reads it (its parser recurses once
//     per level), by a scan that is linear and does not recurse;
//   * nodes: at most kMaxYamlNodes nodes, counting every alias as a copy of
//     what it names, checked on the parsed tree by a walk that stops at the
//     limit, so that "billion laughs" aliases, or an alias inside the node it
//     names, never make the validator walk an exponential (or endless) tree.
//     The walk also checks the nesting again, exactly.
//
// Errors are one line that names where and the limit:
//   "jobs/a.yaml: line 3, column 17: nested deeper than 64 levels (limit)".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

inline constexpr size_t kMaxJobYamlBytes = size_t{1} << 20;
inline constexpr int kMaxYamlDepth = 64;
inline constexpr size_t kMaxYamlNodes = 100000;

// Checks `text` before it is parsed: its size, then an upper bound on its
// nesting (block indentation, "- " and "? " entries, flow brackets; quoted
// scalars, comments and block scalars are skipped). `where` begins messages
// ("jobs/a.yaml", "--set model.options"); `what` names the text in the size
// message ("the job file", "the value"); the text's root sits `base_depth`
// collections deep (a --set value under its key path).
absl::Status check_yaml_text(std::string_view text, const std::string& where, const char* what, int base_depth = 0);

// Checks a parsed tree: nesting (exactly, with `base_depth` as above) and
// the number of nodes with aliases expanded.
absl::Status check_yaml_tree(const YAML::Node& root, const std::string& where, int base_depth = 0);

// The whole regular file at `path`, read no further than the size limit (so
// that a huge file costs nothing); a FIFO, a device or a directory is refused
// without blocking (tensor/io/input_file.h). Errors name the path and the
// system's reason: NotFound when it does not exist, InvalidArgument when it
// is not a regular file or too large.
absl::StatusOr<std::string> read_job_yaml_file(const std::string& path);

}  // namespace coppice
