// A module's state_dict in a safetensors file (sparse parameters as their
// parts, sparse/io/sparse_safetensors.h). Loading returns a Status and never
// throws: unreadable files, bad parts, and state that does not fit the module
// (load_state_dict's name and shape checks) all come back as errors.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "models/module.h"

namespace coppice {

absl::Status save_module(const Module& module, const std::string& path,
                         const std::map<std::string, std::string>& metadata = {});
absl::Status load_module(Module& module, const std::string& path, bool strict = true);

}  // namespace coppice
