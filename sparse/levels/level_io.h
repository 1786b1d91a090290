// Level tensors (level_tensor.h) in safetensors files, parts named by level,
// in the convention of sparse/io/sparse_safetensors.h: a level tensor `w` is
// one dense entry per part, "w.positions_<k>", "w.coordinates_<k>" and
// "w.values", plus metadata
//   coppice.levels.w   its declaration as text (describe / parse_level_format)
//   coppice.shape.w    its shape, as JSON: "[8, 16]"
// so that any safetensors reader finds the arrays, and Coppice rebuilds and
// checks the tensor from them.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "sparse/levels/level_tensor.h"
#include "tensor/io/safetensors.h"

namespace coppice::levels {

// Appends t's parts to `tensors` and its declaration and shape to `metadata`,
// under `name`.
void add_level_tensor(const std::string& name, const LevelTensor& t, NamedTensors& tensors,
                      std::map<std::string, std::string>& metadata);

// Every level tensor of a read file (each name with a "coppice.levels.<name>"
// entry), rebuilt from its parts and checked. An error names `source`, the
// tensor and the problem (a missing part or shape, unreadable text, parts the
// declaration refuses); nothing throws.
absl::StatusOr<std::map<std::string, LevelTensor>> level_tensors_of(const SafetensorsFile& file,
                                                                    const std::string& source);

}  // namespace coppice::levels
