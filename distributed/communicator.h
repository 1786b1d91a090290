// The Communicator: collectives over the ranks of a data-parallel job
// (docs/architecture.md, layer 6). Backends: the in-process one
// (distributed/inproc_communicator.h: ranks as threads, for tests) and, later,
// NCCL (one process per GPU).
//
// Ordering. Every rank issues the same collectives in the same order; the
// k-th collective a rank issues (its sequence number, counted from 0) meets
// the k-th of every other rank, so they must agree on the op, the dtype, the
// shape (all_gather_v: all but dim 0), the reduce op and the root. A backend
// that can check this (the in-process one does) raises coppice::Error on every
// rank naming the op, its number and each rank's call; one that cannot (NCCL)
// hangs or corrupts, as NCCL does, until its timeout. One Communicator belongs
// to one rank and is used from one thread at a time.
//
// Asynchrony. Every collective returns a Work handle at once. Inputs must stay
// untouched until wait() returns; results (the tensor updated in place, or
// Work::result()) are defined only after wait(). Several collectives may be in
// flight; they complete in issue order, and one that reads a tensor an earlier
// one writes in place sees the written values (as on a stream). On the CPU, wait() blocks until the
// collective is done. A stream-ordered backend (NCCL) enqueues the collective
// on its own stream after an event recorded on the caller's stream, and its
// wait() polls the collective's completion event with its timeout, so that
// the results are usable by anything once it returns; wait_on_device()
// instead makes the caller's stream wait on that event and returns without
// waiting for the collective (the host stays ahead of the GPU), a failure
// then found by a later wait() or by the backend's own deadline (NCCL aborts
// a collective past its timeout: distributed/nccl.h). On the CPU
// wait_on_device() is wait(). Work is a handle to a backend's WorkImpl so
// that either fits.
//
// Tensors are dense; in-place collectives (all_reduce, broadcast) need them
// contiguous too. Reductions (sum, average, max) take any floating or integer
// dtype except bool; average only floating ones. Data-moving collectives
// (broadcast, all_gather, all_gather_v) take any dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

enum class ReduceOp : uint8_t { kSum, kAverage, kMax };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "average", "max"

enum class Collective : uint8_t { kAllReduce, kBroadcast, kAllGather, kAllGatherV, kReduceScatter, kBarrier };
std::string_view collective_name(Collective c);  // "all_reduce", "broadcast", ...

// What a backend implements behind a Work handle.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  // Returns once the results are usable by the caller (see Ordering above);
  // throws coppice::Error when the collective failed. Calling it again returns
  // at once (or rethrows).
  virtual void wait() = 0;
  // Orders the work the caller queues next on its device after the
  // collective, and makes result() usable by that work, without blocking on
  // the collective (see Asynchrony above). The default waits.
  virtual void wait_on_device() { wait(); }
  // True once the collective has finished (successfully or not); never blocks.
  virtual bool is_completed() = 0;
  // The output of an out-of-place collective (all_gather, all_gather_v,
  // reduce_scatter) or the in-place tensor (all_reduce, broadcast); undefined
  // for barrier. Throws unless wait() has returned.
  virtual const Tensor& result() const = 0;
  // all_gather_v: every rank's size along dim 0, in rank order. Empty for the
  // other collectives. Throws unless wait() has returned.
  virtual const std::vector<int64_t>& sizes() const = 0;
};

// A cheap, shared handle to one issued collective.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  void wait() const { checked()->wait(); }
  void wait_on_device() const { checked()->wait_on_device(); }
  bool is_completed() const { return checked()->is_completed(); }
  const Tensor& result() const { return checked()->result(); }
  const std::vector<int64_t>& sizes() const { return checked()->sizes(); }
  WorkImpl* impl() const { return impl_.get(); }

 private:
  WorkImpl* checked() const {
    COPPICE_CHECK(impl_ != nullptr, "Work: use of an undefined Work handle");
    return impl_.get();
  }
  std::shared_ptr<WorkImpl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string_view backend() const = 0;  // "inproc", "nccl"

  // Reduces `tensor` over all ranks, in place, on every rank. Average divides
  // the sum by world_size().
  virtual Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) = 0;
  // Overwrites `tensor` on every rank with the root's, in place.
  virtual Work broadcast(const Tensor& tensor, int root) = 0;
  // result(): every rank's `input` (equal shapes, at least 1-D) concatenated
  // along dim 0 in rank order: [world_size * n, ...].
  virtual Work all_gather(const Tensor& input) = 0;
  // As all_gather, but the ranks' sizes along dim 0 may differ (the other
  // dims may not); sizes() gives them.
  virtual Work all_gather_v(const Tensor& input) = 0;
  // Reduces `input` (equal shapes, dim 0 divisible by world_size()) over all
  // ranks; result() is this rank's chunk of the reduction along dim 0:
  // [n / world_size, ...].
  virtual Work reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::kSum) = 0;
  // Completes once every rank has issued it.
  virtual Work barrier() = 0;
};

// What one rank asked for at one sequence number: the unit the in-process
// backend compares across ranks, and the text its errors print.
struct CollectiveCall {
  Collective collective = Collective::kBarrier;
  ReduceOp reduce = ReduceOp::kSum;  // all_reduce, reduce_scatter
  int root = 0;                      // broadcast
  DType dtype = DType::kF32;         // unused for barrier
  Shape shape;                       // unused for barrier

  // "all_reduce(sum) f32 [2, 3]", "broadcast(root 1) i64 [4]", "barrier".
  std::string to_string() const;
};

// Checks one rank's call on its own (dense, CPU or the backend's device is the
// backend's business; here: dtype against the op, dims, divisibility, root
// range, contiguity of in-place tensors) and returns its description. Throws
// coppice::Error naming the op. Backends call it when a collective is issued.
CollectiveCall check_collective(Collective collective, const Tensor& tensor, ReduceOp reduce, int root, int world_size);

// The first difference between two ranks' calls at one sequence number, as
// "op", "reduce op", "root", "dtype" or "shape"; empty when they agree.
std::string collective_mismatch(const CollectiveCall& a, const CollectiveCall& b);

}  // namespace coppice
