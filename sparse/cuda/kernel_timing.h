// Timing the ways of computing a result on the device, for the planners'
// decisions that are made by measurement (sparse/route_choices.h: the CSR
// SpMM of spmm_choice.h, the 2:4 products of spmm.cc, the BSR SDDMM of
// sddmm.cc).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// Milliseconds per run of `run` on `device`: a warm-up run (plans, caches,
// first touch of the output), then the mean of two runs between CUDA events
// on the device's current stream. `out` keeps the last result; `op` names
// the caller in errors.
double time_on_device_ms(const std::function<Tensor()>& run, int device, Tensor& out, std::string_view op);

// The device's model as the decisions' keys name it ("NVIDIA H100 80GB HBM3
// sm_90"): the same on every rank of a job, unlike the device's index.
// Cached per device.
std::string device_model_key(int device);

// A route a measured decision can take: its name (one of the decision's
// candidates) and how to run it.
struct TimedRoute {
  std::string_view name;
  std::function<Tensor()> run;
};

// The index of the route of `routes` that `decision` takes for `key`
// (choose_route): recorded, or measured now on the real operands, `rounds`
// interleaved rounds of time_on_device_ms with each route keeping its best,
// alone: the device's work queued before the measurement (on any stream,
// run_beside's side stream included) finishes before the first route runs.
// `out` (optional) gets the chosen route's result where this call measured
// (undefined otherwise: the caller runs the route).
size_t chosen_route(std::string_view decision, const std::string& key, int device, std::string_view op,
                    const std::vector<TimedRoute>& routes, int rounds = 1, Tensor* out = nullptr);

// The result of the route chosen_route picks; its index into `routes` in
// *chosen (optional), for a caller whose routes leave more than their
// result behind (a call that measures runs every route).
Tensor run_chosen_route(std::string_view decision, const std::string& key, int device, std::string_view op,
                        const std::vector<TimedRoute>& routes, int rounds = 1, size_t* chosen = nullptr);

}  // namespace coppice::sparse_cuda
