// Sparsifiers on one f32 tensor of --numel elements (default 16M): each
// built-in's apply() into "dense" (threshold, random with rescale, magnitude
// 90 %, n:m 2:4), the streaming keep_masks, and a device copy of the same
// tensor (op "copy") as the reference. Bytes per call count one read of the
// input and one write of the output (a bool mask: 1 byte per element); the
// copy's measured GB/s is reported as each result's peak, so "% of peak" is
// the fraction of copy bandwidth.
//
// Then relu into CSR on a [4096, 4096] f32 input ~N(0, 1) (--numel N: 4096
// rows of N / 4096 columns) with threshold 1.0 (about 16 % kept): the fused
// kernel (op "relu_to_csr_fused", sparsifiers/fused_relu.h) against the
// generic path (op "relu_to_csr_generic": relu, then the threshold
// sparsifier's apply into CSR, as SparsifiedOp runs it without the fused
// kernel). Bytes count one read of x and the CSR written (4 + 4 bytes per
// entry and the row pointers), the same for both, so their GB/s compare as
// their times do; the fused row's extra "speedup_vs_generic" is generic ms /
// fused ms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>

#include "autograd/variable.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/fused_relu.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

// The fused relu->CSR against the generic path on one device (header comment).
void run_relu_to_csr(const Config& config, const DeviceCase& dc, const TimingOptions& opts, const std::string& skip,
                     double copy_gbps, std::vector<Result>* results) {
  constexpr int64_t kRows = 4096;
  constexpr double kThreshold = 1.0;
  const int64_t cols = config.numel > 0 ? std::max<int64_t>(1, config.numel / kRows) : 4096;
  const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
  const SparsifyContext ctx{1, 2, 3, 0};
  const OutputFormat csr{"csr", {}};
  auto threshold = std::make_shared<ThresholdSparsifier>(kThreshold);
  struct Case {
    std::string op;
    std::function<Tensor(const Tensor&)> fn;
  };
  const std::vector<Case> cases = {
      {"relu_to_csr_fused", [&](const Tensor& x) { return relu_to_csr(Variable(x), kThreshold).value(); }},
      {"relu_to_csr_generic", [&](const Tensor& x) { return threshold->apply(relu(x), csr, ctx); }},
  };
  Tensor x;
  std::vector<double> medians;
  for (const Case& c : cases) {
    Result r;
    r.suite = "sparsify";
    r.op = c.op;
    r.device = dc.label;
    r.dtype = "f32";
    r.shape = {kRows, cols};
    r.format = "csr";
    describe_device(dc.cuda, DType::kF32, "gbps", &r);
    r.peak = copy_gbps;
    r.peak_source = std::isfinite(copy_gbps) ? "measured: op copy of the sparsify input on this device" : "";
    if (!skip.empty()) {
      r.status = skip;
    } else {
      try {
        if (!x.defined()) {
          Generator gen(20261123);
          x = randn({kRows, cols}, TensorOptions(DType::kF32, Device::cpu()), gen).to(device);
        }
        const int64_t nnz = coppice::nnz(c.fn(x));  // the warm-up call also gives the size
        r.nnz = nnz;
        r.sparsity = 1.0 - static_cast<double>(nnz) / static_cast<double>(kRows * cols);
        r.bytes = 4.0 * static_cast<double>(kRows * cols) + 8.0 * static_cast<double>(nnz) + 4.0 * (kRows + 1);
        Timing t = time_op([&] { Tensor y = c.fn(x); }, [&] { synchronize(device); }, opts);
        fill_timing(t, &r);
        medians.push_back(t.median_ms);
      } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
    }
    log_result(r);
    std::fprintf(stderr, "  (%s)\n", r.op.c_str());
    results->push_back(std::move(r));
  }
  if (medians.size() == 2) {
    Result& fused = (*results)[results->size() - 2];
    fused.extra.emplace_back("speedup_vs_generic", medians[1] / medians[0]);
  }
}

}  // namespace

void run_sparsify(const Config& config, std::vector<Result>* results) {
  const int64_t numel = config.numel > 0 ? config.numel : kElementwiseNumel;
  const SparsifyContext ctx{1, 2, 3, 0};
  OutputFormat dense;
  struct Case {
    std::string op;
    double sparsity;
    double bytes_per_element;  // read + write
    std::function<void(const Tensor&)> fn;
  };
  auto threshold = std::make_shared<ThresholdSparsifier>(0.5);
  auto random = std::make_shared<RandomFractionSparsifier>(0.5, true);
  auto magnitude = std::make_shared<MagnitudeFractionSparsifier>(0.9);
  auto nm = std::make_shared<NmSparsifier>(2, 4);
  const std::vector<Case> cases = {
      {"copy", kNaN, 8, [](const Tensor& x) { Tensor y = x.clone(); }},
      {"threshold", 0.5, 8, [&](const Tensor& x) { Tensor y = threshold->apply(x, dense, ctx); }},
      {"threshold_mask", 0.5, 5, [&](const Tensor& x) { Tensor y = threshold->keep_mask(x, ctx); }},
      {"random", 0.5, 8, [&](const Tensor& x) { Tensor y = random->apply(x, dense, ctx); }},
      {"random_mask", 0.5, 5, [&](const Tensor& x) { Tensor y = random->keep_mask(x, ctx); }},
      {"magnitude", 0.9, 8, [&](const Tensor& x) { Tensor y = magnitude->apply(x, dense, ctx); }},
      {"nm", 0.5, 8, [&](const Tensor& x) { Tensor y = nm->apply(x, dense, ctx); }},
  };
  for (const DeviceCase& dc : devices_to_run(config)) {
    TimingOptions opts = timing_options(config);
    if (!dc.cuda) {
      if (!config.reps_given) opts.reps = kCpuSparseReps;
      if (!config.warmup_given) opts.warmup = kCpuSparseWarmup;
    }
    const std::string skip = dc.cuda ? cuda_skip_reason() : "";
    const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
    Tensor x;
    double copy_gbps = kNaN;
    for (const Case& c : cases) {
      Result r;
      r.suite = "sparsify";
      r.op = c.op;
      r.device = dc.label;
      r.dtype = "f32";
      r.shape = {numel};
      r.format = "dense";
      r.sparsity = c.sparsity;
      r.bytes = c.bytes_per_element * static_cast<double>(numel);
      describe_device(dc.cuda, DType::kF32, "gbps", &r);
      r.peak = copy_gbps;
      r.peak_source = std::isfinite(copy_gbps) ? "measured: op copy of the same tensor on this device" : "";
      if (!skip.empty()) {
        r.status = skip;
      } else {
        try {
          if (!x.defined()) x = sub(random_input({numel}, DType::kF32, device), 0.5);
          Timing t = time_op([&] { c.fn(x); }, [&] { synchronize(device); }, opts);
          fill_timing(t, &r);
          if (c.op == "copy") copy_gbps = r.gbps();
        } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
      }
      log_result(r);  // its line names no op: say which
      std::fprintf(stderr, "  (%s)\n", r.op.c_str());
      results->push_back(std::move(r));
    }
    run_relu_to_csr(config, dc, opts, skip, copy_gbps, results);
  }
}

}  // namespace coppice::bench
