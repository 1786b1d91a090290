#include "distributed/inproc_communicator.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

namespace coppice {
namespace {

using Clock = std::chrono::steady_clock;

// One collective: every rank's call and input, and once done, every rank's output.
struct Slot {
  int64_t seq = 0;
  std::vector<std::optional<CollectiveCall>> calls;  // by rank; empty until the rank arrives
  std::vector<Tensor> inputs;
  int arrived = 0;
  Clock::time_point first_arrival;
  bool done = false;
  std::string error;            // set with `done` when the calls disagreed or the computation threw
  std::vector<Tensor> outputs;  // by rank
  std::vector<int64_t> sizes;   // all_gather_v
};

std::string seconds_text(std::chrono::milliseconds d) { return str_cat(d.count() / 1000.0, " s"); }

std::string ranks_text(const std::vector<int>& ranks) {
  return str_cat(ranks.size() == 1 ? "rank " : "ranks ", str_join(ranks, ", "));
}

int64_t nbytes(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }

void copy_bytes(const Tensor& dst, const Tensor& src) {
  if (nbytes(src) > 0) std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(nbytes(src)));
}

// A contiguous copy of a contiguous tensor.
Tensor copy_of(const Tensor& src) {
  Tensor out = Tensor::empty(src.shape(), src.dtype());
  copy_bytes(out, src);
  return out;
}

template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<Half> {
  using type = float;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};

template <typename A>
A combine(A acc, A x, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    if constexpr (std::is_floating_point_v<A>) {
      if (std::isnan(acc)) return acc;
      if (std::isnan(x)) return x;
    }
    return x > acc ? x : acc;
  }
  if constexpr (std::is_integral_v<A>) {  // wraps around instead of overflowing
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(x)));
  } else {
    return acc + x;
  }
}

// The reduction of `inputs` (contiguous, one shape and dtype), rank by rank.
Tensor reduce(const std::vector<Tensor>& inputs, ReduceOp op) {
  const Tensor& first = inputs[0];
  Tensor out = Tensor::empty(first.shape(), first.dtype());
  const int64_t n = first.numel();
  const int world = static_cast<int>(inputs.size());
  dispatch_dtype(first.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail("reduce: bool tensors cannot be reduced");  // check_collective refuses them first
    } else {
      using A = typename AccType<T>::type;
      std::vector<const T*> in;
      for (const Tensor& t : inputs) in.push_back(static_cast<const T*>(t.data_ptr()));
      T* o = static_cast<T*>(out.data_ptr());
      for (int64_t i = 0; i < n; ++i) {
        A acc = static_cast<A>(in[0][i]);
        for (int r = 1; r < world; ++r) acc = combine<A>(acc, static_cast<A>(in[r][i]), op);
        if constexpr (!std::is_integral_v<A>) {
          if (op == ReduceOp::kAverage) acc = acc / static_cast<A>(world);
        }
        o[i] = static_cast<T>(acc);
      }
    }
  });
  return out;
}

// `inputs` (contiguous) concatenated along dim 0.
Tensor concat_dim0(const std::vector<Tensor>& inputs) {
  Shape shape = inputs[0].shape();
  shape[0] = 0;
  for (const Tensor& t : inputs) shape[0] += t.size(0);
  Tensor out = Tensor::empty(shape, inputs[0].dtype());
  char* dst = static_cast<char*>(out.data_ptr());
  for (const Tensor& t : inputs) {
    const int64_t b = nbytes(t);
    if (b > 0) std::memcpy(dst, t.data_ptr(), static_cast<size_t>(b));
    dst += b;
  }
  return out;
}

// Fills slot.outputs (and writes in-place results) once every rank has posted.
void compute(Slot& slot) {
  const CollectiveCall& call = *slot.calls[0];
  const int world = static_cast<int>(slot.inputs.size());
  slot.outputs.assign(world, Tensor());
  switch (call.collective) {
    case Collective::kBarrier: break;
    case Collective::kAllReduce: {
      Tensor reduced = reduce(slot.inputs, call.reduce);
      for (int r = 0; r < world; ++r) {
        copy_bytes(slot.inputs[r], reduced);
        slot.outputs[r] = slot.inputs[r];
      }
      break;
    }
    case Collective::kReduceScatter: {
      std::vector<Tensor> inputs;
      for (const Tensor& t : slot.inputs) inputs.push_back(t.contiguous());
      Tensor reduced = reduce(inputs, call.reduce);
      const int64_t chunk = reduced.size(0) / world;
      for (int r = 0; r < world; ++r) slot.outputs[r] = copy_of(reduced.narrow(0, r * chunk, chunk));
      break;
    }
    case Collective::kBroadcast: {
      const Tensor& src = slot.inputs[call.root];
      for (int r = 0; r < world; ++r) {
        if (r != call.root) copy_bytes(slot.inputs[r], src);
        slot.outputs[r] = slot.inputs[r];
      }
      break;
    }
    case Collective::kAllGather:
    case Collective::kAllGatherV: {
      std::vector<Tensor> inputs;
      for (const Tensor& t : slot.inputs) {
        inputs.push_back(t.contiguous());
        if (call.collective == Collective::kAllGatherV) slot.sizes.push_back(t.size(0));
      }
      Tensor gathered = concat_dim0(inputs);
      for (int r = 0; r < world; ++r) slot.outputs[r] = r == 0 ? gathered : copy_of(gathered);
      break;
    }
  }
}

}  // namespace

class InprocRendezvous {
 public:
  InprocRendezvous(int world_size, const InprocOptions& options)
      : world_size_(world_size), options_(options), finished_(world_size, false) {}

  int world_size() const { return world_size_; }

  // Adds `rank`'s call to collective `seq`; the last rank to arrive checks
  // the calls and computes the outputs. Throws when the world has aborted.
  std::shared_ptr<Slot> post(int rank, int64_t seq, const CollectiveCall& call, const Tensor& input) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!abort_reason_.empty()) throw Error(abort_reason_);
    std::shared_ptr<Slot>& entry = pending_[seq];
    if (!entry) {
      entry = std::make_shared<Slot>();
      entry->seq = seq;
      entry->calls.resize(world_size_);
      entry->inputs.resize(world_size_);
      entry->first_arrival = Clock::now();
    }
    std::shared_ptr<Slot> slot = entry;
    slot->calls[rank] = call;
    slot->inputs[rank] = input;
    if (++slot->arrived < world_size_) {
      cv_.notify_all();
      return slot;
    }
    pending_.erase(seq);
    std::string error = check_calls(*slot);
    if (!error.empty()) {
      slot->error = error;
      slot->done = true;
      abort(error);
      return slot;
    }
    // Nobody else touches a slot that every rank has posted to until it is
    // done, so compute without holding the lock.
    lock.unlock();
    try {
      compute(*slot);
    } catch (const std::exception& e) { error = str_cat(collective_name(call.collective), " #", seq, ": ", e.what()); }
    lock.lock();
    slot->error = error;
    slot->done = true;
    if (!error.empty()) abort(error);
    cv_.notify_all();
    return slot;
  }

  // Blocks until `slot` is done; throws when it failed, the world aborted, or
  // a rank it waits for ended, failed or timed out.
  void wait(int rank, const Slot& slot) {
    std::unique_lock<std::mutex> lock(mu_);
    const Clock::time_point deadline = slot.first_arrival + options_.timeout;
    for (;;) {
      if (slot.done) {
        if (!slot.error.empty()) throw Error(slot.error);
        return;
      }
      if (!abort_reason_.empty()) throw Error(abort_reason_);
      std::vector<int> missing, ended;
      for (int r = 0; r < world_size_; ++r) {
        if (slot.calls[r]) continue;
        missing.push_back(r);
        if (finished_[r]) ended.push_back(r);
      }
      if (missing.empty()) {  // the last rank is computing
        cv_.wait(lock);
        continue;
      }
      const std::string what = str_cat(collective_name(slot.calls[rank]->collective), " #", slot.seq);
      if (!ended.empty()) {
        abort(str_cat(ranks_text(ended), " ended without reaching ", what));
      } else if (Clock::now() >= deadline) {
        abort(str_cat(ranks_text(missing), " did not reach ", what, " within ", seconds_text(options_.timeout)));
      } else {
        cv_.wait_until(lock, deadline);
      }
    }
  }

  bool completed(const Slot& slot) {
    std::lock_guard<std::mutex> lock(mu_);
    return slot.done || !abort_reason_.empty();
  }

  void finish(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[rank] = true;
    cv_.notify_all();
  }

  void fail(int rank, std::string_view what) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[rank] = true;
    abort(str_cat("rank ", rank, " failed: ", what));
  }

 private:
  // The first reason wins; with mu_ held.
  void abort(const std::string& reason) {
    if (abort_reason_.empty()) abort_reason_ = reason;
    cv_.notify_all();
  }

  // Empty when every rank's call agrees with rank 0's; else the error.
  std::string check_calls(const Slot& slot) const {
    const CollectiveCall& first = *slot.calls[0];
    std::string what;
    bool same_op = true;
    for (int r = 1; r < world_size_; ++r) {
      std::string d = collective_mismatch(first, *slot.calls[r]);
      if (what.empty()) what = d;
      if (slot.calls[r]->collective != first.collective) same_op = false;
    }
    if (what.empty()) return "";
    std::vector<std::string> calls;
    for (int r = 0; r < world_size_; ++r) calls.push_back(str_cat("rank ", r, " ", slot.calls[r]->to_string()));
    return str_cat(same_op ? collective_name(first.collective) : std::string_view("collective"), " #", slot.seq,
                   ": the ranks' calls differ in ", what, ": ", str_join(calls, "; "));
  }

  const int world_size_;
  const InprocOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::shared_ptr<Slot>> pending_;  // collectives some ranks have not reached
  std::vector<bool> finished_;
  std::string abort_reason_;
};

namespace {

class InprocWork final : public WorkImpl {
 public:
  InprocWork(std::shared_ptr<InprocRendezvous> rendezvous, std::shared_ptr<Slot> slot, int rank)
      : rendezvous_(std::move(rendezvous)), slot_(std::move(slot)), rank_(rank) {}

  void wait() override {
    rendezvous_->wait(rank_, *slot_);
    waited_.store(true);
  }
  bool is_completed() override { return waited_.load() || rendezvous_->completed(*slot_); }
  const Tensor& result() const override {
    check_waited("result");
    return slot_->outputs[rank_];
  }
  const std::vector<int64_t>& sizes() const override {
    check_waited("sizes");
    return slot_->sizes;
  }

 private:
  void check_waited(const char* what) const {
    COPPICE_CHECK(waited_.load(), collective_name(slot_->calls[rank_]->collective), " #", slot_->seq, ": ", what,
                  "() before wait() returned");
  }

  std::shared_ptr<InprocRendezvous> rendezvous_;
  std::shared_ptr<Slot> slot_;
  int rank_;
  std::atomic<bool> waited_{false};
};

}  // namespace

std::shared_ptr<InprocRendezvous> make_inproc_rendezvous(int world_size, const InprocOptions& options) {
  COPPICE_CHECK(world_size >= 1, "inproc: world_size must be >= 1, got ", world_size);
  COPPICE_CHECK(options.timeout.count() > 0, "inproc: timeout must be > 0, got ", options.timeout.count(), " ms");
  return std::make_shared<InprocRendezvous>(world_size, options);
}

InprocCommunicator::InprocCommunicator(std::shared_ptr<InprocRendezvous> rendezvous, int rank)
    : rendezvous_(std::move(rendezvous)), rank_(rank) {
  COPPICE_CHECK(rendezvous_ != nullptr, "InprocCommunicator: null rendezvous");
  COPPICE_CHECK(rank >= 0 && rank < rendezvous_->world_size(), "InprocCommunicator: rank ", rank,
                " is not in a world of size ", rendezvous_->world_size());
}

int InprocCommunicator::world_size() const { return rendezvous_->world_size(); }

Work InprocCommunicator::issue(Collective collective, const Tensor& tensor, ReduceOp reduce, int root) {
  CollectiveCall call = check_collective(collective, tensor, reduce, root, world_size());
  if (collective != Collective::kBarrier) {
    COPPICE_CHECK(tensor.device().is_cpu(), collective_name(collective),
                  ": the in-process backend takes CPU tensors, got one on ", tensor.device().to_string());
  }
  std::shared_ptr<Slot> slot = rendezvous_->post(rank_, next_seq_, call, tensor);
  ++next_seq_;
  return Work(std::make_shared<InprocWork>(rendezvous_, std::move(slot), rank_));
}

Work InprocCommunicator::all_reduce(const Tensor& tensor, ReduceOp op) {
  return issue(Collective::kAllReduce, tensor, op, 0);
}
Work InprocCommunicator::broadcast(const Tensor& tensor, int root) {
  return issue(Collective::kBroadcast, tensor, ReduceOp::kSum, root);
}
Work InprocCommunicator::all_gather(const Tensor& input) {
  return issue(Collective::kAllGather, input, ReduceOp::kSum, 0);
}
Work InprocCommunicator::all_gather_v(const Tensor& input) {
  return issue(Collective::kAllGatherV, input, ReduceOp::kSum, 0);
}
Work InprocCommunicator::reduce_scatter(const Tensor& input, ReduceOp op) {
  return issue(Collective::kReduceScatter, input, op, 0);
}
Work InprocCommunicator::barrier() { return issue(Collective::kBarrier, Tensor(), ReduceOp::kSum, 0); }

void InprocCommunicator::finish() { rendezvous_->finish(rank_); }
void InprocCommunicator::fail(std::string_view what) { rendezvous_->fail(rank_, what); }

namespace {

std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) { return ex.what(); } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace

void run_inproc(int world_size, const std::function<void(Communicator&)>& fn, const InprocOptions& options) {
  std::shared_ptr<InprocRendezvous> rendezvous = make_inproc_rendezvous(world_size, options);
  std::vector<std::unique_ptr<InprocCommunicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<InprocCommunicator>(rendezvous, r));

  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::exception_ptr first;
  Clock::time_point first_at;
  auto record = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!first) {
      first = std::move(e);
      first_at = Clock::now();
    }
  };

  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    InprocCommunicator& comm = *comms[r];
    try {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++running;
      }
      threads.emplace_back([&fn, &comm, &record, &mu, &cv, &running] {
        try {
          fn(comm);
          comm.finish();
        } catch (...) {
          std::exception_ptr e = std::current_exception();
          record(e);  // before fail(): the cause is recorded before the errors it causes
          comm.fail(exception_text(e));
        }
        std::lock_guard<std::mutex> lock(mu);
        --running;
        cv.notify_all();
      });
    } catch (...) {  // could not start the thread
      {
        std::lock_guard<std::mutex> lock(mu);
        --running;
      }
      std::exception_ptr e = std::current_exception();
      record(e);
      for (int q = r; q < world_size; ++q) comms[q]->fail(str_cat("could not start its thread: ", exception_text(e)));
      break;
    }
  }

  {
    std::unique_lock<std::mutex> lock(mu);
    bool warned = false;
    while (running > 0) {
      if (first && !warned) {
        // Every rank in a collective fails within the timeout; one that is
        // still running after twice that is stuck in its own code.
        if (!cv.wait_until(lock, first_at + 2 * options.timeout, [&] { return running == 0; })) {
          std::cerr << "run_inproc: " << running << " of " << world_size << " ranks still running "
                    << seconds_text(2 * options.timeout) << " after the first error (" << exception_text(first)
                    << "); waiting for them to return" << std::endl;
          warned = true;
        }
      } else {
        cv.wait(lock);
      }
    }
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace coppice
