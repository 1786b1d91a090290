// SDDMM on CUDA through cuSPARSE: "sddmm"(a [m, k], b [k, n], pattern
// [m, n]) = (a @ b) at the pattern's stored positions, as with_values(pattern,
// ...): the pattern's format and version (sparse/ops.h), for every format:
//   bsr          16/32-wide blocks in f32/bf16/f16: the tiled kernel of
//                bsr_products.h (a block-sized GEMM per stored block);
//   csr          cuSPARSE directly;
//   csc          the CSR of the transpose over the same arrays: (a b)^T =
//                b^T a^T sampled there gives the values in CSC order as is;
//   masked       computed densely (where the mask holds), by design;
//   (the rest)   through csr_view.h: sampled at the pattern as CSR, then the
//                values put back in the format's slot order (an uncoalesced
//                COO's duplicates each get the product; padding gets 0).
// Above a density (dense_route_min_density, measured), any format takes the
// dense route instead: cuBLAS computes a @ b whole and the values are
// gathered at the stored positions, which is several times faster than
// cuSPARSE's SDDMM there, at the cost of an [m, n] temporary (capped).
//
// cusparseSDDMM computes C = alpha (op(A) op(B)) o spy(C) + beta C with A, B
// dense row-major and C CSR; C's values start at zero (beta = 0 would not
// read them, but a zero start keeps garbage out whatever cuSPARSE does).
// f32 and f64 compute in their own type; bf16/f16 operands are converted to
// f32 (cuSPARSE's SDDMM has no bf16 input on every version) and the values
// rounded once, as on the CPU. A transposed view b (x.t() in the gradient of
// SpMM) is made contiguous first. Descriptors and workspace are cached per
// pattern version (cusparse_context.h).
#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "sparse/csr.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/cuda/csr_view.h"
#include "sparse/cuda/cusparse_internal.h"
#include "sparse/cuda/kernel_timing.h"
#include "sparse/masked.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"
#include "tensor/precision.h"

namespace coppice::sparse_cuda {
namespace {

constexpr std::string_view kOp = "sddmm";

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

// SDDMM at a CSR pattern: the values, in the pattern's order and dtype.
Tensor csr_sddmm(const Tensor& a_in, const Tensor& b_in, const Tensor& pattern) {
  constexpr std::string_view op = kOp;
  const DType dtype = pattern.dtype();
  const int64_t m = a_in.size(0), k = a_in.size(1), n = b_in.size(1);
  const CompressedImpl& c = csr_impl(pattern, op);
  const int64_t nz = c.nnz();
  const DType compute_dtype = (dtype == DType::kBF16 || dtype == DType::kF16) ? DType::kF32 : dtype;
  const TensorOptions opts(compute_dtype, pattern.device());
  Tensor out = zeros({nz}, opts);
  if (nz == 0 || k == 0) return out.to(dtype);
  const Tensor a = a_in.to(compute_dtype).contiguous(), b = b_in.to(compute_dtype).contiguous();
  const int device = pattern.device().index;
  const cudaDataType_t type = cuda_type(compute_dtype);
  const cusparseOperation_t no_t = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const cusparseSDDMMAlg_t alg = CUSPARSE_SDDMM_ALG_DEFAULT;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = type == CUDA_R_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = type == CUDA_R_64F ? static_cast<const void*>(&beta_d) : &beta_f;
  const std::string key = str_cat("sddmm|csr|v", pattern_version(pattern), "|", m, "x", n, "|nnz", nz, "|k", k, "|",
                                  dtype_name(compute_dtype), "|dev", device);

  cuda::DeviceGuard guard(device);
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cusparseHandle_t handle = handle_for(device);
  Plan& plan = find_or_build(key, device, [&](Plan& p) {
    check_cusparse(cusparseCreateDnMat(&p.dense[0], m, k, k, a.data_ptr(), type, CUSPARSE_ORDER_ROW), op,
                   "cusparseCreateDnMat(A)");
    check_cusparse(cusparseCreateDnMat(&p.dense[1], k, n, n, b.data_ptr(), type, CUSPARSE_ORDER_ROW), op,
                   "cusparseCreateDnMat(B)");
    check_cusparse(cusparseCreateCsr(&p.sparse, m, n, nz, c.pointers().data_ptr(), c.indices().data_ptr(),
                                     out.data_ptr(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                                     type),
                   op, "cusparseCreateCsr");
    size_t bytes = 0;
    check_cusparse(cusparseSDDMM_bufferSize(handle, no_t, no_t, alpha, p.dense[0], p.dense[1], beta, p.sparse, type,
                                            alg, &bytes),
                   op, "cusparseSDDMM_bufferSize");
    p.allocate_workspace(bytes);
  });
  check_cusparse(cusparseDnMatSetValues(plan.dense[0], a.data_ptr()), op, "cusparseDnMatSetValues(A)");
  check_cusparse(cusparseDnMatSetValues(plan.dense[1], b.data_ptr()), op, "cusparseDnMatSetValues(B)");
  check_cusparse(cusparseCsrSetPointers(plan.sparse, c.pointers().data_ptr(), c.indices().data_ptr(), out.data_ptr()),
                 op, "cusparseCsrSetPointers");
  check_cusparse(cusparseSDDMM(handle, no_t, no_t, alpha, plan.dense[0], plan.dense[1], beta, plan.sparse, type, alg,
                               plan.workspace),
                 op, "cusparseSDDMM");
  return out.to(dtype);
}

// The density from which the dense route is taken. Measured on an H100
// (docs/benchmarks.md, sddmm suite, 4096^3 f32): cuSPARSE's SDDMM took 13.2
// ms at 10% density and 4.5 ms at 1%, cuBLAS's whole a @ b 2.7 ms, so the
// dense route wins down to below 1% density; on LeNet-sized shapes (below
// 0.1 ms) launch overheads decide and the two are close. COPPICE_SDDMM_DENSE_DENSITY
// overrides it (read on every call, so a benchmark can compare both routes;
// above 1 turns the dense route off).
double dense_route_min_density() {
  const char* env = std::getenv("COPPICE_SDDMM_DENSE_DENSITY");
  return env != nullptr ? std::atof(env) : 0.005;
}

// The dense route's temporary a @ b is capped, so that a huge sparse
// pattern never allocates its dense size.
constexpr int64_t kDenseRouteMaxBytes = int64_t{1} << 30;

bool take_dense_route(const Tensor& pattern) {
  const int64_t bytes = pattern.numel() * static_cast<int64_t>(dtype_size(pattern.dtype()));
  return bytes <= kDenseRouteMaxBytes && nnz(pattern) > 0 && density(pattern) >= dense_route_min_density();
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
  const Tensor sampled = index_select(product, 0, where(stored, pos, zeros_like(pos)));
  return where(stored, sampled, zeros_like(sampled)).reshape(vals.shape());
}

// A BSR pattern the tiles take: their time grows with the stored blocks, the
// dense route's is one GEMM whatever the density, and which wins depends on
// the density, the shape and the math (H100, 4096^3 at 90 %: tiles 1.17 ms
// against 2.8 in f32, 0.55 against 0.46 in TF32). Where the dense route may
// run, both are timed once per key (shape, blocks, dtype, TF32, stored blocks
// in quarter octaves) on the real operands and the faster is kept.
Tensor bsr_values(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  if (!take_dense_route(pattern)) return bsr_tiled_sddmm_values(a, b, pattern);
  static std::mutex mu;
  static std::map<std::string, bool> tiles_won;
  const int device = pattern.device().index;
  const int64_t stored = nnz(pattern);
  const Shape& blocks = values(pattern).shape();  // [nblocks, bh, bw]
  const long octaves = stored > 0 ? std::lround(4 * std::log2(static_cast<double>(stored))) : 0;
  const std::string key = str_cat(device, "|", a.size(0), "x", a.size(1), "x", b.size(1), "|", blocks[1], "x",
                                  blocks[2], "|q", octaves, "|", dtype_name(pattern.dtype()), allow_tf32() ? "|tf32" : "");
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = tiles_won.find(key);
    if (it != tiles_won.end()) {
      return it->second ? bsr_tiled_sddmm_values(a, b, pattern) : dense_route_values(a, b, pattern);
    }
  }
  Tensor tiled, dense;
  const double tiled_ms = time_on_device_ms([&] { return bsr_tiled_sddmm_values(a, b, pattern); }, device, tiled, kOp);
  const double dense_ms = time_on_device_ms([&] { return dense_route_values(a, b, pattern); }, device, dense, kOp);
  std::lock_guard<std::mutex> lock(mu);
  tiles_won[key] = tiled_ms <= dense_ms;
  return tiled_ms <= dense_ms ? tiled : dense;
}

std::vector<Tensor> sddmm(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in);
  const Tensor &a = in[0], &b = in[1], &pattern = in[2];
  if (bsr_tiles_apply(pattern)) return {with_values(pattern, bsr_values(a, b, pattern))};
  if (pattern.layout() != Layout::kMasked && take_dense_route(pattern)) {
    return {with_values(pattern, dense_route_values(a, b, pattern))};
  }
  switch (pattern.layout()) {
    case Layout::kCsr:
      return {with_values(pattern, csr_sddmm(a, b, pattern))};
    case Layout::kCsc:
      return {with_values(pattern, csr_sddmm(b.t(), a.t(), transpose_compressed(pattern)))};
    case Layout::kMasked: {
      const Tensor product = matmul(a, b);
      return {with_values(pattern, where(masked_impl(pattern, kOp).mask(), product, zeros_like(product)))};
    }
    default: {
      const Tensor view = csr_view(pattern, kOp);
      return {with_values(pattern, values_from_csr_order(pattern, csr_sddmm(a, b, view), kOp))};
    }
  }
}

const bool kRegistered = [] {
  for (const char* f : {"csr", "coo", "csc", "bsr", "blocked_ell", "nm", "masked"}) {
    Dispatcher::instance().register_kernel("sddmm", DeviceType::kCuda, {"dense", "dense", f}, sddmm);
  }
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
