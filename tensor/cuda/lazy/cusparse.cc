// cuSPARSE's functions that Coppice calls (sparse/cuda: cusparse_context.cc,
// cusparse_spmm.cc, cusparse_sddmm.cc, spgemm.cc, compressed_transpose.cc), forwarded to
// libcusparse.so.12 loaded at their first call (library.h). Each resolves its
// real function once (a function-local static: thread-safe) and returns
// CUSPARSE_STATUS_NOT_INITIALIZED when the library is missing.
#include <cusparse.h>

#include "tensor/cuda/lazy/library.h"

using coppice::cuda::cuda_library_failure_text;
using coppice::cuda::cuda_library_symbol;
using coppice::cuda::CudaLibrary;
using coppice::cuda::forward;

namespace {
constexpr CudaLibrary kLib = CudaLibrary::kCusparse;
constexpr cusparseStatus_t kFailure = CUSPARSE_STATUS_NOT_INITIALIZED;
}  // namespace

// ---- the library ----

cusparseStatus_t cusparseCreate(cusparseHandle_t* handle) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle);
}

cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t streamId) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, streamId);
}

const char* cusparseGetErrorName(cusparseStatus_t status) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), status);
}

const char* cusparseGetErrorString(cusparseStatus_t status) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), status);
}

// ---- descriptors ----

cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t* spMatDescr, int64_t rows, int64_t cols, int64_t nnz,
                                   void* csrRowOffsets, void* csrColInd, void* csrValues,
                                   cusparseIndexType_t csrRowOffsetsType, cusparseIndexType_t csrColIndType,
                                   cusparseIndexBase_t idxBase, cudaDataType valueType) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, spMatDescr, rows, cols, nnz, csrRowOffsets, csrColInd, csrValues, csrRowOffsetsType,
                 csrColIndType, idxBase, valueType);
}

cusparseStatus_t cusparseCreateBlockedEll(cusparseSpMatDescr_t* spMatDescr, int64_t rows, int64_t cols,
                                          int64_t ellBlockSize, int64_t ellCols, void* ellColInd, void* ellValue,
                                          cusparseIndexType_t ellIdxType, cusparseIndexBase_t idxBase,
                                          cudaDataType valueType) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, spMatDescr, rows, cols, ellBlockSize, ellCols, ellColInd, ellValue, ellIdxType,
                 idxBase, valueType);
}

cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t spMatDescr, void* csrRowOffsets, void* csrColInd,
                                        void* csrValues) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, spMatDescr, csrRowOffsets, csrColInd, csrValues);
}

cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t spMatDescr, int64_t* rows, int64_t* cols,
                                      int64_t* nnz) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, spMatDescr, rows, cols, nnz);
}

cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t spMatDescr) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, spMatDescr);
}

cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* dnMatDescr, int64_t rows, int64_t cols, int64_t ld,
                                     void* values, cudaDataType valueType, cusparseOrder_t order) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, dnMatDescr, rows, cols, ld, values, valueType, order);
}

cusparseStatus_t cusparseDnMatSetValues(cusparseDnMatDescr_t dnMatDescr, void* values) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, dnMatDescr, values);
}

cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t dnMatDescr) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, dnMatDescr);
}

// ---- SpMM and SDDMM ----

cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                                         const void* alpha, cusparseConstSpMatDescr_t matA,
                                         cusparseConstDnMatDescr_t matB, const void* beta, cusparseDnMatDescr_t matC,
                                         cudaDataType computeType, cusparseSpMMAlg_t alg, size_t* bufferSize) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, bufferSize);
}

cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                              const void* alpha, cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB,
                              const void* beta, cusparseDnMatDescr_t matC, cudaDataType computeType,
                              cusparseSpMMAlg_t alg, void* externalBuffer) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, externalBuffer);
}

cusparseStatus_t cusparseSDDMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                                          const void* alpha, cusparseConstDnMatDescr_t matA,
                                          cusparseConstDnMatDescr_t matB, const void* beta, cusparseSpMatDescr_t matC,
                                          cudaDataType computeType, cusparseSDDMMAlg_t alg, size_t* bufferSize) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, bufferSize);
}

cusparseStatus_t cusparseSDDMM(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                               const void* alpha, cusparseConstDnMatDescr_t matA, cusparseConstDnMatDescr_t matB,
                               const void* beta, cusparseSpMatDescr_t matC, cudaDataType computeType,
                               cusparseSDDMMAlg_t alg, void* externalBuffer) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, externalBuffer);
}

// ---- CSR to CSC (compressed_transpose.cc) ----

cusparseStatus_t cusparseCsr2cscEx2_bufferSize(cusparseHandle_t handle, int m, int n, int nnz, const void* csrVal,
                                               const int* csrRowPtr, const int* csrColInd, void* cscVal, int* cscColPtr,
                                               int* cscRowInd, cudaDataType valType, cusparseAction_t copyValues,
                                               cusparseIndexBase_t idxBase, cusparseCsr2CscAlg_t alg,
                                               size_t* bufferSize) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, m, n, nnz, csrVal, csrRowPtr, csrColInd, cscVal, cscColPtr, cscRowInd, valType,
                 copyValues, idxBase, alg, bufferSize);
}

cusparseStatus_t cusparseCsr2cscEx2(cusparseHandle_t handle, int m, int n, int nnz, const void* csrVal,
                                    const int* csrRowPtr, const int* csrColInd, void* cscVal, int* cscColPtr,
                                    int* cscRowInd, cudaDataType valType, cusparseAction_t copyValues,
                                    cusparseIndexBase_t idxBase, cusparseCsr2CscAlg_t alg, void* buffer) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, m, n, nnz, csrVal, csrRowPtr, csrColInd, cscVal, cscColPtr, cscRowInd, valType,
                 copyValues, idxBase, alg, buffer);
}

// ---- SpGEMM ----

cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t* descr) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, descr);
}

cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t descr) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, descr);
}

cusparseStatus_t cusparseSpGEMM_workEstimation(cusparseHandle_t handle, cusparseOperation_t opA,
                                               cusparseOperation_t opB, const void* alpha,
                                               cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
                                               const void* beta, cusparseSpMatDescr_t matC, cudaDataType computeType,
                                               cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr,
                                               size_t* bufferSize1, void* externalBuffer1) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, spgemmDescr,
                 bufferSize1, externalBuffer1);
}

cusparseStatus_t cusparseSpGEMM_compute(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                                        const void* alpha, cusparseConstSpMatDescr_t matA,
                                        cusparseConstSpMatDescr_t matB, const void* beta, cusparseSpMatDescr_t matC,
                                        cudaDataType computeType, cusparseSpGEMMAlg_t alg,
                                        cusparseSpGEMMDescr_t spgemmDescr, size_t* bufferSize2, void* externalBuffer2) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, spgemmDescr,
                 bufferSize2, externalBuffer2);
}

cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
                                     const void* alpha, cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
                                     const void* beta, cusparseSpMatDescr_t matC, cudaDataType computeType,
                                     cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, spgemmDescr);
}
