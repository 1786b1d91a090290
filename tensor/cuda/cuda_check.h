// Turns CUDA runtime failures into coppice::Error naming the op.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

namespace coppice::cuda {

// Throws coppice::Error "<op>: CUDA error <name>: <string> (in <what>)" unless
// `err` is cudaSuccess. Clears the runtime's last-error slot first, so a
// non-sticky failure does not resurface in the next check.
void check_cuda(cudaError_t err, std::string_view op, std::string_view what);

// After a kernel launch: throws when the launch failed (bad configuration,
// missing kernel image for this GPU, an earlier sticky fault).
void check_launch(std::string_view op);

}  // namespace coppice::cuda

// COPPICE_CUDA_CHECK(cudaMemcpy(...), "copy"): throws naming the op and the call.
#define COPPICE_CUDA_CHECK(expr, op) ::coppice::cuda::check_cuda((expr), (op), #expr)
