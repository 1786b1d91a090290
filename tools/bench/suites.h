// The benchmark suites. Each appends one Result per (device, dtype) it was
// asked for: measured, or with a status saying why not ("skipped: no CUDA
// device", "error: ...").
#pragma once

#include <vector>

#include "tensor/tensor.h"
#include "tools/bench/bench_util.h"

namespace coppice::bench {

// Dense matmul [n, n] x [n, n]: 2 n^3 flops per call.
void run_gemm(const Config& config, std::vector<Result>* results);
// add of two tensors of numel elements: 3 * numel * itemsize bytes per call.
void run_elementwise(const Config& config, std::vector<Result>* results);

// Shared by the suites.
struct DeviceCase {
  bool cuda;
  std::string label;  // "cpu", "cuda:0"
};
std::vector<DeviceCase> devices_to_run(const Config& config);
// Why CUDA cases are skipped, or "" when a GPU is there.
std::string cuda_skip_reason();
TimingOptions timing_options(const Config& config);
// Fills device_name and peak fields of `r` for its device.
void describe_device(bool cuda, DType dtype, const char* metric, Result* r);
// Uniform [0, 1) values of `dtype` on `device`, drawn on the CPU and copied
// (so a device without random kernels can still be timed).
Tensor random_input(const Shape& shape, DType dtype, Device device);
// Logs one line about `r` to stderr.
void log_result(const Result& r);

}  // namespace coppice::bench
