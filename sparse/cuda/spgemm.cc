// SpGEMM on CUDA through cuSPARSE: "matmul" (csr, csr) -> CSR with a fresh
// pattern version (sparse/ops.h). The output pattern is structural (entries
// that cancel to zero stay stored), as on the CPU.
//
// cusparseSpGEMM in its three phases (work estimation, compute, copy), with
// both workspaces from the caching allocator for the call's duration. The
// output pattern is new on every call, so nothing is cached. f32 and f64
// compute in their own type; bf16/f16 are converted to f32 (cuSPARSE's
// SpGEMM has no half-precision compute) and the values rounded once. Coppice's
// CSR needs strictly increasing columns within a row, which cuSPARSE does not
// promise for SpGEMM's output, so rows are sorted on the device afterwards
// (csr_sort.cu; a no-op pass over rows that are already sorted).
#include <cuda_runtime_api.h>
#include <cusparse.h>

#include <climits>
#include <memory>
#include <vector>

#include "sparse/csr.h"
#include "sparse/cuda/csr_sort.h"
#include "sparse/cuda/cusparse_internal.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

// Destroys what one SpGEMM call created, whatever way it leaves.
struct SpgemmResources {
  cusparseSpMatDescr_t a = nullptr, b = nullptr, c = nullptr;
  cusparseSpGEMMDescr_t spgemm = nullptr;
  ~SpgemmResources() {
    if (spgemm != nullptr) cusparseSpGEMM_destroyDescr(spgemm);
    for (cusparseSpMatDescr_t d : {a, b, c}) {
      if (d != nullptr) cusparseDestroySpMat(d);
    }
  }
};

Tensor make_csr(Tensor crow, Tensor col, Tensor vals, int64_t m, int64_t n) {
  return Tensor(std::make_shared<CompressedImpl>(Layout::kCsr, std::move(crow), std::move(col), std::move(vals),
                                                 Shape{m, n}, new_pattern_version()));
}

std::vector<Tensor> spgemm(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kMatmul;
  check_cuda_operand_pair(in, op);
  const DType dtype = in[0].dtype();
  const CompressedImpl& a = csr_impl(in[0], op);
  const CompressedImpl& b = csr_impl(in[1], op);
  const int64_t m = in[0].size(0), k = in[0].size(1), n = in[1].size(1);
  COPPICE_CHECK(in[1].size(0) == k, op, ": inner dimensions differ: a is ", shape_to_string(in[0].shape()), ", b is ",
                shape_to_string(in[1].shape()));
  for (int64_t v : {m, k, n, a.nnz(), b.nnz()}) {
    COPPICE_CHECK(v <= INT_MAX, op, ": size ", v, " exceeds cuSPARSE's 32-bit index limit");
  }
  const Device device = in[0].device();
  const TensorOptions i32(DType::kI32, device);
  const DType compute_dtype = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  if (a.nnz() == 0 || b.nnz() == 0 || m == 0 || n == 0) {
    return {
        make_csr(zeros({m + 1}, i32), Tensor::empty({0}, i32), Tensor::empty({0}, TensorOptions(dtype, device)), m, n)};
  }
  const Tensor av = a.values().to(compute_dtype).contiguous(), bv = b.values().to(compute_dtype).contiguous();
  const cudaDataType_t type = cuda_type(compute_dtype);
  const cusparseOperation_t no_t = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const cusparseSpGEMMAlg_t alg = CUSPARSE_SPGEMM_DEFAULT;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = type == CUDA_R_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = type == CUDA_R_64F ? static_cast<const void*>(&beta_d) : &beta_f;
  const TensorOptions bytes_opts(DType::kU8, device);

  cuda::DeviceGuard guard(device.index);
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cusparseHandle_t handle = handle_for(device.index);
  SpgemmResources r;
  check_cusparse(cusparseCreateCsr(&r.a, m, k, a.nnz(), a.pointers().data_ptr(), a.indices().data_ptr(), av.data_ptr(),
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
                 op, "cusparseCreateCsr(A)");
  check_cusparse(cusparseCreateCsr(&r.b, k, n, b.nnz(), b.pointers().data_ptr(), b.indices().data_ptr(), bv.data_ptr(),
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type),
                 op, "cusparseCreateCsr(B)");
  check_cusparse(cusparseCreateCsr(&r.c, m, n, 0, nullptr, nullptr, nullptr, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_BASE_ZERO, type),
                 op, "cusparseCreateCsr(C)");
  check_cusparse(cusparseSpGEMM_createDescr(&r.spgemm), op, "cusparseSpGEMM_createDescr");
  size_t bytes1 = 0, bytes2 = 0;
  check_cusparse(cusparseSpGEMM_workEstimation(handle, no_t, no_t, alpha, r.a, r.b, beta, r.c, type, alg, r.spgemm,
                                               &bytes1, nullptr),
                 op, "cusparseSpGEMM_workEstimation (size)");
  const Tensor work1 = Tensor::empty({static_cast<int64_t>(bytes1)}, bytes_opts);
  check_cusparse(cusparseSpGEMM_workEstimation(handle, no_t, no_t, alpha, r.a, r.b, beta, r.c, type, alg, r.spgemm,
                                               &bytes1, work1.data_ptr()),
                 op, "cusparseSpGEMM_workEstimation");
  check_cusparse(
      cusparseSpGEMM_compute(handle, no_t, no_t, alpha, r.a, r.b, beta, r.c, type, alg, r.spgemm, &bytes2, nullptr), op,
      "cusparseSpGEMM_compute (size)");
  const Tensor work2 = Tensor::empty({static_cast<int64_t>(bytes2)}, bytes_opts);
  check_cusparse(cusparseSpGEMM_compute(handle, no_t, no_t, alpha, r.a, r.b, beta, r.c, type, alg, r.spgemm, &bytes2,
                                        work2.data_ptr()),
                 op, "cusparseSpGEMM_compute");
  int64_t c_rows = 0, c_cols = 0, c_nnz = 0;
  check_cusparse(cusparseSpMatGetSize(r.c, &c_rows, &c_cols, &c_nnz), op, "cusparseSpMatGetSize");
  COPPICE_CHECK(c_nnz <= INT_MAX, op, ": result has ", c_nnz, " entries, beyond cuSPARSE's 32-bit index limit");
  Tensor crow = Tensor::empty({m + 1}, i32), col = Tensor::empty({c_nnz}, i32);
  Tensor vals = Tensor::empty({c_nnz}, TensorOptions(compute_dtype, device));
  check_cusparse(cusparseCsrSetPointers(r.c, crow.data_ptr(), col.data_ptr(), vals.data_ptr()), op,
                 "cusparseCsrSetPointers(C)");
  check_cusparse(cusparseSpGEMM_copy(handle, no_t, no_t, alpha, r.a, r.b, beta, r.c, type, alg, r.spgemm), op,
                 "cusparseSpGEMM_copy");
  sort_csr_rows(crow.data<int32_t>(), m, col.data<int32_t>(), vals.data_ptr(), compute_dtype == DType::kF64,
                cuda::current_stream(device.index));
  cuda::check_launch(op);
  return {make_csr(crow, col, vals.to(dtype), m, n)};
}

const bool kRegistered = [] {
  Dispatcher::instance().register_kernel(op::kMatmul, DeviceType::kCuda, {"csr", "csr"}, spgemm);
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
