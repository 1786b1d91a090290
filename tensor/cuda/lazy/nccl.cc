// NCCL's functions that Coppice calls (distributed/nccl_communicator.cc),
// forwarded to libnccl.so.2 loaded at their first call (library.h). Each
// resolves its real function once (a function-local static: thread-safe) and
// returns ncclSystemError when the library is missing (no communicator can
// then exist, so the calls that take one are never reached with a real one).
#include <nccl.h>

#include "tensor/cuda/lazy/library.h"

using coppice::cuda::cuda_library_failure_text;
using coppice::cuda::cuda_library_symbol;
using coppice::cuda::CudaLibrary;
using coppice::cuda::forward;

namespace {
constexpr CudaLibrary kLib = CudaLibrary::kNccl;
constexpr ncclResult_t kFailure = ncclSystemError;
}  // namespace

// ---- errors ----

const char* ncclGetErrorString(ncclResult_t result) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), result);
}

const char* ncclGetLastError(ncclComm_t comm) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, cuda_library_failure_text(kLib), comm);
}

// ---- communicators ----

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, uniqueId);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, comm, color, key, newcomm, config);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, comm, asyncError);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, comm);
}

// ---- collectives ----

ncclResult_t ncclGroupStart() {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure);
}

ncclResult_t ncclGroupEnd() {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  static void* const real = cuda_library_symbol(kLib, __func__);
  return forward(real, kFailure, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}
