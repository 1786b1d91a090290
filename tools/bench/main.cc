// bench: dense GEMM, elementwise, SpMM, SDDMM and sparsifier throughput on the CPU and CUDA, as JSON.
//
//   bench [gemm|elementwise|spmm|sddmm|sparsify|all] [--device cpu|cuda|all] [--size N] [--reps R] [--json FILE]
//   bench dp [--batch B] [--hidden H] [--steps S] ...      data-parallel training steps; one process
//                                                          per rank: tools/launch -n N -- bench dp
//   bench train [--models ...] [--formats ...] [--modes ...]  training steps per model, format, mode
//   bench bsr [--dtype ...]                                 a BSR linear layer's products beside dense
//   bench attention [--dtype ...]                           fused attention, causal and block-sparse
//
// tools/bench/torch_reference.py measures the same shapes with PyTorch and
// tools/bench/compare.py puts the two reports side by side.
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tensor/backend.h"
#include "tensor/precision.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suites.h"

namespace {

int run(int argc, char** argv) {
  using namespace coppice::bench;
  absl::StatusOr<Config> config = parse_args(std::vector<std::string>(argv + 1, argv + argc));
  if (!config.ok()) {
    std::fprintf(stderr, "bench: %s\n%s", std::string(config.status().message()).c_str(), usage().c_str());
    return 2;
  }
  if (config->help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  coppice::set_allow_tf32(config->allow_tf32);
  if (!config->routes_in.empty()) {
    const absl::Status restored = restore_routes(config->routes_in);
    if (!restored.ok()) {
      std::fprintf(stderr, "bench: %s\n", std::string(restored.message()).c_str());
      return 2;
    }
  }
  Report report;
  const bool cuda_built = coppice::find_backend(coppice::DeviceType::kCuda) != nullptr;
  report.info = {{"tool", "coppice-bench"},
                 {"build", cuda_built ? "cuda" : "cpu-only"},
                 {"cpu_name", cpu_model_name()},
                 {"gpu_name", gpu_model_name()}};
  report.numbers = {{"schema_version", 1},
                    {"cuda_device_count", coppice::cuda_device_count()},
                    {"cpu_threads", static_cast<double>(std::thread::hardware_concurrency())},
                    {"warmup", config->warmup},
                    {"min_sample_ms", config->min_sample_ms},
                    {"allow_tf32", config->allow_tf32 ? 1.0 : 0.0}};
  if (config->gemm) run_gemm(*config, &report.results);
  if (config->elementwise) run_elementwise(*config, &report.results);
  if (config->spmm) run_spmm(*config, &report.results);
  if (config->sddmm) run_sddmm(*config, &report.results);
  if (config->sparsify) run_sparsify(*config, &report.results);
  if (config->train) run_train(*config, &report.results);
  if (config->bsr) run_bsr(*config, &report.results);
  if (config->bsr_nm24) run_bsr_nm24(*config, &report.results);
  if (config->rigl) run_rigl(*config, &report.results);
  if (config->attention) run_attention(*config, &report.results);
  bool reporting = true;  // false on the ranks other than 0 of a launched dp job
  if (config->dp) reporting = run_dp(*config, &report.results);
  if (!reporting) {
    for (const Result& r : report.results) {
      if (r.status.rfind("error", 0) == 0) return 1;
    }
    return 0;
  }

  if (!config->routes_out.empty()) {
    const absl::Status written = write_routes(config->routes_out);
    if (!written.ok()) {
      std::fprintf(stderr, "bench: %s\n", std::string(written.message()).c_str());
      return 1;
    }
  }
  const std::string json = report_to_json(report) + "\n";
  std::fputs(json.c_str(), stdout);
  std::fflush(stdout);
  if (!config->json_path.empty()) {
    std::ofstream f(config->json_path, std::ios::binary | std::ios::trunc);
    f << json;
    f.close();
    if (!f) {
      std::fprintf(stderr, "bench: cannot write %s\n", config->json_path.c_str());
      return 1;
    }
  }
  for (const Result& r : report.results) {
    if (r.status.rfind("error", 0) == 0) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
}
