#include "tools/bench/suites.h"

#include <cmath>
#include <cstdio>

#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice::bench {

std::vector<DeviceCase> devices_to_run(const Config& config) {
  std::vector<DeviceCase> out;
  if (config.cpu) out.push_back({false, "cpu"});
  if (config.cuda) out.push_back({true, "cuda:0"});
  return out;
}

std::string cuda_skip_reason() {
  if (find_backend(DeviceType::kCuda) == nullptr) return "skipped: no CUDA device (this build has no CUDA backend)";
  if (!cuda_available()) return "skipped: no CUDA device (none visible)";
  return "";
}

TimingOptions timing_options(const Config& config) {
  TimingOptions o;
  o.warmup = config.warmup;
  o.reps = config.reps;
  o.min_sample_ms = config.min_sample_ms;
  return o;
}

void describe_device(bool cuda, DType dtype, const char* metric, Result* r) {
  if (!cuda) {
    static const std::string cpu = cpu_model_name();
    r->device_name = cpu;
    r->peak_source = "unknown: the CPU peak is not estimated";
    return;
  }
  static const std::string gpu = gpu_model_name();
  r->device_name = gpu;
  Peak p = reference_peak(gpu, dtype, metric);
  r->peak = p.value;
  r->peak_source = p.source.empty() ? "unknown: no reference peak for this GPU model" : p.source;
}

Tensor random_input(const Shape& shape, DType dtype, Device device) {
  return rand(shape, TensorOptions(dtype, Device::cpu())).to(device);
}

void log_result(const Result& r) {
  std::string shape = "[" + str_join(r.shape, ", ") + "]";
  if (r.status != "ok") {
    std::fprintf(stderr, "%-11s %-6s %-4s %-20s %s\n", r.suite.c_str(), r.device.c_str(), r.dtype.c_str(),
                 shape.c_str(), r.status.c_str());
    return;
  }
  bool gemm = std::isfinite(r.flops);
  double v = gemm ? r.gflops() : r.gbps();
  std::fprintf(stderr, "%-11s %-6s %-4s %-20s %10.4f ms  %10.1f %s", r.suite.c_str(), r.device.c_str(),
               r.dtype.c_str(), shape.c_str(), r.median_ms, v, gemm ? "GFLOP/s" : "GB/s");
  if (std::isfinite(r.peak)) std::fprintf(stderr, "  (%.1f%% of peak)", 100.0 * v / r.peak);
  std::fprintf(stderr, "\n");
}

}  // namespace coppice::bench
