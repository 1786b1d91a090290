// SDDMM on CUDA: "sddmm"(a [m, k], b [k, n], pattern [m, n]) = (a @ b) at
// the pattern's stored positions, as with_values(pattern, ...): the pattern's
// format and version (sparse/ops.h), for every format.
//
// The SDDMM planner runs the first route of kRoutes that takes the problem
// (kernel_routes.h):
//   bsr_tiles     BSR that a kernel of bsr_products.h takes (square
//                 16/32/64 blocks in 16 bits or TF32: mma.sync, runs of
//                 stored blocks per thread block; 16/32-wide blocks in
//                 f32/bf16/f16: the WMMA / FMA tiles, a block-sized GEMM per
//                 stored block; bsr_kernel below picks), or the dense route
//                 where that may run and measured faster (bsr_values below;
//                 the decision bsr_sddmm of sparse/route_choices.h);
//   nm_dense_gather  n:m at the dense route's densities: the same dense
//                 product, gathered by the group indices in one kernel
//                 (nm_products.h: sparse tensor cores cannot write a sparse
//                 output, so a linear layer's dW stays dense work);
//   dense_gemm    any format but masked at a density of at least 0.005
//                 (measured; the pin sddmm_dense=on takes it at every
//                 density, off never: sparse/route_choices.h):
//                 cuBLAS computes a @ b whole and the values are gathered at
//                 the stored positions, which is several times faster than
//                 cuSPARSE's SDDMM there, at the cost of an [m, n] temporary
//                 (capped);
//   cusparse_csr  csr: cuSPARSE directly (cusparse_sddmm.h);
//   cusparse_csc  csc: the CSR of the transpose over the same arrays: (a b)^T
//                 = b^T a^T sampled there gives the values in CSC order as is;
//   masked_dense  masked: computed densely (where the mask holds), by design;
//   csr_view      the rest, through csr_view.h: sampled at the pattern as CSR,
//                 then the values put back in the format's slot order (an
//                 uncoalesced COO's duplicates each get the product; padding
//                 gets 0).
#include <climits>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/bsr.h"
#include "sparse/csr.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/cuda/csr_view.h"
#include "sparse/cuda/cusparse_sddmm.h"
#include "sparse/cuda/kernel_routes.h"
#include "sparse/cuda/kernel_timing.h"
#include "sparse/cuda/nm_products.h"
#include "sparse/formats.h"
#include "sparse/masked.h"
#include "sparse/route_choices.h"
#include "tensor/dispatcher.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"
#include "tensor/precision.h"

namespace coppice::sparse_cuda {
namespace {

constexpr std::string_view kOp = op::kSddmm;

void check_operands(const std::vector<Tensor>& in) {
  constexpr std::string_view op = kOp;
  COPPICE_CHECK(in.size() == 3, op, ": expected 3 inputs (a, b, pattern), got ", in.size());
  const Tensor& pattern = in[2];
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.dim() == 2, op, ": operands must be 2-D, got shape ", shape_to_string(t.shape()));
    COPPICE_CHECK(t.device().is_cuda() && t.device() == pattern.device(), op,
                  ": CUDA kernel needs every operand on one CUDA device, got ", t.device().to_string(), " and ",
                  pattern.device().to_string());
    COPPICE_CHECK(t.dtype() == pattern.dtype(), op, ": operands must share one dtype, got ", dtype_name(t.dtype()),
                  " and ", dtype_name(pattern.dtype()));
  }
  const DType dtype = pattern.dtype();
  COPPICE_CHECK(is_floating(dtype), op, ": ", dtype_name(dtype), " operands are not supported (f32, f64, bf16, f16)");
  const int64_t m = in[0].size(0), k = in[0].size(1), n = in[1].size(1);
  COPPICE_CHECK(in[1].size(0) == k, op, ": inner dimensions differ: a is ", shape_to_string(in[0].shape()), ", b is ",
                shape_to_string(in[1].shape()));
  COPPICE_CHECK(pattern.size(0) == m && pattern.size(1) == n, op, ": pattern has shape ",
                shape_to_string(pattern.shape()), ", expected [", m, ", ", n, "] (the shape of a @ b)");
  for (int64_t v : {m, k, n, nnz(pattern)}) {
    COPPICE_CHECK(v <= INT_MAX, op, ": size ", v, " exceeds cuSPARSE's 32-bit index limit");
  }
}

// The density from which the dense route is taken. Measured on an H100
// (docs/benchmarks.md, sddmm suite, 4096^3 f32): cuSPARSE's SDDMM took
// 13.2 ms at 10% density and 4.5 ms at 1%, cuBLAS's whole a @ b 2.7 ms, so
// the dense route wins down to below 1% density; on LeNet-sized shapes (below
// 0.1 ms) launch overheads decide and the two are close.
constexpr double kDenseRouteMinDensity = 0.005;

// The dense route's temporary a @ b is capped, so that a huge sparse
// pattern never allocates its dense size.
constexpr int64_t kDenseRouteMaxBytes = int64_t{1} << 30;

// Whether the dense route may run (the pin sddmm_dense=on|off overrides the
// density, never the cap).
bool take_dense_route(const Tensor& pattern) {
  const std::optional<std::string> pin = route_pin("sddmm_dense");
  if (pin == "off") return false;
  const int64_t bytes = pattern.numel() * static_cast<int64_t>(dtype_size(pattern.dtype()));
  return bytes <= kDenseRouteMaxBytes && nnz(pattern) > 0 && (pin == "on" || density(pattern) >= kDenseRouteMinDensity);
}

// (a @ b) by cuBLAS, gathered at every slot's position (0 where none).
Tensor dense_route_values(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  Tensor product;
  {
    ProfileScope scope("sddmm dense route: a @ b", a.device());
    product = matmul(a, b).reshape({pattern.numel()});
  }
  const Tensor vals = values(pattern);
  ProfileScope scope("sddmm dense route: positions and gather", a.device());
  const Tensor pos = device_positions(pattern, kOp);
  const Tensor stored = ge(pos, 0.0);
  const Tensor sampled = index_select_trusted(product, 0, where(stored, pos, zeros_like(pos)));
  return where(stored, sampled, zeros_like(sampled)).reshape(vals.shape());
}

// The BSR kernel for the pattern: mma.sync where it takes the pattern, but
// for 16x16 blocks in rows of 20 or more, where the WMMA tiles (one thread
// block per stored block) were faster (H100 bf16 4096^3 at 90 %, 25.6 blocks
// per row: 0.27 ms against 0.32; at 95 %, 12.8 per row, 0.30 against 0.17);
// the tiles where they take it; the pins as spmm.cc's (bsr_tiles=tiles:
// the tiles wherever they take it; off: neither). nullopt: neither runs it.
std::optional<BsrKernel> bsr_kernel(const Tensor& pattern) {
  const std::optional<std::string> pin = route_pin("bsr_tiles");
  if (pin == "off") return std::nullopt;
  const bool tiles = bsr_kernel_takes(BsrKernel::kTiles, pattern);
  if (pin != "tiles" && bsr_kernel_takes(BsrKernel::kMmaSync, pattern)) {
    const BsrImpl& b = bsr_impl(pattern, kOp);
    const bool dense_rows_of_16 = b.block_rows() == 16 && b.nblocks() >= 20 * b.block_row_count();
    if (!(dense_rows_of_16 && tiles)) return BsrKernel::kMmaSync;
  }
  if (tiles) return BsrKernel::kTiles;
  return std::nullopt;
}

// A BSR pattern the tiles take: their time grows with the stored blocks, the
// dense route's is one GEMM whatever the density, and which wins depends on
// the density, the shape and the math (H100, 4096^3 at 90 %: tiles 1.17 ms
// against 2.8 in f32, 0.55 against 0.46 in TF32). Where the dense route may
// run, `decision` (sparse/route_choices.h) times both once per key (device
// model, shape, blocks, dtype, TF32, stored blocks in quarter octaves) on the
// real operands and keeps the faster, unless `pin` says which. `took_dense`
// (optional) says which route's result came back: where this call measured,
// both routes ran, and anything else a route leaves behind must be taken
// from the one returned.
Tensor tiles_or_dense(std::string_view decision, const std::optional<std::string>& pin, std::string_view op,
                      const Tensor& a, const Tensor& b, const Tensor& pattern, const std::function<Tensor()>& tiles,
                      const std::function<Tensor()>& dense, bool* took_dense = nullptr) {
  const auto took = [&](bool is_dense) {
    if (took_dense != nullptr) *took_dense = is_dense;
  };
  if (!take_dense_route(pattern) || pin == "tiles") {
    took(false);
    return tiles();
  }
  if (pin == "dense") {
    took(true);
    return dense();
  }
  const int device = pattern.device().index;
  const int64_t stored = nnz(pattern);
  const Shape& blocks = values(pattern).shape();  // [nblocks, bh, bw]
  const long octaves = stored > 0 ? std::lround(4 * std::log2(static_cast<double>(stored))) : 0;
  const std::string key =
      str_cat(device_model_key(device), "|", a.size(0), "x", a.size(1), "x", b.size(1), "|", blocks[1], "x", blocks[2],
              "|q", octaves, "|", dtype_name(pattern.dtype()), allow_tf32() ? "|tf32" : "");
  size_t winner = 0;
  Tensor out = run_chosen_route(decision, key, device, op, {{"tiles", tiles}, {"dense", dense}}, 1, &winner);
  took(winner == 1);
  return out;
}

// The SDDMM of a BSR pattern the tiles take: the decision bsr_sddmm.
Tensor bsr_values(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  const BsrKernel kernel = *bsr_kernel(pattern);
  return tiles_or_dense(
      "bsr_sddmm", route_pin("bsr_sddmm"), kOp, a, b, pattern, [&] { return bsr_sddmm_values(kernel, a, b, pattern); },
      [&] { return dense_route_values(a, b, pattern); });
}

// One SDDMM for the planner.
struct SddmmProblem {
  const Tensor& a;
  const Tensor& b;
  const Tensor& pattern;
};

Tensor csr_values(const SddmmProblem& p) { return cusparse_csr_sddmm(p.a, p.b, p.pattern); }

Tensor csc_values(const SddmmProblem& p) {
  return cusparse_csr_sddmm(p.b.t(), p.a.t(), transpose_compressed(p.pattern));
}

Tensor masked_values(const SddmmProblem& p) {
  const Tensor product = matmul(p.a, p.b);
  return where(masked_impl(p.pattern, kOp).mask(), product, zeros_like(product));
}

Tensor csr_view_values(const SddmmProblem& p) {
  const Tensor view = csr_view(p.pattern, kOp);
  return values_from_csr_order(p.pattern, cusparse_csr_sddmm(p.a, p.b, view), kOp);
}

using SddmmRoute = KernelRoute<SddmmProblem>;

// The SDDMM routes, in the order they are tried (the header has the table);
// each launcher returns the values.
const SddmmRoute kRoutes[] = {
    {"bsr_tiles", [](const SddmmProblem& p) { return bsr_kernel(p.pattern).has_value(); },
     [](const SddmmProblem& p) { return bsr_values(p.a, p.b, p.pattern); }},
    {"nm_dense_gather",
     [](const SddmmProblem& p) { return p.pattern.layout() == Layout::kNm && take_dense_route(p.pattern); },
     [](const SddmmProblem& p) { return nm_sddmm_values(p.a, p.b, p.pattern); }},
    {"dense_gemm",
     [](const SddmmProblem& p) { return p.pattern.layout() != Layout::kMasked && take_dense_route(p.pattern); },
     [](const SddmmProblem& p) { return dense_route_values(p.a, p.b, p.pattern); }},
    {"cusparse_csr", [](const SddmmProblem& p) { return p.pattern.layout() == Layout::kCsr; }, csr_values},
    {"cusparse_csc", [](const SddmmProblem& p) { return p.pattern.layout() == Layout::kCsc; }, csc_values},
    {"masked_dense", [](const SddmmProblem& p) { return p.pattern.layout() == Layout::kMasked; }, masked_values},
    {"csr_view", [](const SddmmProblem&) { return true; }, csr_view_values},
};

std::vector<Tensor> sddmm(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in);
  const Tensor& pattern = in[2];
  return {with_values(pattern, run_first_route<SddmmProblem>(kRoutes, SddmmProblem{in[0], in[1], pattern}))};
}

// sddmm_row_sums for BSR: where the BSR kernels take the pattern, the values
// and a's row sums from one kernel (bsr_sddmm_values sums the rows in the
// SDDMM's pass) or the dense route plus a column-sum pass, as the decision
// bsr_sddmm_row_sums chooses (tiles_or_dense: timed apart from bsr_sddmm,
// since summing the rows inside moves the balance; pinned by its own name,
// else by bsr_sddmm's pin). Otherwise the SDDMM's routes and a pass of its
// own.
std::vector<Tensor> sddmm_row_sums(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in);
  const Tensor &a = in[0], &b = in[1], &pattern = in[2];
  const std::optional<BsrKernel> kernel = bsr_kernel(pattern);
  if (!kernel) return {with_values(pattern, run_first_route<SddmmProblem>(kRoutes, {a, b, pattern})), sum(a, {1})};
  std::optional<std::string> pin = route_pin("bsr_sddmm_row_sums");
  if (!pin) pin = route_pin("bsr_sddmm");
  // Each route's sums apart: a call that times the two runs both, and the
  // sums must be those of the route whose values it returns (they had been
  // whichever route ran last: other bits than every later call's).
  Tensor tiles_sums, dense_sums;
  bool took_dense = false;
  const Tensor vals = tiles_or_dense(
      "bsr_sddmm_row_sums", pin, op::kSddmmRowSums, a, b, pattern,
      [&] { return bsr_sddmm_values(*kernel, a, b, pattern, &tiles_sums); },
      [&] {
        Tensor v = dense_route_values(a, b, pattern);
        dense_sums = sum(a, {1});
        return v;
      },
      &took_dense);
  return {with_values(pattern, vals), took_dense ? dense_sums : tiles_sums};
}

// linear_grads for a BSR weight (sparse/ops.h's linear_grads_fused): the
// one-pass kernel of bsr_products.h, {dW, dx, db}, or every output
// undefined where it declines (the caller then forms them apart).
std::vector<Tensor> linear_grads(const std::vector<Tensor>& in, const Attrs& attrs) {
  const Tensor &g = in[0], &x = in[1], &w = in[2];
  const Tensor z = in.size() > 3 ? in[3] : Tensor();
  const BsrLinearGrads grads = bsr_linear_grads(g.contiguous(), x.contiguous(), w, attrs.get_bool("bias", false),
                                                z.defined() ? z.contiguous() : z, gelu_form(attrs));
  if (!grads.dw.defined()) return {Tensor(), Tensor(), Tensor()};
  return {with_values(w, grads.dw), grads.dx, grads.db};
}

const bool kRegistered = [] {
  for (const std::string& f : builtin_sparse_format_names()) {
    Dispatcher::instance().register_kernel(op::kSddmm, DeviceType::kCuda, {"dense", "dense", f}, sddmm);
  }
  Dispatcher::instance().register_kernel(op::kSddmmRowSums, DeviceType::kCuda,
                                         {"dense", "dense", format_name(Layout::kBsr)}, sddmm_row_sums);
  const std::string bsr = format_name(Layout::kBsr);
  Dispatcher::instance().register_kernel(op::kLinearGrads, DeviceType::kCuda, {"dense", "dense", bsr}, linear_grads);
  Dispatcher::instance().register_kernel(op::kLinearGrads, DeviceType::kCuda, {"dense", "dense", bsr, "dense"},
                                         linear_grads);
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
