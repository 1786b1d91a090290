// NcclCommunicator: the Communicator over NCCL, one per rank, on one GPU
// (CUDA builds only; distributed/nccl.h has the factories every build has).
//
// Streams. Coppice runs everything on the legacy default stream of each
// device (tensor/cuda/stream.h). A collective is enqueued on the
// communicator's own cudaStreamNonBlocking stream after an event recorded on
// the default stream, so it reads its inputs only after the work queued
// before it, and overlaps with the work queued after it. Work::wait() polls
// the collective's completion event (with the timeout), so that once it
// returns the results are usable by anything, on any stream or the host.
// A Work dropped without wait() still orders the default stream after its
// collective, so that the caching allocator never hands its buffers to new
// work while NCCL is still using them.
//
// Tensors. CUDA tensors on the communicator's device are used in place. CPU
// tensors (metrics, a few scalars) are staged: copied to the device at issue,
// and back (into the tensor, or into a CPU result()) in wait(). Tensors on
// another GPU are refused. Validation is check_collective()'s (the same
// messages as the in-process backend).
//
// Blocking. The NCCL communicator is made nonblocking (a rank that never
// joins cannot hang the init: it is bounded) with every connection made
// there (NCCL_RUNTIME_CONNECT=0), then split into a blocking one sharing
// those connections, on which the collectives run: a nonblocking
// communicator finishes each group on a thread NCCL starts for it, about 50
// us a collective (issue 37). Issuing a collective records where its inputs
// are ready on the default stream and hands the NCCL calls to the
// communicator's CollectiveQueue (distributed/collective_queue.h), whose
// launcher thread enqueues them in issue order, so the caller never blocks in
// NCCL; wait() first waits for the launch, whose failure it throws. The
// queue's watchdog thread aborts the communicator when a collective has not
// ended by its deadline, whether or not a host thread waits for it
// (Work::wait_on_device), and also when its enqueue itself blocks in NCCL
// (ncclGroupEnd), which the abort frees. all_gather_v blocks until the ranks'
// sizes are known (one small all_gather) because its output is allocated
// from them. barrier()'s Work blocks in wait().
//
// Faults: see distributed/nccl.h. NCCL itself cannot check that the ranks'
// calls agree (communicator.h, Ordering): a mismatch hangs or corrupts until
// the timeout.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "distributed/communicator.h"
#include "distributed/nccl.h"

namespace coppice {

// The state a communicator shares with its Work handles (defined in the
// .cc), and the threads that enqueue its collectives and watch their
// deadlines (distributed/collective_queue.h).
struct NcclShared;
class CollectiveQueue;

class NcclCommunicator final : public Communicator {
 public:
  // Joins the NCCL communicator `id` names as `rank` of `world_size`, on GPU
  // `cuda_device`. Every rank of the world calls it concurrently (threads or
  // processes). Throws coppice::Error when NCCL fails or the others do not
  // join within options.timeout (the half-made communicator is aborted).
  NcclCommunicator(const ncclUniqueId& id, int rank, int world_size, int cuda_device, const NcclOptions& options = {});
  // Healthy: waits for outstanding work (up to the timeout), then finalizes
  // and destroys the NCCL communicator; aborts it instead when it was aborted
  // or the outstanding work does not finish. Never throws.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend() const override { return "nccl"; }
  int device() const { return device_; }

  Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) override;
  Work broadcast(const Tensor& tensor, int root) override;
  Work all_gather(const Tensor& input) override;
  Work all_gather_v(const Tensor& input) override;
  Work reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::kSum) override;
  Work barrier() override;

  // True once a fault (or abort()) has begun aborting the communicator:
  // from then on every call throws the reason.
  bool aborted() const;
  // Aborts the NCCL communicator (a rank that knows the job failed, so that
  // it need not wait out the timeout). Later calls throw "<why>". An NCCL
  // call under way on the launcher's thread ends first (at most
  // min(timeout, 10 s), then the abort goes ahead under it).
  void abort(std::string_view why);

 private:
  Work issue(Collective collective, const Tensor& tensor, ReduceOp reduce, int root);
  void split_blocking(const std::string& what, std::chrono::steady_clock::time_point deadline);

  std::shared_ptr<NcclShared> shared_;
  std::unique_ptr<CollectiveQueue> queue_;
  int rank_;
  int world_size_;
  int device_;
  int64_t next_seq_ = 0;
};

}  // namespace coppice
