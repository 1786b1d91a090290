// SpMM on CUDA through cuSPARSE (sparse/ops.h has the table):
//   csr, coo:     "matmul" (fmt, dense), (dense, fmt); "linear" (dense, fmt), (fmt, dense)
//   blocked_ell:  "matmul" (blocked_ell, dense); "linear" (dense, blocked_ell),
//                 (blocked_ell, dense). cuSPARSE's Blocked-ELL SpMM takes no
//                 transposed sparse operand, so matmul (dense, blocked_ell) is
//                 not registered (counted dense fallback); and where cuSPARSE
//                 refuses a Blocked-ELL dtype on this GPU (NOT_SUPPORTED) the
//                 kernel computes densely (to_dense, then the cuBLAS product).
// Other formats (csc, bsr, nm, masked) are not registered here and take the
// dispatcher's counted dense fallback.
//
// cuSPARSE computes C = op(A) @ B with A sparse and B, C dense, in row- or
// column-major order. A row-major [r, c] matrix read column-major is its
// transpose, which gives every direction without materializing a transpose
// of the sparse operand:
//   A @ X       (A [m, k] sparse, X [k, n]):  op(A) = A, B = X, C = Y, all row-major.
//   X @ A       (X [m, k], A [k, n] sparse):  Y^T = A^T X^T: op(A) = A^T, and
//               X, Y read column-major as X^T [k, m], Y^T [n, m].
//   x @ W^T     (linear, W [out, in] sparse): Y^T = W x^T: op(A) = A, x and Y
//               read column-major (no transpose at all, deterministic).
//   S @ w^T     (linear with a sparse input S): w^T made contiguous, then A @ X.
// cuSPARSE warns that a transposed sparse operand may give run-to-run
// differences in the last bits (X @ A only).
//
// Indices are i32 (CSR's own arrays; COO's i64 rows and columns converted
// once per pattern version by coo_indices.cu and kept in the cached plan;
// rows and columns fit in i32, so the narrowing is exact). COO operands are
// coalesced first (as on the CPU: duplicates summed, rows sorted). f32 and
// f64 compute in their own type; bf16/f16 run with CUDA_R_32F compute, and
// where cuSPARSE refuses a half-precision combination (NOT_SUPPORTED) the
// operands are converted to f32 and the result rounded once.
//
// Algorithm: CUSPARSE_SPMM_ALG_DEFAULT, which supports every order and
// transpose used here (CSR_ALG2 is row-major only).
#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "sparse/blocked_ell.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/cuda/coo_indices.h"
#include "sparse/cuda/cusparse_internal.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

int64_t checked_i32(int64_t v, std::string_view op, std::string_view what) {
  COPPICE_CHECK(v <= INT_MAX, op, ": ", what, " = ", v, " exceeds cuSPARSE's 32-bit index limit");
  return v;
}

enum class Kind { kCsr, kCoo, kEll };

const char* kind_name(Kind k) { return k == Kind::kCsr ? "csr" : k == Kind::kCoo ? "coo" : "blocked_ell"; }

// The sparse operand as cuSPARSE reads it. `a` is CSR, coalesced COO or
// Blocked-ELL.
struct SparseOperand {
  Tensor a;  // keeps the parts alive
  Kind kind = Kind::kCsr;
  int64_t rows = 0, cols = 0, nnz = 0;
  uint64_t version = 0;
  Tensor values;
};

SparseOperand sparse_operand(const Tensor& in, std::string_view op) {
  SparseOperand s;
  s.a = in.layout() == Layout::kCoo ? coalesce(in) : in;
  s.kind = s.a.layout() == Layout::kCoo ? Kind::kCoo : s.a.layout() == Layout::kBlockedEll ? Kind::kEll : Kind::kCsr;
  COPPICE_CHECK(s.a.dim() == 2, op, ": sparse operand must be 2-D, got shape ", shape_to_string(s.a.shape()));
  s.rows = checked_i32(s.a.size(0), op, "rows");
  s.cols = checked_i32(s.a.size(1), op, "columns");
  s.nnz = checked_i32(nnz(s.a), op, "nnz");
  s.version = pattern_version(s.a);
  s.values = values(s.a).contiguous();
  return s;
}

// One cuSPARSE SpMM: C = op(A) @ B with B [b_rows, b_cols] and C
// [c_rows, c_cols] dense in `order`, leading dimensions as stored.
struct DenseShape {
  int64_t rows, cols, ld;
};

void run_spmm(const SparseOperand& s, bool trans_a, cusparseOrder_t order, const Tensor& b, DenseShape bs,
              const Tensor& c, DenseShape cs, std::string_view op) {
  const DType dtype = s.values.dtype();
  const int device = c.device().index;
  const cudaDataType_t type = cuda_type(dtype);
  const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
  const cudaDataType_t compute = half ? CUDA_R_32F : type;
  const cusparseOperation_t op_a = trans_a ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  const cusparseOperation_t op_b = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const cusparseSpMMAlg_t alg = CUSPARSE_SPMM_ALG_DEFAULT;
  // Blocked-ELL has no call that re-points its index array, so its key also
  // names the array's address (equal version and address: equal contents).
  const CooImpl* coo = s.kind == Kind::kCoo ? &coo_impl(s.a, op) : nullptr;
  const CompressedImpl* csr = s.kind == Kind::kCsr ? &csr_impl(s.a, op) : nullptr;
  const BlockedEllImpl* ell = s.kind == Kind::kEll ? &blocked_ell_impl(s.a, op) : nullptr;
  const uintptr_t ell_idx = ell != nullptr ? reinterpret_cast<uintptr_t>(ell->ell_col_indices().data_ptr()) : 0;
  const std::string key =
      str_cat("spmm|", kind_name(s.kind), "|v", s.version, "|idx", ell_idx, "|", s.rows, "x", s.cols, "|nnz", s.nnz,
              "|", dtype_name(dtype), "|t", trans_a ? 1 : 0, "|o", static_cast<int>(order), "|b", bs.rows, "x", bs.cols,
              "/", bs.ld, "|c", cs.rows, "x", cs.cols, "/", cs.ld, "|dev", device);
  // alpha and beta in the compute type.
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = compute == CUDA_R_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = compute == CUDA_R_64F ? static_cast<const void*>(&beta_d) : &beta_f;

  cuda::DeviceGuard guard(device);
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cusparseHandle_t handle = handle_for(device);
  // A Blocked-ELL descriptor is remade (host-side only) when the values move,
  // rather than re-pointed: the generic cusparseSpMatSetValues is not
  // documented for Blocked-ELL on every version.
  auto make_ell = [&](Plan& p) {
    check_cusparse(cusparseCreateBlockedEll(&p.sparse, s.rows, s.cols, ell->block_size(),
                                            ell->ell_cols() * ell->block_size(), ell->ell_col_indices().data_ptr(),
                                            s.values.data_ptr(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
                   op, "cusparseCreateBlockedEll");
    p.sparse_values = s.values.data_ptr();
  };
  Plan& plan = find_or_build(key, device, [&](Plan& p) {
    if (ell != nullptr) {
      make_ell(p);
    } else if (coo != nullptr) {
      const Tensor& idx = coo->indices();  // i64 [2, nnz]
      const TensorOptions i32(DType::kI32, s.a.device());
      p.keep = {Tensor::empty({s.nnz}, i32), Tensor::empty({s.nnz}, i32)};
      coo_indices_to_i32(idx.contiguous().data<int64_t>(), s.nnz, p.keep[0].data<int32_t>(),
                         p.keep[1].data<int32_t>(), cuda::current_stream(device));
      cuda::check_launch(op);
      check_cusparse(cusparseCreateCoo(&p.sparse, s.rows, s.cols, s.nnz, p.keep[0].data_ptr(), p.keep[1].data_ptr(),
                                       s.values.data_ptr(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
                     op, "cusparseCreateCoo");
    } else {
      check_cusparse(cusparseCreateCsr(&p.sparse, s.rows, s.cols, s.nnz, csr->pointers().data_ptr(),
                                       csr->indices().data_ptr(), s.values.data_ptr(), CUSPARSE_INDEX_32I,
                                       CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
                     op, "cusparseCreateCsr");
    }
    check_cusparse(cusparseCreateDnMat(&p.dense[0], bs.rows, bs.cols, bs.ld, b.data_ptr(), type, order), op,
                   "cusparseCreateDnMat(B)");
    check_cusparse(cusparseCreateDnMat(&p.dense[1], cs.rows, cs.cols, cs.ld, c.data_ptr(), type, order), op,
                   "cusparseCreateDnMat(C)");
    size_t bytes = 0;
    check_cusparse(cusparseSpMM_bufferSize(handle, op_a, op_b, alpha, p.sparse, p.dense[0], beta, p.dense[1],
                                           compute, alg, &bytes),
                   op, "cusparseSpMM_bufferSize");
    p.allocate_workspace(bytes);
  });
  if (ell != nullptr) {
    if (plan.sparse_values != s.values.data_ptr()) {
      cusparseDestroySpMat(plan.sparse);
      plan.sparse = nullptr;
      plan.sparse_values = nullptr;  // remade below; a throw leaves it to be remade next time
      make_ell(plan);
    }
  } else if (coo != nullptr) {
    check_cusparse(cusparseCooSetPointers(plan.sparse, plan.keep[0].data_ptr(), plan.keep[1].data_ptr(),
                                          s.values.data_ptr()),
                   op, "cusparseCooSetPointers");
  } else {
    check_cusparse(cusparseCsrSetPointers(plan.sparse, csr->pointers().data_ptr(), csr->indices().data_ptr(),
                                          s.values.data_ptr()),
                   op, "cusparseCsrSetPointers");
  }
  check_cusparse(cusparseDnMatSetValues(plan.dense[0], b.data_ptr()), op, "cusparseDnMatSetValues(B)");
  check_cusparse(cusparseDnMatSetValues(plan.dense[1], c.data_ptr()), op, "cusparseDnMatSetValues(C)");
  check_cusparse(cusparseSpMM(handle, op_a, op_b, alpha, plan.sparse, plan.dense[0], beta, plan.dense[1], compute,
                              alg, plan.workspace),
                 op, "cusparseSpMM");
}

enum class Product { kSparseDense, kDenseSparse, kDenseSparseT };

void check_operands(const std::vector<Tensor>& in, std::string_view op) {
  COPPICE_CHECK(in.size() == 2, op, ": expected 2 inputs, got ", in.size());
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.dim() == 2, op, ": operands must be 2-D, got shape ", shape_to_string(t.shape()));
    COPPICE_CHECK(t.device().is_cuda() && t.device() == in[0].device(), op,
                  ": CUDA kernel needs both operands on one CUDA device, got ", in[0].device().to_string(), " and ",
                  t.device().to_string());
  }
  COPPICE_CHECK(in[0].dtype() == in[1].dtype(), op, ": operands must share one dtype, got ",
                dtype_name(in[0].dtype()), " and ", dtype_name(in[1].dtype()));
  COPPICE_CHECK(is_floating(in[0].dtype()), op, ": ", dtype_name(in[0].dtype()),
                " operands are not supported (f32, f64, bf16, f16)");
}

// kSparseDense: A @ X. kDenseSparse: X @ A. kDenseSparseT: X @ A^T (linear).
Tensor spmm_in(const SparseOperand& s, const Tensor& x_in, Product product, std::string_view op) {
  const Tensor x = x_in.contiguous();
  const int64_t xr = checked_i32(x.size(0), op, "dense rows"), xc = checked_i32(x.size(1), op, "dense columns");
  Shape out_shape;
  int64_t inner = 0;
  if (product == Product::kSparseDense) {
    COPPICE_CHECK(xr == s.cols, op, ": inner dimensions differ: sparse a is ", shape_to_string(s.a.shape()),
                  ", dense b is ", shape_to_string(x.shape()));
    out_shape = {s.rows, xc};
    inner = s.cols;
  } else {
    inner = product == Product::kDenseSparse ? s.rows : s.cols;
    COPPICE_CHECK(xc == inner, op, ": inner dimensions differ: dense ", shape_to_string(x.shape()), " and sparse ",
                  shape_to_string(s.a.shape()), product == Product::kDenseSparseT ? " (transposed)" : "");
    out_shape = {xr, product == Product::kDenseSparse ? s.cols : s.rows};
  }
  if (shape_numel(out_shape) == 0) return Tensor::empty(out_shape, x.options());
  if (s.nnz == 0 || inner == 0) return zeros(out_shape, x.options());
  Tensor out = Tensor::empty(out_shape, x.options());
  const int64_t n = out_shape[1];
  switch (product) {
    case Product::kSparseDense:
      run_spmm(s, false, CUSPARSE_ORDER_ROW, x, {xr, xc, xc}, out, {out_shape[0], n, n}, op);
      break;
    case Product::kDenseSparse:  // Y^T [n, m] = A^T [n, k] X^T [k, m], column-major
      run_spmm(s, true, CUSPARSE_ORDER_COL, x, {xc, xr, xc}, out, {n, xr, n}, op);
      break;
    case Product::kDenseSparseT:  // Y^T [out, m] = A [out, in] X^T [in, m], column-major
      run_spmm(s, false, CUSPARSE_ORDER_COL, x, {xc, xr, xc}, out, {n, xr, n}, op);
      break;
  }
  return out;
}

bool not_supported(const Error& e) {
  return std::string(e.what()).find("CUSPARSE_STATUS_NOT_SUPPORTED") != std::string::npos;
}

Tensor spmm(const Tensor& a, const Tensor& x, Product product, std::string_view op) {
  const SparseOperand s = sparse_operand(a, op);
  const DType dtype = s.values.dtype();
  if (s.kind == Kind::kEll) {
    try {
      return spmm_in(s, x, product, op);
    } catch (const Error& e) {
      if (!not_supported(e)) throw;
    }
    // No Blocked-ELL kernel for this dtype on this GPU: compute densely.
    const Tensor dense = to_dense(s.a);
    switch (product) {
      case Product::kSparseDense: return matmul(dense, x);
      case Product::kDenseSparse: return matmul(x, dense);
      case Product::kDenseSparseT: return matmul(x, dense.t());
    }
    fail(op, ": internal: unknown product");
  }
  if (dtype != DType::kBF16 && dtype != DType::kF16) return spmm_in(s, x, product, op);
  try {
    return spmm_in(s, x, product, op);
  } catch (const Error& e) {
    if (!not_supported(e)) throw;
  }
  // This GPU or cuSPARSE has no half-precision kernel for the combination:
  // compute in f32 (the CPU twin does the same), round once.
  SparseOperand s32 = s;
  s32.values = s.values.to(DType::kF32);
  s32.a = with_values(s.a, s32.values);
  return spmm_in(s32, x.to(DType::kF32), product, op).to(dtype);
}

std::vector<Tensor> matmul_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in, "matmul");
  return {spmm(in[0], in[1], Product::kSparseDense, "matmul")};
}

std::vector<Tensor> matmul_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in, "matmul");
  return {spmm(in[1], in[0], Product::kDenseSparse, "matmul")};
}

// linear(x, weight) = x @ weight^T (the frontend adds the bias).
std::vector<Tensor> linear_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in, "linear");
  return {spmm(in[1], in[0], Product::kDenseSparseT, "linear")};
}

std::vector<Tensor> linear_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in, "linear");
  return {spmm(in[0], in[1].t(), Product::kSparseDense, "linear")};
}

const bool kRegistered = [] {
  Dispatcher& d = Dispatcher::instance();
  for (const char* f : {"csr", "coo"}) {
    d.register_kernel("matmul", DeviceType::kCuda, {f, "dense"}, matmul_sparse_dense);
    d.register_kernel("matmul", DeviceType::kCuda, {"dense", f}, matmul_dense_sparse);
    d.register_kernel("linear", DeviceType::kCuda, {"dense", f}, linear_dense_sparse);
    d.register_kernel("linear", DeviceType::kCuda, {f, "dense"}, linear_sparse_dense);
  }
  // Not (dense, blocked_ell): that needs a transposed Blocked-ELL operand.
  d.register_kernel("matmul", DeviceType::kCuda, {"blocked_ell", "dense"}, matmul_sparse_dense);
  d.register_kernel("linear", DeviceType::kCuda, {"dense", "blocked_ell"}, linear_dense_sparse);
  d.register_kernel("linear", DeviceType::kCuda, {"blocked_ell", "dense"}, linear_sparse_dense);
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
