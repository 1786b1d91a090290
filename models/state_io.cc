#include "models/state_io.h"

#include "sparse/io/sparse_safetensors.h"
#include "tensor/error.h"

namespace coppice {

absl::Status save_module(const Module& module, const std::string& path,
                         const std::map<std::string, std::string>& metadata) {
  try {
    return write_sparse_safetensors(path, module.state_dict(), metadata);
  } catch (const Error& e) { return absl::InvalidArgumentError(e.what()); }
}

absl::Status load_module(Module& module, const std::string& path, bool strict) {
  absl::StatusOr<SparseSafetensorsFile> file = read_sparse_safetensors(path);
  if (!file.ok()) return file.status();
  try {
    module.load_state_dict(file->tensors, strict);
  } catch (const Error& e) { return absl::InvalidArgumentError(str_cat(path, ": ", e.what())); }
  return absl::OkStatus();
}

}  // namespace coppice
