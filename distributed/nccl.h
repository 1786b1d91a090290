// The NCCL backend of the Communicator (distributed/communicator.h): one
// process (or, in tests, one thread) per GPU. This header exists in every
// build; without CUDA the factories throw and nccl_available() is false. The
// class itself is in distributed/nccl_communicator.h (CUDA builds only).
//
// Faults. NCCL hangs when a peer dies or never issues a collective. Here,
// init and every collective are bounded (NcclOptions): Work::wait()
// polls the collective's completion and NCCL's asynchronous error, and when
// the timeout passes (or NCCL reports an error) it aborts the communicator
// (ncclCommAbort) and throws coppice::Error on this rank, e.g.
//   "nccl: all_reduce #7 did not complete within 300 s on rank 1 (a peer died
//    or hung); the communicator was aborted"
// A collective nobody waits for on the host (Work::wait_on_device: the GPU
// waits), or whose enqueue blocks in NCCL, is bounded the same way by the
// communicator's watchdog thread, which aborts it at its deadline. Every
// later call on that communicator throws at once.
//
// Environment. NVLink SHARP (NVLS) multicast must stay off on the lent
// machines: the factories set NCCL_NVLS_ENABLE=0 unless it is already set.
// They also set NCCL_RUNTIME_CONNECT=0 unless set, so that every connection
// is made during the (bounded) init rather than at a collective's first
// launch on the blocking communicator the collectives use
// (nccl_communicator.h, Blocking). Other NCCL_* variables
// (NCCL_SOCKET_IFNAME, NCCL_DEBUG) pass through.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "distributed/communicator.h"
#include "distributed/launch_env.h"

namespace coppice {

// True when this build has CUDA, a GPU is visible and libnccl.so.2 loads
// (a CUDA build finds it at run time: tensor/cuda/lazy/library.h).
bool nccl_available();

// Why nccl_available() is false, e.g. "libnccl.so.2 could not be loaded
// (...). Looked in: ..."; "" when it is true.
std::string nccl_unavailable_reason();

struct NcclOptions {
  // Bounds each collective (counted from its issue, so work queued on the
  // default stream before it counts too) and the destructor's wait for
  // outstanding work.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Bounds the rendezvous and, again, the communicator's init (every rank
  // must have started by then); a field of its own because starting a job
  // may take longer than any one collective. The trainer sets both from
  // distributed.timeout_s.
  std::chrono::milliseconds init_timeout{std::chrono::seconds(300)};
};

// The communicator of rank env.rank of env.world_size on GPU `cuda_device`.
// Rank 0 makes NCCL's unique id and hands it to the others over TCP at
// env.master_addr:env.master_port, to ranks presenting env.job_token
// (distributed/tcp_rendezvous.h); then every
// rank joins the NCCL communicator. Collective over the job: every rank
// calls it. Makes `cuda_device` the calling thread's current CUDA device (a
// rank process works on one GPU). Throws coppice::Error naming the rank and
// what failed.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, int cuda_device,
                                                     const NcclOptions& options = {});

// The lower level, for ranks that share the id some other way (threads of one
// process, one per GPU): a fresh NCCL unique id as its 128 opaque bytes ...
std::string nccl_unique_id();
// ... and the communicator of `rank` of `world_size` on `cuda_device` that it
// names. All ranks of the world must call this concurrently.
std::unique_ptr<Communicator> make_nccl_communicator_from_id(const std::string& unique_id, int rank, int world_size,
                                                             int cuda_device, const NcclOptions& options = {});

}  // namespace coppice
