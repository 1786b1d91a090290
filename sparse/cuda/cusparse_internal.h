// Internals shared by the cuSPARSE kernels of sparse/cuda (not a public API;
// cusparse_context.h documents the design).
#pragma once

#include <cusparse.h>

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/cuda/cusparse_context.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// Throws coppice::Error "<op>: cuSPARSE error <name>: <text> (in <what>)".
void check_cusparse(cusparseStatus_t status, std::string_view op, std::string_view what);

// Serializes every cuSPARSE call and the plan cache; hold it around
// handle_for, find_or_build and the calls that use the plan.
std::mutex& cusparse_mutex();

// The device's handle, bound to its stream (the caller holds cusparse_mutex
// and a DeviceGuard for `device`).
cusparseHandle_t handle_for(int device);

// A cached plan: descriptors and workspace for one (op, pattern, shapes,
// dtype, device). The descriptors' data pointers are stale between calls;
// every call re-points them before use.
struct Plan {
  int device = 0;
  cusparseSpMatDescr_t sparse = nullptr;
  cusparseDnMatDescr_t dense[2] = {nullptr, nullptr};
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  const void* sparse_values = nullptr;  // the values array `sparse` was made with (Blocked-ELL)

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan();

  // Allocates the workspace through the device's caching allocator.
  void allocate_workspace(size_t bytes);
};

// The cached plan for `key` (a hit), or a new one filled by `build` and
// cached (a miss; plans whose pattern has gone go first, and the least
// recently used one when the cache is full).
// The caller holds cusparse_mutex while it uses the plan. When `build`
// throws, nothing is cached.
// `anchor`: pattern_anchor of the sparse operand (pattern_cache.h); the plan
// is dropped once it is gone.
Plan& find_or_build(const std::string& key, int device, const Tensor& anchor, const std::function<void(Plan&)>& build);

// Throws naming `op` unless `in` holds two 2-D operands on one CUDA device
// with one floating dtype (the entries of SpMM and SpGEMM).
void check_cuda_operand_pair(const std::vector<Tensor>& in, std::string_view op);

// cuSPARSE's name for a floating dtype.
cudaDataType_t cuda_type(DType dtype);

}  // namespace coppice::sparse_cuda
