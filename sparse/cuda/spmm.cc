// SpMM on CUDA for every format of sparse/, in both directions (sparse/ops.h
// has the table): "matmul" (fmt, dense), (dense, fmt); "linear" (dense, fmt),
// (fmt, dense); and, with the bias (and relu) in the kernel, "linear" (dense,
// bsr, dense) and "linear_relu" (dense, bsr[, dense]). How each format gets
// there:
//   csr, coo      cuSPARSE directly (COO coalesced first, its i64 indices
//                 narrowed to i32 once per pattern version);
//   csc           the CSR of the transpose over the same arrays (free), with
//                 the product's transpose flipped;
//   blocked_ell   cuSPARSE's Blocked-ELL SpMM for bf16/f16 where the sparse
//                 operand is not transposed (it takes no transposed operand,
//                 and computes f32 in TF32, which would be a silent loss of
//                 precision); otherwise as below;
//   bsr           16/32-wide blocks in f32/bf16/f16: every direction by the
//                 tiled kernels of bsr_products.h; otherwise as nm;
//   bsr, nm       A @ X by the own kernels of block_spmm.cc (registered
//                 there); the other directions as below;
//   (the rest)    through csr_view.h: the pattern as CSR, cached per version,
//                 values gathered into CSR order on each call;
//   masked        computed densely (values where the mask holds), by design.
//
// cuSPARSE computes C = op(A) @ B with A sparse and B, C dense, in row- or
// column-major order. A row-major [r, c] matrix read column-major is its
// transpose, which gives every direction without materializing a transpose
// of the sparse operand S:
//   S @ X      op(A) = S, B = X, C = Y, all row-major.
//   S^T @ X    op(A) = S^T, all row-major.
//   X @ S      Y^T = S^T X^T: op(A) = S^T, X and Y read column-major.
//   X @ S^T    Y^T = S X^T: op(A) = S, X and Y read column-major (linear).
// A transposed sparse operand makes cuSPARSE scatter into C with atomics in
// C's type (run-to-run differences in the last bits; in bf16/f16, sums
// rounded at every step), so bf16/f16 products with a transposed operand
// compute in f32 and round once, as do half-precision combinations cuSPARSE
// refuses (NOT_SUPPORTED). f32 and f64 compute in their own type.
//
// That table is the "direct" route (COPPICE_SPMM_ROUTE=direct). The default
// route avoids both a transposed sparse operand and column-major dense
// operands, which cuSPARSE runs 4-20x slower on training shapes: every
// product becomes one non-transposed row-major SpMM on the CSR of S or S^T
// (row_major_spmm below has the measurements).
//
// Algorithm: CUSPARSE_SPMM_ALG_DEFAULT, which supports every order and
// transpose used here (CSR_ALG2 is row-major only).
#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <climits>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/blocked_ell.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/cuda/coo_indices.h"
#include "sparse/cuda/csr_view.h"
#include "sparse/cuda/cusparse_internal.h"
#include "sparse/cuda/spmm_choice.h"
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

// The four products with one sparse operand S and one dense X.
enum class Product { kSparseDense, kSparseTDense, kDenseSparse, kDenseSparseT };

bool transposes_sparse(Product p) { return p == Product::kSparseTDense || p == Product::kDenseSparse; }

// The same product with S replaced by S^T.
Product with_sparse_transposed(Product p) {
  switch (p) {
    case Product::kSparseDense: return Product::kSparseTDense;
    case Product::kSparseTDense: return Product::kSparseDense;
    case Product::kDenseSparse: return Product::kDenseSparseT;
    case Product::kDenseSparseT: return Product::kDenseSparse;
  }
  fail("spmm: internal: unknown product");
}

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

// The product on dense tensors (masked operands, and Blocked-ELL dtypes no
// sparse kernel takes).
Tensor dense_product(const Tensor& s, const Tensor& x, Product product) {
  switch (product) {
    case Product::kSparseDense: return matmul(s, x);
    case Product::kSparseTDense: return matmul(s.t(), x);
    case Product::kDenseSparse: return matmul(x, s);
    case Product::kDenseSparseT: return matmul(x, s.t());
  }
  fail("spmm: internal: unknown product");
}

Tensor spmm_in(const SparseOperand& s, const Tensor& x_in, Product product, std::string_view op) {
  const Tensor x = x_in.contiguous();
  const int64_t xr = checked_i32(x.size(0), op, "dense rows"), xc = checked_i32(x.size(1), op, "dense columns");
  const bool sparse_left = product == Product::kSparseDense || product == Product::kSparseTDense;
  const bool trans = transposes_sparse(product);
  // Both sides compute op(S) [op_rows, op_cols] times a dense operand: X on
  // the left is read column-major as X^T [xc, xr] (the header's table).
  const int64_t op_rows = trans ? s.cols : s.rows, op_cols = trans ? s.rows : s.cols;
  const int64_t x_inner = sparse_left ? xr : xc;
  const bool stated_transposed = product == Product::kSparseTDense || product == Product::kDenseSparseT;
  COPPICE_CHECK(x_inner == op_cols, op, ": inner dimensions differ: sparse ", shape_to_string(s.a.shape()),
                stated_transposed ? " (transposed)" : "", " and dense ", shape_to_string(x.shape()),
                sparse_left ? " on the right" : " on the left");
  const Shape out_shape = sparse_left ? Shape{op_rows, xc} : Shape{xr, op_rows};
  const int64_t inner = op_cols;
  if (shape_numel(out_shape) == 0) return Tensor::empty(out_shape, x.options());
  if (s.nnz == 0 || inner == 0) return zeros(out_shape, x.options());
  Tensor out = Tensor::empty(out_shape, x.options());
  const int64_t n = out_shape[1];
  if (sparse_left) {
    run_spmm(s, trans, CUSPARSE_ORDER_ROW, x, {xr, xc, xc}, out, {out_shape[0], n, n}, op);
  } else {  // Y^T = op(S) X^T, column-major
    run_spmm(s, trans, CUSPARSE_ORDER_COL, x, {xc, xr, xc}, out, {n, xr, n}, op);
  }
  return out;
}

bool not_supported(const Error& e) {
  return std::string(e.what()).find("CUSPARSE_STATUS_NOT_SUPPORTED") != std::string::npos;
}

// The product in f32, rounded once to s's dtype.
Tensor spmm_in_f32(const SparseOperand& s, const Tensor& x, Product product, std::string_view op) {
  SparseOperand s32 = s;
  s32.values = s.values.to(DType::kF32);
  s32.a = with_values(s.a, s32.values);
  return spmm_in(s32, x.to(DType::kF32), product, op).to(s.values.dtype());
}

// cuSPARSE on CSR, COO or Blocked-ELL `a`, with the precision rules above.
Tensor cusparse_spmm(const Tensor& a, const Tensor& x, Product product, std::string_view op) {
  const SparseOperand s = sparse_operand(a, op);
  const DType dtype = s.values.dtype();
  const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
  if (half && transposes_sparse(product)) return spmm_in_f32(s, x, product, op);
  if (!half) return spmm_in(s, x, product, op);
  try {
    return spmm_in(s, x, product, op);
  } catch (const Error& e) {
    if (!not_supported(e)) throw;
  }
  return spmm_in_f32(s, x, product, op);
}

// The route (COPPICE_SPMM_ROUTE, read on every call so that a benchmark can
// compare both in one run): "row_major" (the default) or "direct".
bool row_major_route() {
  const char* env = std::getenv("COPPICE_SPMM_ROUTE");
  return env == nullptr || std::string_view(env) != "direct";
}

// `a`, or a^T when `transposed`, as a CSR tensor that cuSPARSE reads without
// transposing: CSR as it is, CSC transposed over the same arrays, anything
// else through csr_view; the transposed pattern of a CSR is the CSR view of
// its free CSC transpose, cached per pattern version like every view.
Tensor csr_operand(const Tensor& a, bool transposed, std::string_view op) {
  switch (a.layout()) {
    case Layout::kCsr:
      return transposed ? csr_view(transpose_compressed(a), op) : a;
    case Layout::kCsc:
      return transposed ? transpose_compressed(a) : csr_view(a, op);
    default: {
      const Tensor base = csr_view(a, op);
      return transposed ? csr_view(transpose_compressed(base), op) : base;
    }
  }
}

// CSR @ X, the product the row-major route comes down to: cuSPARSE or an own
// kernel, whichever measured faster for the shape (spmm_choice.h;
// COPPICE_CSR_SPMM forces a side).
Tensor csr_times_dense(const Tensor& csr, const Tensor& x, std::string_view op) {
  return csr_spmm_chosen(csr, x, op, [op](const Tensor& s, const Tensor& d) {
    return cusparse_spmm(s, d, Product::kSparseDense, op);
  });
}

// Every product as one non-transposed, row-major CSR SpMM, which is where
// cuSPARSE is fast: a transposed sparse operand makes it scatter with
// atomics, and column-major dense operands run several times slower (H100,
// 4096^2 at 90 % sparsity times 4096^2, f32: x @ S^T column-major 15 ms and
// x @ S through S^T 66 ms, against 3.3 ms for S @ x row-major). So
//   op(S) @ X  = CSR(op(S)) @ X
//   X @ op(S)  = (CSR(op(S)^T) @ X^T)^T
// with X^T and the result's transpose made by dense copies (a small cost
// next to the product) and CSR(S^T) a cached view.
Tensor row_major_spmm(const Tensor& a, const Tensor& x, Product product, std::string_view op) {
  const bool sparse_left = product == Product::kSparseDense || product == Product::kSparseTDense;
  // M = op(S) as the caller states it.
  const bool m_is_transpose = product == Product::kSparseTDense || product == Product::kDenseSparseT;
  const int64_t m_rows = m_is_transpose ? a.size(1) : a.size(0), m_cols = m_is_transpose ? a.size(0) : a.size(1);
  COPPICE_CHECK(sparse_left ? x.size(0) == m_cols : x.size(1) == m_rows, op, ": inner dimensions differ: sparse ",
                shape_to_string(a.shape()), m_is_transpose ? " (transposed)" : "", " and dense ",
                shape_to_string(x.shape()), sparse_left ? " on the right" : " on the left");
  if (sparse_left) return csr_times_dense(csr_operand(a, m_is_transpose, op), x, op);
  // X @ M = (M^T @ X^T)^T.
  return csr_times_dense(csr_operand(a, !m_is_transpose, op), x.t(), op).t().contiguous();
}

Tensor spmm(const Tensor& a, const Tensor& x, Product product, std::string_view op) {
  if (multiplies_densely(a)) return dense_product(dense_from_positions(a, op), x, product);
  if (bsr_tiles_apply(a)) {
    const bool sparse_left = product == Product::kSparseDense || product == Product::kSparseTDense;
    const bool transposed = product == Product::kSparseTDense || product == Product::kDenseSparseT;
    return bsr_tiled_matmul(a, transposed, x, sparse_left, op);
  }
  if (row_major_route()) {
    if (a.layout() == Layout::kMasked) return dense_product(to_dense(a), x, product);
    const bool half = a.dtype() == DType::kBF16 || a.dtype() == DType::kF16;
    if (a.layout() == Layout::kBlockedEll && half && product == Product::kSparseDense) {
      try {
        return spmm_in(sparse_operand(a, op), x, product, op);
      } catch (const Error& e) {
        if (!not_supported(e)) throw;
      }
    }
    return row_major_spmm(a, x, product, op);
  }
  // COPPICE_SPMM_ROUTE=direct: cuSPARSE transposes and reads column-major.
  switch (a.layout()) {
    case Layout::kCsr:
    case Layout::kCoo:
      return cusparse_spmm(a, x, product, op);
    case Layout::kCsc:  // the CSR of a^T over the same arrays
      return cusparse_spmm(transpose_compressed(a), x, with_sparse_transposed(product), op);
    case Layout::kMasked:
      return dense_product(to_dense(a), x, product);
    case Layout::kBlockedEll: {
      const bool half = a.dtype() == DType::kBF16 || a.dtype() == DType::kF16;
      if (half && !transposes_sparse(product)) {
        try {
          return spmm_in(sparse_operand(a, op), x, product, op);
        } catch (const Error& e) {
          if (!not_supported(e)) throw;
        }
      }
      return cusparse_spmm(csr_view(a, op), x, product, op);
    }
    default:
      return cusparse_spmm(csr_view(a, op), x, product, op);
  }
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

// linear(x, weight, bias) with a BSR weight: the bias added in the tiled
// kernel's write-out instead of a separate pass (the frontend asks for this
// kernel when it exists and a bias is given).
std::vector<Tensor> linear_dense_bsr_bias(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 3, "linear: expected 3 inputs (input, weight, bias), got ", in.size());
  check_operands({in[0], in[1]}, "linear");
  if (bsr_tiles_apply(in[1])) return {bsr_tiled_matmul(in[1], /*transpose_s=*/true, in[0], false, "linear", in[2])};
  return {add(spmm(in[1], in[0], Product::kDenseSparseT, "linear"), in[2])};
}

// linear_relu(x, weight[, bias]) with a BSR weight: the bias and the relu in
// the tiled kernel's write-out, so the forward pass of an MLP layer is one
// kernel (the frontend asks for this kernel when it exists; otherwise it
// computes relu(linear(...)), which is also what runs here where the tiles
// do not apply).
std::vector<Tensor> linear_relu_dense_bsr(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 2 || in.size() == 3, "linear_relu: expected 2 or 3 inputs (input, weight[, bias]), got ",
                in.size());
  check_operands({in[0], in[1]}, "linear_relu");
  const Tensor bias = in.size() == 3 ? in[2] : Tensor();
  if (bsr_tiles_apply(in[1])) {
    return {bsr_tiled_matmul(in[1], /*transpose_s=*/true, in[0], false, "linear_relu", bias, /*relu=*/true)};
  }
  const Tensor y = spmm(in[1], in[0], Product::kDenseSparseT, "linear_relu");
  return {relu(bias.defined() ? add(y, bias) : y)};
}

std::vector<Tensor> linear_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_operands(in, "linear");
  return {spmm(in[0], in[1].t(), Product::kSparseDense, "linear")};
}

const bool kRegistered = [] {
  Dispatcher& d = Dispatcher::instance();
  for (const char* f : {"csr", "coo", "csc", "bsr", "blocked_ell", "nm", "masked"}) {
    const std::string_view name(f);
    const bool own_kernel = name == "bsr" || name == "nm";  // (f, dense): block_spmm.cc
    if (!own_kernel) {
      d.register_kernel("matmul", DeviceType::kCuda, {f, "dense"}, matmul_sparse_dense);
      d.register_kernel("linear", DeviceType::kCuda, {f, "dense"}, linear_sparse_dense);
    }
    d.register_kernel("matmul", DeviceType::kCuda, {"dense", f}, matmul_dense_sparse);
    d.register_kernel("linear", DeviceType::kCuda, {"dense", f}, linear_dense_sparse);
  }
  d.register_kernel("linear", DeviceType::kCuda, {"dense", "bsr", "dense"}, linear_dense_bsr_bias);
  d.register_kernel("linear_relu", DeviceType::kCuda, {"dense", "bsr", "dense"}, linear_relu_dense_bsr);
  d.register_kernel("linear_relu", DeviceType::kCuda, {"dense", "bsr"}, linear_relu_dense_bsr);
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
