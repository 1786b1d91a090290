#include "sparse/cuda/cusparse_spmm.h"

#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <climits>
#include <cstdint>
#include <mutex>
#include <string>

#include "sparse/blocked_ell.h"
#include "sparse/csr.h"
#include "sparse/cuda/cusparse_internal.h"
#include "sparse/cuda/kernel_routes.h"
#include "sparse/cuda/pattern_cache.h"
#include "sparse/format_cells.h"
#include "sparse/formats.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

int64_t checked_i32(int64_t v, std::string_view op, std::string_view what) {
  COPPICE_CHECK(v <= INT_MAX, op, ": ", what, " = ", v, " exceeds cuSPARSE's 32-bit index limit");
  return v;
}

// The sparse operand as cuSPARSE reads it: `a` is CSR or Blocked-ELL.
struct SparseOperand {
  Tensor a;  // keeps the parts alive
  int64_t rows = 0, cols = 0, nnz = 0;
  uint64_t version = 0;
  Tensor values;
};

SparseOperand sparse_operand(const Tensor& in, std::string_view op) {
  SparseOperand s;
  s.a = in;
  COPPICE_CHECK(s.a.dim() == 2, op, ": sparse operand must be 2-D, got shape ", shape_to_string(s.a.shape()));
  s.rows = checked_i32(s.a.size(0), op, "rows");
  s.cols = checked_i32(s.a.size(1), op, "columns");
  s.nnz = checked_i32(nnz(s.a), op, "nnz");
  s.version = pattern_version(s.a);
  s.values = values(s.a).contiguous();
  return s;
}

// How each format's cuSPARSE matrix is described: Matrix m(s, op);
// m.index_address() for the plan key, m.create(plan) makes the descriptor,
// m.repoint(plan) points a cached one at s's arrays. One per format, so each
// format's SpMM is its own kernel (the cells at the bottom).

// CSR: re-pointed in place (cusparseCsrSetPointers).
class CsrMatrix {
 public:
  CsrMatrix(const SparseOperand& s, std::string_view op) : s_(s), op_(op), csr_(csr_impl(s.a, op)) {}
  uintptr_t index_address() const { return 0; }
  void create(Plan& p, cudaDataType_t type) const {
    check_cusparse(
        cusparseCreateCsr(&p.sparse, s_.rows, s_.cols, s_.nnz, csr_.pointers().data_ptr(), csr_.indices().data_ptr(),
                          s_.values.data_ptr(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
        op_, "cusparseCreateCsr");
  }
  void repoint(Plan& p, cudaDataType_t) const {
    check_cusparse(
        cusparseCsrSetPointers(p.sparse, csr_.pointers().data_ptr(), csr_.indices().data_ptr(), s_.values.data_ptr()),
        op_, "cusparseCsrSetPointers");
  }

 private:
  const SparseOperand& s_;
  std::string_view op_;
  const CompressedImpl& csr_;
};

// Blocked-ELL has no call that re-points its index array, so its key also
// names the array's address (equal version and address: equal contents). A
// descriptor is remade (host-side only) when the values move, rather than
// re-pointed: the generic cusparseSpMatSetValues is not documented for
// Blocked-ELL on every version.
class BlockedEllMatrix {
 public:
  BlockedEllMatrix(const SparseOperand& s, std::string_view op) : s_(s), op_(op), ell_(blocked_ell_impl(s.a, op)) {}
  uintptr_t index_address() const { return reinterpret_cast<uintptr_t>(ell_.ell_col_indices().data_ptr()); }
  void create(Plan& p, cudaDataType_t type) const {
    check_cusparse(cusparseCreateBlockedEll(&p.sparse, s_.rows, s_.cols, ell_.block_size(),
                                            ell_.ell_cols() * ell_.block_size(), ell_.ell_col_indices().data_ptr(),
                                            s_.values.data_ptr(), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
                   op_, "cusparseCreateBlockedEll");
    p.sparse_values = s_.values.data_ptr();
  }
  void repoint(Plan& p, cudaDataType_t type) const {
    if (p.sparse_values == s_.values.data_ptr()) return;
    cusparseDestroySpMat(p.sparse);
    p.sparse = nullptr;
    p.sparse_values = nullptr;  // remade below; a throw leaves it to be remade next time
    create(p, type);
  }

 private:
  const SparseOperand& s_;
  std::string_view op_;
  const BlockedEllImpl& ell_;
};

// One cuSPARSE SpMM: c [s.rows, n] = s @ b [s.cols, n], both row-major and contiguous.
template <typename Matrix>
void run_spmm(const SparseOperand& s, const Tensor& b, const Tensor& c, std::string_view op) {
  const DType dtype = s.values.dtype();
  const int device = c.device().index;
  const int64_t n = b.size(1);
  const cudaDataType_t type = cuda_type(dtype);
  const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
  const cudaDataType_t compute = half ? CUDA_R_32F : type;
  const cusparseOperation_t no_t = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const cusparseOrder_t order = CUSPARSE_ORDER_ROW;
  const cusparseSpMMAlg_t alg = CUSPARSE_SPMM_ALG_DEFAULT;
  const Matrix matrix(s, op);
  const std::string key = str_cat("spmm|", s.a.format(), "|v", s.version, "|idx", matrix.index_address(), "|", s.rows,
                                  "x", s.cols, "|nnz", s.nnz, "|", dtype_name(dtype), "|n", n, "|dev", device);
  // alpha and beta in the compute type.
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = compute == CUDA_R_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = compute == CUDA_R_64F ? static_cast<const void*>(&beta_d) : &beta_f;

  cuda::DeviceGuard guard(device);
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cusparseHandle_t handle = handle_for(device);
  Plan& plan = find_or_build(key, device, pattern_anchor(s.a), [&](Plan& p) {
    matrix.create(p, type);
    check_cusparse(cusparseCreateDnMat(&p.dense[0], s.cols, n, n, b.data_ptr(), type, order), op,
                   "cusparseCreateDnMat(B)");
    check_cusparse(cusparseCreateDnMat(&p.dense[1], s.rows, n, n, c.data_ptr(), type, order), op,
                   "cusparseCreateDnMat(C)");
    size_t bytes = 0;
    check_cusparse(cusparseSpMM_bufferSize(handle, no_t, no_t, alpha, p.sparse, p.dense[0], beta, p.dense[1], compute,
                                           alg, &bytes),
                   op, "cusparseSpMM_bufferSize");
    p.allocate_workspace(bytes);
  });
  matrix.repoint(plan, type);
  check_cusparse(cusparseDnMatSetValues(plan.dense[0], b.data_ptr()), op, "cusparseDnMatSetValues(B)");
  check_cusparse(cusparseDnMatSetValues(plan.dense[1], c.data_ptr()), op, "cusparseDnMatSetValues(C)");
  check_cusparse(cusparseSpMM(handle, no_t, no_t, alpha, plan.sparse, plan.dense[0], beta, plan.dense[1], compute, alg,
                              plan.workspace),
                 op, "cusparseSpMM");
}

template <typename Matrix>
Tensor spmm_in(const SparseOperand& s, const Tensor& x_in, std::string_view op) {
  const Tensor x = x_in.contiguous();
  checked_i32(x.size(0), op, "dense rows");
  const int64_t n = checked_i32(x.size(1), op, "dense columns");
  COPPICE_CHECK(x.size(0) == s.cols, op, ": inner dimensions differ: sparse ", shape_to_string(s.a.shape()),
                " and dense ", shape_to_string(x.shape()), " on the right");
  const Shape out_shape{s.rows, n};
  if (shape_numel(out_shape) == 0) return Tensor::empty(out_shape, x.options());
  if (s.nnz == 0 || s.cols == 0) return zeros(out_shape, x.options());
  Tensor out = Tensor::empty(out_shape, x.options());
  run_spmm<Matrix>(s, x, out, op);
  return out;
}

using SpmmCell = Tensor (*)(const SparseOperand&, const Tensor&, std::string_view);

// cusparse_spmm's cells: the formats cuSPARSE's SpMM reads.
const FormatCells<SpmmCell>& spmm_cells() {
  static const auto* cells = new FormatCells<SpmmCell>({
      {format_name(Layout::kCsr), spmm_in<CsrMatrix>},
      {format_name(Layout::kBlockedEll), spmm_in<BlockedEllMatrix>},
  });
  return *cells;
}

}  // namespace

Tensor cusparse_spmm(const Tensor& s, const Tensor& x, std::string_view op) {
  const SpmmCell* cell = spmm_cells().find(s);
  COPPICE_CHECK(cell != nullptr, op, ": internal: cuSPARSE SpMM takes CSR or Blocked-ELL, got ", s.format());
  return (*cell)(sparse_operand(s, op), x, op);
}

Tensor cusparse_csr_spmm(const Tensor& csr, const Tensor& x, std::string_view op) {
  const CompressedImpl* c = csr.impl_as<CompressedImpl>();
  COPPICE_CHECK(c != nullptr && c->is_csr(), op, ": internal: cuSPARSE's CSR SpMM takes CSR, got ", csr.format());
  const SparseOperand s = sparse_operand(csr, op);
  const DType dtype = s.values.dtype();
  if (dtype != DType::kBF16 && dtype != DType::kF16) return spmm_in<CsrMatrix>(s, x, op);
  if (std::optional<Tensor> out = unless_refused([&] { return spmm_in<CsrMatrix>(s, x, op); })) {
    return *std::move(out);
  }
  // In f32, rounded once to the operand's dtype.
  SparseOperand s32 = s;
  s32.values = s.values.to(DType::kF32);
  s32.a = with_values(s.a, s32.values);
  return spmm_in<CsrMatrix>(s32, x.to(DType::kF32), op).to(dtype);
}

}  // namespace coppice::sparse_cuda
