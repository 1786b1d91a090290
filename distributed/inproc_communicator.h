// The in-process backend: N ranks as threads of one process, meeting at a
// shared rendezvous, so that tests exercise every collective without GPUs.
//
// Each collective is a slot keyed by its sequence number. Every rank posts
// its call there and returns a Work at once; the rank that arrives last
// checks that all calls agree (else every rank's wait() throws, naming the op,
// its number and each rank's call) and computes the result once, from the
// inputs in rank order, so that it is bit-identical on every rank and from run
// to run (sums and averages add rank 0, then 1, ...; bf16 and f16 add in f32
// and round once; integers wrap around; max propagates NaN). Each rank's
// wait() then copies its share out. Tensors must be on the CPU.
//
// Faults never hang a waiting rank: wait() throws coppice::Error, on every
// rank, as soon as one rank has failed ("rank 1 failed: ..."), has ended
// without issuing the collective ("rank 1 ended without reaching barrier
// #3"), or has not issued it within the timeout counted from the first rank's
// arrival ("rank 1 did not reach all_reduce #7 within 5 s"). After such an
// error the world is aborted: further collectives throw the same error at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "distributed/communicator.h"

namespace coppice {

struct InprocOptions {
  // How long a waiting rank gives the others to reach a collective, counted
  // from the first rank's arrival at it.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// The state the ranks of one world share (defined in the .cc).
class InprocRendezvous;
std::shared_ptr<InprocRendezvous> make_inproc_rendezvous(int world_size, const InprocOptions& options = {});

class InprocCommunicator final : public Communicator {
 public:
  // Rank `rank` of the world `rendezvous` was made for. Use one communicator
  // per rank (and each from one thread at a time).
  InprocCommunicator(std::shared_ptr<InprocRendezvous> rendezvous, int rank);

  int rank() const override { return rank_; }
  int world_size() const override;
  std::string_view backend() const override { return "inproc"; }

  Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) override;
  Work broadcast(const Tensor& tensor, int root) override;
  Work all_gather(const Tensor& input) override;
  Work all_gather_v(const Tensor& input) override;
  Work reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::kSum) override;
  Work barrier() override;

  // This rank will issue nothing more: ranks waiting for a collective it
  // never issued fail at once instead of at the timeout. (run_inproc calls it.)
  void finish();
  // This rank failed: aborts the world with "rank R failed: <what>".
  void fail(std::string_view what);

 private:
  Work issue(Collective collective, const Tensor& tensor, ReduceOp reduce, int root);

  std::shared_ptr<InprocRendezvous> rendezvous_;
  int rank_;
  int64_t next_seq_ = 0;
};

// Runs fn(communicator) on `world_size` threads, one per rank, and returns
// when all have returned. When a rank throws, the world is aborted (the
// others' collectives fail within the timeout at the latest) and, once every
// thread has ended, the first exception thrown is rethrown here. A rank stuck
// in its own code (not in a collective) cannot be stopped: run_inproc then
// says so on stderr once and goes on waiting for it.
void run_inproc(int world_size, const std::function<void(Communicator&)>& fn, const InprocOptions& options = {});

}  // namespace coppice
