// A stand-in for libnccl.so.2, built as a shared library for the NCCL
// backend's fault tests (nccl_fault_test.cc), which point Coppice's loader
// at it (tensor/cuda/lazy/library.h, COPPICE_CUDA_LIBRARY_DIR). It has
// NCCL's functions that Coppice calls, for a world of one rank: its
// collectives move nothing (right for in-place ones on one rank, wrong for
// the out-of-place all_gather and reduce_scatter, which the tests do not
// use) and put nothing on the stream. What real NCCL cannot be made to do on
// one GPU, on request through the coppice_fake_nccl_* functions below:
// - an enqueue that blocks inside ncclGroupEnd until a communicator is
//   aborted (as one does behind a collective a dead peer never ends);
// - an enqueue that fails with a given result.
// No CUDA runtime: the test binary has its own, statically linked.
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

struct ncclComm {
  int rank = 0;
};

namespace {

std::mutex mu;
std::condition_variable aborted_cv;
int aborts = 0;                             // ncclCommAbort calls so far
int blocked_group_ends = 0;                 // the next ones block until an abort
ncclResult_t next_group_end = ncclSuccess;  // the next one's result
std::atomic<int> group_ends_blocked_now{0};

}  // namespace

extern "C" {

// The next ncclGroupEnd blocks until an ncclCommAbort (on any
// communicator) after this call, then returns ncclInternalError.
__attribute__((visibility("default"))) void coppice_fake_nccl_block_next_group_end() {
  std::lock_guard<std::mutex> lock(mu);
  ++blocked_group_ends;
}

// The next ncclGroupEnd returns `result` (once).
__attribute__((visibility("default"))) void coppice_fake_nccl_fail_next_group_end(int result) {
  std::lock_guard<std::mutex> lock(mu);
  next_group_end = static_cast<ncclResult_t>(result);
}

// ncclCommAbort calls so far.
__attribute__((visibility("default"))) int coppice_fake_nccl_aborts() {
  std::lock_guard<std::mutex> lock(mu);
  return aborts;
}

// ncclGroupEnd calls blocked at this moment.
__attribute__((visibility("default"))) int coppice_fake_nccl_blocked_now() { return group_ends_blocked_now.load(); }

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error (fake NCCL)";
    case ncclInternalError: return "internal error (fake NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (fake NCCL)";
    default: return "an NCCL error (fake NCCL)";
  }
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t*) {
  if (nranks != 1 || rank != 0) return ncclInvalidArgument;  // one rank only
  *comm = new ncclComm;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t* newcomm, ncclConfig_t*) {
  *newcomm = new ncclComm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* state) {
  *state = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

// Not freed: a test aborts under a blocked call on purpose, which real NCCL
// forbids; the fake stays safe to call with an aborted communicator.
ncclResult_t ncclCommAbort(ncclComm_t) {
  std::lock_guard<std::mutex> lock(mu);
  ++aborts;
  aborted_cv.notify_all();
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }

ncclResult_t ncclGroupEnd() {
  std::unique_lock<std::mutex> lock(mu);
  if (blocked_group_ends > 0) {
    --blocked_group_ends;
    const int before = aborts;
    ++group_ends_blocked_now;
    aborted_cv.wait(lock, [&] { return aborts > before; });
    --group_ends_blocked_now;
    return ncclInternalError;
  }
  const ncclResult_t r = next_group_end;
  next_group_end = ncclSuccess;
  return r;
}

ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return ncclSuccess; }

ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}

}  // extern "C"
