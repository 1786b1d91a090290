// cuBLAS's functions that Coppice calls (tensor/cuda/gemm.cc), forwarded to
// libcublas.so.13 loaded at their first call (library.h). cublas_v2.h maps
// cublasCreate and cublasSetStream to their _v2 symbols, so those are the
// names defined here. Each resolves its real function once (a function-local
// static: thread-safe) and returns CUBLAS_STATUS_NOT_INITIALIZED when the
// library is missing.
#include <cublas_v2.h>

#include "tensor/cuda/lazy/library.h"

using coppice::cuda::cuda_library_failure_text;
using coppice::cuda::cuda_library_symbol;
using coppice::cuda::CudaLibrary;
using coppice::cuda::forward;

namespace {
constexpr CudaLibrary kLib = CudaLibrary::kCublas;
constexpr cublasStatus_t kFailure = CUBLAS_STATUS_NOT_INITIALIZED;
}  // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, streamId);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, mode);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC, int batchCount) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                 strideC, batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb, long long int strideB,
                                         const double* beta, double* C, int ldc, long long int strideC,
                                         int batchCount) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                 strideC, batchCount);
}

// The exported function (cublas_api.h also has an inline overload taking a
// cudaDataType compute type, which calls this one).
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
                 beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), status);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), status);
}
