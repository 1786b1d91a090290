// Timing a way of computing a result on the device, for the routes that are
// chosen by measurement (spmm_choice.h, the BSR SDDMM of sddmm.cc).
#pragma once

#include <functional>
#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// Milliseconds per run of `run` on `device`: a warm-up run (plans, caches,
// first touch of the output), then the mean of two runs between CUDA events
// on the device's current stream. `out` keeps the last result; `op` names
// the caller in errors.
double time_on_device_ms(const std::function<Tensor()>& run, int device, Tensor& out, std::string_view op);

}  // namespace coppice::sparse_cuda
