#include "sparse/cuda/spmm_choice.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "sparse/csr.h"
#include "sparse/cuda/csr_row_order.h"
#include "sparse/cuda/csr_spmm.h"
#include "sparse/cuda/kernel_timing.h"
#include "sparse/route_choices.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

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

// The pin csr_spmm=own, unmeasured: kTiled where it can run, has at least
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

std::string choice_key(const CsrSpmmArgs& a, int64_t nnz, int device) {
  const int bucket = static_cast<int>(std::floor(4.0 * std::log2(static_cast<double>(nnz))));
  return str_cat(device_model_key(device), "|", a.rows, "x", a.cols, "|n", a.n, "|", dtype_name(a.dtype), "|nnz~2^",
                 bucket, "/4|", tiled_possible(a) ? "vec" : "scalar");
}

Tensor run_impl(CsrSpmmImpl impl, const Tensor& csr, const Tensor& x, std::string_view op,
                const CusparseSpmm& cusparse) {
  if (impl != CsrSpmmImpl::kCusparse) return run_own(csr, x, impl, op);  // records what it ran
  last_impl = impl;
  return cusparse(csr, x);
}

// The decision csr_spmm (sparse/route_choices.h) among the kernels that can
// run the product: recorded for the key, or measured now on the real operands.
Tensor measured_choice(const Tensor& csr, const Tensor& x, const CsrSpmmArgs& a, int64_t entries, int device,
                       std::string_view op, const CusparseSpmm& cusparse) {
  std::vector<CsrSpmmImpl> impls = {CsrSpmmImpl::kCusparse, CsrSpmmImpl::kRows};
  if (tiled_possible(a)) impls.push_back(CsrSpmmImpl::kTiled);
  std::vector<TimedRoute> routes;
  for (CsrSpmmImpl impl : impls) {
    routes.push_back({csr_spmm_impl_name(impl), [&, impl] { return run_impl(impl, csr, x, op, cusparse); }});
  }
  Tensor out;
  const size_t winner = chosen_route("csr_spmm", choice_key(a, entries, device), device, "csr_spmm", routes,
                                     /*rounds=*/1, &out);
  if (!out.defined()) return run_impl(impls[winner], csr, x, op, cusparse);
  last_impl = impls[winner];  // the measured runs left their own marks
  return out;
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
  const std::optional<std::string> pin = route_pin("csr_spmm");
  if (pin == "cusparse") return run_impl(CsrSpmmImpl::kCusparse, csr, x, op, cusparse);
  if (pin == "tiled") return run_impl(CsrSpmmImpl::kTiled, csr, x, op, cusparse);
  if (pin == "rows") return run_impl(CsrSpmmImpl::kRows, csr, x, op, cusparse);
  const Operands o = operands(csr, x, op);
  const int64_t entries = nnz(csr);
  const int device = csr.device().index;
  if (pin == "own") {
    const bool empty = o.args.rows == 0 || o.args.n == 0 || o.args.cols == 0 || entries == 0;
    return run_impl(empty ? CsrSpmmImpl::kRows : own_pick(o.args, entries, device), csr, o.x, op, cusparse);
  }
  if (entries * o.args.n < kMinMeasuredWork || o.args.rows == 0) {
    return run_impl(CsrSpmmImpl::kCusparse, csr, o.x, op, cusparse);
  }
  return measured_choice(csr, o.x, o.args, entries, device, op, cusparse);
}

CsrSpmmImpl last_csr_spmm_impl() { return last_impl; }

}  // namespace coppice::sparse_cuda
