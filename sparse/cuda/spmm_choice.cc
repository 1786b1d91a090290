#include "sparse/cuda/spmm_choice.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sparse/csr.h"
#include "sparse/cuda/csr_row_order.h"
#include "sparse/cuda/csr_spmm.h"
#include "sparse/cuda/kernel_timing.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"
#include "tensor/runtime_options.h"

namespace coppice::sparse_cuda {
namespace {

// The own kernels' view of the operands (y may be null: only the shape and
// x's alignment are looked at).
struct Operands {
  Tensor values, x;
  CsrSpmmArgs args;
};

Operands operands(const Tensor& csr, const Tensor& x_in, std::string_view op) {
  const CompressedImpl& c = csr_impl(csr, op);
  COPPICE_CHECK(csr.device().is_cuda() && x_in.device() == csr.device(), op,
                ": CSR SpMM needs both operands on one CUDA device, got ", csr.device().to_string(), " and ",
                x_in.device().to_string());
  COPPICE_CHECK(x_in.dim() == 2 && x_in.size(0) == csr.size(1), op, ": inner dimensions differ: sparse ",
                shape_to_string(csr.shape()), " and dense ", shape_to_string(x_in.shape()));
  COPPICE_CHECK(x_in.dtype() == csr.dtype(), op, ": operands must share one dtype, got ", dtype_name(csr.dtype()),
                " and ", dtype_name(x_in.dtype()));
  COPPICE_CHECK(csr.size(0) <= INT_MAX && csr.size(1) <= INT_MAX, op, ": shape ", shape_to_string(csr.shape()),
                " exceeds the 32-bit index limit");
  Operands o;
  o.values = c.values().contiguous();
  o.x = x_in.contiguous();
  o.args.crow = c.pointers().data<int32_t>();
  o.args.col = c.indices().data<int32_t>();
  o.args.values = o.values.data_ptr();
  o.args.rows = csr.size(0);
  o.args.cols = csr.size(1);
  o.args.n = o.x.size(1);
  o.args.x = o.x.data_ptr();
  o.args.dtype = csr.dtype();
  return o;
}

// Whether kTiled can run, judged before y exists (y comes from the caching
// allocator, whose blocks are aligned far beyond 16 bytes).
bool tiled_possible(const CsrSpmmArgs& a) {
  CsrSpmmArgs probe = a;
  probe.y = const_cast<void*>(a.x);
  return csr_tiled_supported(probe);
}

// What the last product on this thread ran (last_csr_spmm_impl).
thread_local CsrSpmmImpl last_impl = CsrSpmmImpl::kCusparse;

// CsrSpmmMode::kOwn, unmeasured: kTiled where it can run, has at least
// two blocks per SM and a density of at least 1/16, else kRows. (H100, 4096^2
// times 4096^2 f32: kTiled won at 90 % and tied at 50 %, kRows won at 95 and
// 99 %, where staging every chunk of X costs more than the ~kTileM * density
// rows that read it save; csr_spmm.cu. Auto measures instead.)
CsrSpmmImpl own_pick(const CsrSpmmArgs& a, int64_t nnz, int device) {
  const bool dense_enough = nnz * 16 >= a.rows * a.cols;
  const bool fills = csr_tiled_blocks(a) >= 2 * static_cast<int64_t>(cuda::sm_count(device, "csr_spmm"));
  return tiled_possible(a) && dense_enough && fills ? CsrSpmmImpl::kTiled : CsrSpmmImpl::kRows;
}

Tensor run_own(const Tensor& csr, const Tensor& x, CsrSpmmImpl impl, std::string_view op) {
  Operands o = operands(csr, x, op);
  const CsrSpmmArgs& a = o.args;
  const TensorOptions options = o.x.options();
  last_impl = impl;
  if (a.rows == 0 || a.n == 0) return Tensor::empty({a.rows, a.n}, options);
  if (a.cols == 0 || nnz(csr) == 0) return zeros({a.rows, a.n}, options);
  Tensor y = Tensor::empty({a.rows, a.n}, options);
  const Tensor order = csr_row_order(csr, op);
  o.args.y = y.data_ptr();
  o.args.row_order = order.data<int32_t>();
  const bool tiled = impl == CsrSpmmImpl::kTiled && csr_tiled_supported(o.args);
  const int device = csr.device().index;
  cuda::DeviceGuard guard(device);
  csr_spmm(tiled ? CsrSpmmKernel::kTiled : CsrSpmmKernel::kRows, o.args, cuda::current_stream(device));
  last_impl = tiled ? CsrSpmmImpl::kTiled : CsrSpmmImpl::kRows;
  return y;
}

struct Choices {
  std::mutex mutex;
  std::map<std::string, CsrSpmmImpl> chosen;
  CsrSpmmChoiceStats stats;
};

Choices& choices() {
  static Choices* c = new Choices();  // never destroyed: kernels may run during exit
  return *c;
}

std::string choice_key(const CsrSpmmArgs& a, int64_t nnz, int device) {
  const int bucket = static_cast<int>(std::floor(4.0 * std::log2(static_cast<double>(nnz))));
  return str_cat("dev", device, "|", a.rows, "x", a.cols, "|n", a.n, "|", dtype_name(a.dtype), "|nnz~2^", bucket, "/4|",
                 tiled_possible(a) ? "vec" : "scalar");
}

// Measures every candidate on the real operands, caches the fastest under
// `key` and returns its result.
Tensor measure(const std::string& key, const Tensor& csr, const Tensor& x, const CsrSpmmArgs& a, int device,
               std::string_view op, const CusparseSpmm& cusparse) {
  std::vector<CsrSpmmImpl> candidates = {CsrSpmmImpl::kCusparse, CsrSpmmImpl::kRows};
  if (tiled_possible(a)) candidates.push_back(CsrSpmmImpl::kTiled);
  cuda::DeviceGuard guard(device);
  CsrSpmmImpl best = CsrSpmmImpl::kCusparse;
  double best_ms = 0.0;
  Tensor best_out;
  std::string report;
  for (CsrSpmmImpl impl : candidates) {
    Tensor out;
    const double ms =
        time_on_device_ms([&] { return impl == CsrSpmmImpl::kCusparse ? cusparse(csr, x) : run_own(csr, x, impl, op); },
                          device, out, "csr_spmm");
    report += str_cat(" ", csr_spmm_impl_name(impl), " ", ms, " ms");
    if (!best_out.defined() || ms < best_ms) best = impl, best_ms = ms, best_out = out;
  }
  if (runtime_options().csr_spmm_log) {
    std::fprintf(stderr, "[csr_spmm] %s:%s -> %s\n", key.c_str(), report.c_str(),
                 std::string(csr_spmm_impl_name(best)).c_str());
  }
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.chosen[key] = best;
  ++c.stats.measured;
  last_impl = best;  // the measured runs left their own marks
  return best_out;
}

Tensor run_impl(CsrSpmmImpl impl, const Tensor& csr, const Tensor& x, std::string_view op,
                const CusparseSpmm& cusparse) {
  if (impl != CsrSpmmImpl::kCusparse) return run_own(csr, x, impl, op);  // records what it ran
  last_impl = impl;
  return cusparse(csr, x);
}

}  // namespace

std::string_view csr_spmm_impl_name(CsrSpmmImpl impl) {
  switch (impl) {
    case CsrSpmmImpl::kCusparse: return "cusparse";
    case CsrSpmmImpl::kTiled: return "tiled";
    case CsrSpmmImpl::kRows: return "rows";
  }
  return "?";
}

Tensor own_csr_spmm(const Tensor& csr, const Tensor& x, CsrSpmmImpl impl, std::string_view op) {
  COPPICE_CHECK(impl != CsrSpmmImpl::kCusparse, op, ": internal: own_csr_spmm asked for cuSPARSE");
  return run_own(csr, x, impl, op);
}

Tensor csr_spmm_chosen(const Tensor& csr, const Tensor& x, std::string_view op, const CusparseSpmm& cusparse) {
  const CsrSpmmMode mode = runtime_options().csr_spmm;
  switch (mode) {
    case CsrSpmmMode::kCusparse: return run_impl(CsrSpmmImpl::kCusparse, csr, x, op, cusparse);
    case CsrSpmmMode::kTiled: return run_impl(CsrSpmmImpl::kTiled, csr, x, op, cusparse);
    case CsrSpmmMode::kRows: return run_impl(CsrSpmmImpl::kRows, csr, x, op, cusparse);
    case CsrSpmmMode::kOwn:
    case CsrSpmmMode::kAuto: break;
  }
  const Operands o = operands(csr, x, op);
  const int64_t entries = nnz(csr);
  const int device = csr.device().index;
  if (mode == CsrSpmmMode::kOwn) {
    const bool empty = o.args.rows == 0 || o.args.n == 0 || o.args.cols == 0 || entries == 0;
    return run_impl(empty ? CsrSpmmImpl::kRows : own_pick(o.args, entries, device), csr, o.x, op, cusparse);
  }
  if (entries * o.args.n < kMinMeasuredWork || o.args.rows == 0) {
    return run_impl(CsrSpmmImpl::kCusparse, csr, o.x, op, cusparse);
  }
  const std::string key = choice_key(o.args, entries, device);
  std::optional<CsrSpmmImpl> cached;
  {
    Choices& c = choices();
    std::lock_guard<std::mutex> lock(c.mutex);
    const auto it = c.chosen.find(key);
    if (it != c.chosen.end()) {
      ++c.stats.reused;
      cached = it->second;
    }
  }
  if (cached.has_value()) return run_impl(*cached, csr, o.x, op, cusparse);
  // Measured outside the lock (it synchronizes the device); two threads that
  // meet a new key at once both measure, and the later one's choice stays.
  return measure(key, csr, o.x, o.args, device, op, cusparse);
}

CsrSpmmChoiceStats csr_spmm_choice_stats() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  CsrSpmmChoiceStats s = c.stats;
  s.size = static_cast<int64_t>(c.chosen.size());
  return s;
}

void clear_csr_spmm_choices() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.chosen.clear();
  c.stats = {};
}

CsrSpmmImpl last_csr_spmm_impl() { return last_impl; }

}  // namespace coppice::sparse_cuda
