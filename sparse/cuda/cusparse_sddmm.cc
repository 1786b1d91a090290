#include "sparse/cuda/cusparse_sddmm.h"

#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <mutex>
#include <string>

#include "sparse/csr.h"
#include "sparse/cuda/cusparse_internal.h"
#include "sparse/cuda/pattern_cache.h"
#include "tensor/cuda/stream.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {

Tensor cusparse_csr_sddmm(const Tensor& a_in, const Tensor& b_in, const Tensor& pattern) {
  constexpr std::string_view op = op::kSddmm;
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
  Plan& plan = find_or_build(key, device, pattern_anchor(pattern), [&](Plan& p) {
    check_cusparse(cusparseCreateDnMat(&p.dense[0], m, k, k, a.data_ptr(), type, CUSPARSE_ORDER_ROW), op,
                   "cusparseCreateDnMat(A)");
    check_cusparse(cusparseCreateDnMat(&p.dense[1], k, n, n, b.data_ptr(), type, CUSPARSE_ORDER_ROW), op,
                   "cusparseCreateDnMat(B)");
    check_cusparse(
        cusparseCreateCsr(&p.sparse, m, n, nz, c.pointers().data_ptr(), c.indices().data_ptr(), out.data_ptr(),
                          CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
        op, "cusparseCreateCsr");
    size_t bytes = 0;
    check_cusparse(
        cusparseSDDMM_bufferSize(handle, no_t, no_t, alpha, p.dense[0], p.dense[1], beta, p.sparse, type, alg, &bytes),
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

}  // namespace coppice::sparse_cuda
