#include "tools/bench/suites.h"

#include <cmath>
#include <cstdio>

#include "sparse/convert.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
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

const std::vector<double>& sparse_sparsities() {
  static const std::vector<double> s = {0.5, 0.75, 0.9, 0.95, 0.99};
  return s;
}

uint64_t pattern_seed(double sparsity) { return 0xC0991CEull + static_cast<uint64_t>(std::llround(sparsity * 1000)); }

Tensor mask_tensor(const std::vector<uint8_t>& mask, int64_t rows, int64_t cols, Device device) {
  Tensor t = Tensor::empty({rows, cols}, TensorOptions(DType::kBool, Device::cpu()));
  bool* p = t.data<bool>();
  for (size_t i = 0; i < mask.size(); ++i) p[i] = mask[i] != 0;
  return t.to(device);
}

namespace {

std::string fallback_note() {
  std::string keys;
  for (const auto& [k, v] : Dispatcher::instance().fallback_counts()) keys += (keys.empty() ? "" : ", ") + k;
  return keys;
}

}  // namespace

void run_sparse_bench(const Config& config, const DeviceCase& dc, const SparseBench& b, std::vector<Result>* results) {
  constexpr int64_t kBlock = 32;
  TimingOptions opts = timing_options(config);
  if (!dc.cuda) {
    if (!config.reps_given) opts.reps = kCpuSparseReps;
    if (!config.warmup_given) opts.warmup = kCpuSparseWarmup;
  }
  const std::string skip = dc.cuda ? cuda_skip_reason() : "";
  const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
  auto base = [&](const std::string& op, const std::string& format) {
    Result r;
    r.suite = b.suite;
    r.op = op;
    r.device = dc.label;
    r.dtype = "f32";
    r.shape = {b.m, b.k, b.n};
    r.format = format;
    describe_device(dc.cuda, DType::kF32, "gflops", &r);
    if (!skip.empty()) r.status = skip;
    return r;
  };
  {
    Result r = base("dense_gemm", "dense");
    r.flops = dense_gemm_flops(b.m, b.k, b.n);
    if (skip.empty()) {
      try {
        std::function<void()> fn = b.dense_op(device);
        fill_timing(time_op(
                        fn, [&] { synchronize(device); }, opts),
                    &r);
      } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
    }
    log_result(r);
    results->push_back(std::move(r));
  }
  for (double sparsity : sparse_sparsities()) {
    std::vector<uint8_t> mask;  // elementwise pattern, drawn once for csr and coo
    for (const char* format : {"csr", "coo", "bsr"}) {
      const bool bsr = std::string(format) == "bsr";
      Result r = base(b.op, format);
      r.sparsity = sparsity;
      if (skip.empty() && bsr && (b.rows % kBlock != 0 || b.cols % kBlock != 0)) {
        r.status = str_cat("skipped: block ", kBlock, "x", kBlock, " does not divide [", b.rows, ", ", b.cols, "]");
      }
      if (r.status == "ok") {
        try {
          std::vector<uint8_t> block_mask;
          if (bsr) {
            block_mask = random_block_pattern(b.rows, b.cols, kBlock, kBlock, sparsity, pattern_seed(sparsity));
          } else if (mask.empty()) {
            mask = random_pattern(b.rows, b.cols, sparsity, pattern_seed(sparsity));
          }
          const std::vector<uint8_t>& m = bsr ? block_mask : mask;
          int64_t nnz = 0;
          for (uint8_t v : m) nnz += v;
          r.nnz = nnz;
          r.flops = 2.0 * static_cast<double>(nnz) * static_cast<double>(b.flops_per_nnz);
          Tensor values = random_input({b.rows, b.cols}, DType::kF32, device);
          FormatOptions fo = bsr ? FormatOptions::block(kBlock) : FormatOptions{};
          Tensor sparse = sparse_from_mask(values, mask_tensor(m, b.rows, b.cols, device), format, fo);
          std::function<void()> fn = b.sparse_op(sparse, device);
          // One call to see whether a kernel runs it or the dispatcher falls back to dense.
          Dispatcher::instance().reset_fallback_counts();
          fn();
          synchronize(device);
          std::string fell_back = fallback_note();
          Dispatcher::instance().reset_fallback_counts();
          if (!fell_back.empty()) {
            r.status = "skipped: no kernel (dense fallback: " + fell_back + ")";
          } else {
            fill_timing(time_op(
                            fn, [&] { synchronize(device); }, opts),
                        &r);
          }
        } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
      }
      log_result(r);
      results->push_back(std::move(r));
    }
  }
}

void log_result(const Result& r) {
  std::string shape = "[" + str_join(r.shape, ", ") + "]";
  if (!r.format.empty()) shape += " " + r.format;
  if (std::isfinite(r.sparsity)) shape += str_cat(" ", std::llround(r.sparsity * 100), "%");
  if (r.status != "ok") {
    std::fprintf(stderr, "%-11s %-6s %-4s %-20s %s\n", r.suite.c_str(), r.device.c_str(), r.dtype.c_str(),
                 shape.c_str(), r.status.c_str());
    return;
  }
  bool gemm = std::isfinite(r.flops);
  double v = gemm ? r.gflops() : r.gbps();
  std::fprintf(stderr, "%-11s %-6s %-4s %-20s %10.4f ms  %10.1f %s", r.suite.c_str(), r.device.c_str(), r.dtype.c_str(),
               shape.c_str(), r.median_ms, v, gemm ? "GFLOP/s" : "GB/s");
  if (std::isfinite(r.peak)) std::fprintf(stderr, "  (%.1f%% of peak)", 100.0 * v / r.peak);
  std::fprintf(stderr, "\n");
}

}  // namespace coppice::bench
