#include "sparse/cuda/kernel_routes.h"

#include <string>

namespace coppice::sparse_cuda {

std::optional<Tensor> unless_refused(const std::function<Tensor()>& run) {
  try {
    return run();
  } catch (const Error& e) {
    // check_cusparse names the status in its message.
    if (std::string(e.what()).find("CUSPARSE_STATUS_NOT_SUPPORTED") == std::string::npos) throw;
  }
  return std::nullopt;
}

}  // namespace coppice::sparse_cuda
