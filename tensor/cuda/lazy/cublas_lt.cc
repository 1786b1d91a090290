// cuBLASLt's functions that Coppice calls (tensor/cuda/linear_lt.cc),
// forwarded to libcublasLt.so.13 loaded at their first call (library.h).
// Each resolves its real function once (a function-local static:
// thread-safe) and returns CUBLAS_STATUS_NOT_INITIALIZED when the library is
// missing.
#include <cublasLt.h>

#include "tensor/cuda/lazy/library.h"

using coppice::cuda::cuda_library_failure_text;
using coppice::cuda::cuda_library_symbol;
using coppice::cuda::CudaLibrary;
using coppice::cuda::forward;

namespace {
constexpr CudaLibrary kLib = CudaLibrary::kCublasLt;
constexpr cublasStatus_t kFailure = CUBLAS_STATUS_NOT_INITIALIZED;
}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, lightHandle);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, matmulDesc, computeType, scaleType);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, matmulDesc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, matLayout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, matLayout);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, pref, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
                 heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                 workspace, workspaceSizeInBytes, stream);
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), status);
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), status);
}
