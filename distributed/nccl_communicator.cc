#include "distributed/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/collective_queue.h"
#include "distributed/tcp_rendezvous.h"
#include "tensor/backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/lazy/library.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

namespace coppice {

using Clock = std::chrono::steady_clock;

namespace {

std::string seconds_text(std::chrono::milliseconds d) { return str_cat(d.count() / 1000.0, " s"); }

// NVLS multicast must stay off on the lent machines (see distributed/nccl.h);
// NCCL reads its environment once, at its first call, so set it before any.
// NCCL_RUNTIME_CONNECT=0: every connection is made at init, which is
// bounded, rather than at a collective's first launch, which on the blocking
// communicator the collectives use would not be (NcclCommunicator's
// constructor).
void ensure_nccl_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    ::setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  });
}

std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  // libnccl.so.2 is found at run time (tensor/cuda/lazy/library.h): missing, it says so.
  if (r == ncclSystemError) {
    std::string missing = cuda::cuda_library_load_error(cuda::CudaLibrary::kNccl);
    if (!missing.empty()) return missing;
  }
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') s += str_cat(" (", last, ")");
  return s;
}

ncclDataType_t nccl_dtype(DType dtype, std::string_view op) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    case DType::kBool: return ncclUint8;  // data-moving collectives only (check_collective refuses reductions)
  }
  fail("nccl: ", op, ": dtype ", dtype_name(dtype), " is not supported");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  fail("nccl: unknown reduce op");
}

// How a host thread waits for a collective: it yields for the first kSpin
// (a step's collectives end within a few milliseconds, and the GPU idles
// from the moment one ends until this thread sees it and launches what
// follows), then sleeps a little longer each time, up to kMaxSleep, so that
// a long wait (a slow peer) does not burn a core. With sleeps of up to 1 ms
// from the 65th poll on, end()'s wait for the last bucket left the GPU idle
// for 0.8 ms a GPT step (tools/device/run_dp_timeline.sh, 2 x H200).
class Backoff {
 public:
  static constexpr std::chrono::microseconds kSpin{5000};
  static constexpr std::chrono::microseconds kMaxSleep{100};

  void pause() {
    if (Clock::now() - start_ < kSpin) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, kMaxSleep);
  }

 private:
  Clock::time_point start_ = Clock::now();
  std::chrono::microseconds delay_{10};
};

// `comm`'s asynchronous state: ncclSuccess, ncclInProgress or an error.
ncclResult_t async_error(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  return r != ncclSuccess ? r : state;
}

}  // namespace

// What a communicator and its Work handles share: the NCCL communicator, its
// stream and whether (and why) it was aborted.
struct NcclShared {
  int rank = 0;
  int world_size = 1;
  int device = 0;
  NcclOptions options;
  cudaStream_t stream = nullptr;

  // One thread at a time in the NCCL calls on `comm` and `parent` that other
  // threads may race: NCCL forbids concurrent calls on one communicator, or
  // on a parent and a child that shares its connections (splitShare). The
  // launcher holds it while it enqueues (not while the collective runs), the
  // destructor while it finalizes and destroys, abort() while it aborts.
  // Taken before `mu`, never while holding it. Left out: async_state() and
  // last_error() (under `mu`), which on the blocking communicator only read
  // NCCL's error state and must go on while an enqueue blocks; and the
  // constructor, whose communicator no other thread knows yet.
  std::timed_mutex nccl_calls;
  // The longest abort() waits for nccl_calls (or the timeout, if shorter).
  static constexpr std::chrono::seconds kAbortWait{10};

  mutable std::mutex mu;
  // The communicator the collectives use (blocking; the nonblocking one
  // during init), and the nonblocking one it was split from, whose
  // connections it shares. Null once destroyed or aborted.
  ncclComm_t comm = nullptr;
  ncclComm_t parent = nullptr;
  std::string abort_reason;  // non-empty once no collective may run

  ~NcclShared() {
    // Only reached with a live comm when the constructor failed half-way.
    if (comm != nullptr) ncclCommAbort(comm);
    if (parent != nullptr) ncclCommAbort(parent);
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    for (cudaEvent_t e : free_events) cudaEventDestroy(e);
    if (stream != nullptr) cudaStreamDestroy(stream);  // returns at once; the stream goes when its work is done
    if (previous >= 0) cudaSetDevice(previous);
  }

  // Events a collective records, reused: creating two a collective cost the
  // issuing thread a few microseconds each. An event goes back once nothing
  // will wait on its last record again (a later record replaces it).
  std::mutex events_mu;
  std::vector<cudaEvent_t> free_events;

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(events_mu);
      if (!free_events.empty()) {
        cudaEvent_t e = free_events.back();
        free_events.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    COPPICE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "nccl");
    return e;
  }

  void give_event(cudaEvent_t e) {
    if (e == nullptr) return;
    std::lock_guard<std::mutex> lock(events_mu);
    free_events.push_back(e);
  }

  std::string where() const { return str_cat("rank ", rank); }

  // Throws the abort reason once there is one.
  void check_usable() const {
    std::lock_guard<std::mutex> lock(mu);
    if (!abort_reason.empty()) throw Error(abort_reason);
  }

  // Aborts the NCCL communicator (once; the first reason is kept). The
  // reason is set first, so that the other threads stop at once. Then it
  // waits for an NCCL call on another thread to return (nccl_calls), but not
  // for ever: an enqueue can hang in NCCL (its queue to the GPU full behind a
  // collective that a dead peer never ends), and only the abort frees it.
  // Past the bound it aborts under that call, which NCCL forbids and may not
  // survive, since a rank that never ends is worse. Never call it while
  // holding nccl_calls or `mu`.
  void abort(const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (abort_reason.empty()) abort_reason = reason;
    }
    const std::chrono::milliseconds bound = std::min<std::chrono::milliseconds>(options.timeout, kAbortWait);
    std::unique_lock<std::timed_mutex> calls(nccl_calls, std::defer_lock);
    const bool alone = calls.try_lock_for(bound);
    std::lock_guard<std::mutex> lock(mu);
    if (!alone && (comm != nullptr || parent != nullptr)) {
      std::cerr << "nccl: " << where() << ": an NCCL call on another thread did not return within "
                << seconds_text(bound) << "; aborting the communicator under it" << std::endl;
    }
    if (comm != nullptr) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
    if (parent != nullptr) {
      ncclCommAbort(parent);
      parent = nullptr;
    }
  }

  [[noreturn]] void abort_and_throw(const std::string& reason) {
    abort(reason);
    throw Error(check_reason());
  }

  std::string check_reason() const {
    std::lock_guard<std::mutex> lock(mu);
    return abort_reason;
  }

  // NCCL's asynchronous state: ncclSuccess, ncclInProgress or an error.
  ncclResult_t async_state() const {
    std::lock_guard<std::mutex> lock(mu);
    return comm == nullptr ? ncclInvalidUsage : async_error(comm);
  }

  std::string last_error() const {
    std::lock_guard<std::mutex> lock(mu);
    const char* last = ncclGetLastError(comm);
    return last != nullptr ? std::string(last) : std::string();
  }

  std::string failed_text(const std::string& what, ncclResult_t r) const {
    std::string s = str_cat("nccl: ", what, " failed on ", where(), ": ", ncclGetErrorString(r));
    const std::string last = last_error();
    if (!last.empty()) s += str_cat(" (", last, ")");
    return s + "; the communicator was aborted";
  }

  std::string timeout_text(const std::string& what) const {
    return str_cat("nccl: ", what, " did not complete within ", seconds_text(options.timeout), " on ", where(),
                   " (a peer died or hung); the communicator was aborted");
  }

  // After a nonblocking NCCL call returned `r`: waits until NCCL has finished
  // enqueuing (ncclInProgress turns into ncclSuccess), at most until
  // `deadline`. Aborts and throws on an error or the deadline.
  void settle(ncclResult_t r, const std::string& what, Clock::time_point deadline) {
    if (r != ncclSuccess && r != ncclInProgress) abort_and_throw(failed_text(what, r));
    Backoff backoff;
    while (r == ncclInProgress) {
      r = async_state();
      if (r == ncclSuccess) break;
      if (r != ncclInProgress) abort_and_throw(failed_text(what, r));
      if (Clock::now() >= deadline) abort_and_throw(timeout_text(what));
      backoff.pause();
    }
  }

  // Blocks until `done` (recorded on `stream` after the collective) has
  // fired; aborts and throws when NCCL reports an error or `deadline` passes.
  void wait_event(cudaEvent_t done, const std::string& what, Clock::time_point deadline) {
    Backoff backoff;
    for (;;) {
      check_usable();
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        abort_and_throw(str_cat("nccl: ", what, " failed on ", where(), ": CUDA error ", cudaGetErrorName(e), ": ",
                                cudaGetErrorString(e), "; the communicator was aborted"));
      }
      const ncclResult_t state = async_state();
      if (state != ncclSuccess && state != ncclInProgress) abort_and_throw(failed_text(what, state));
      if (Clock::now() >= deadline) {
        if (cudaEventQuery(done) == cudaSuccess) return;  // finished while we looked at the clock
        abort_and_throw(timeout_text(what));
      }
      backoff.pause();
    }
  }
};

// One issued collective. The issuing thread records `ready_` on the default
// stream (where the collective's inputs are made) and hands the NCCL calls
// to the communicator's CollectiveQueue, whose launcher thread makes NCCL's
// stream wait for it, enqueues the calls and records `done_` after them, and
// whose watchdog aborts the communicator when it has not ended by its
// deadline, whether it is still being enqueued or running on the GPU.
class NcclWork final : public WorkImpl, public QueuedCollective {
 public:
  using Calls = std::function<ncclResult_t(ncclComm_t)>;

  NcclWork(std::shared_ptr<NcclShared> shared, std::string name)
      : shared_(std::move(shared)), name_(std::move(name)), issued_(Clock::now()) {}

  ~NcclWork() override {
    // Dropped without a successful wait(): the buffers in keep_ go back to
    // the caching allocator, which reuses them in default-stream order. Make
    // the default stream wait for the collective (an aborted one ends too: its
    // kernels watch NCCL's abort flag) so that no new work scribbles on them
    // while NCCL still reads or writes them. (The launcher holds the work
    // until it is enqueued, so this never runs before.)
    if (state_.load(std::memory_order_acquire) == kEnqueued && !waited_) {
      int previous = -1;
      if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(shared_->device) == cudaSuccess) {
        cudaStreamWaitEvent(cuda::current_stream(shared_->device), done_, 0);
        cudaSetDevice(previous);
      }
      cudaGetLastError();
    }
    shared_->give_event(ready_);
    shared_->give_event(done_);
  }

  // On the issuing thread, with the device current: marks where on the
  // default stream the collective's inputs are ready.
  void record_ready(Calls calls) {
    shared_->check_usable();
    ready_ = shared_->take_event();
    done_ = shared_->take_event();
    COPPICE_CUDA_CHECK(cudaEventRecord(ready_, cuda::current_stream(shared_->device)), "nccl");
    calls_ = std::move(calls);
  }

  // On the queue's launcher thread: enqueues the calls (made inside one
  // group) on the communicator's stream, after `ready_`. A failure is kept
  // for wait().
  void launch() noexcept override {
    try {
      shared_->check_usable();
      COPPICE_CUDA_CHECK(cudaStreamWaitEvent(shared_->stream, ready_, 0), "nccl");
      ncclResult_t first = ncclSuccess;
      {
        // From reading `comm` to ncclGroupEnd, no abort may run on another
        // thread (NcclShared::nccl_calls). Not under `mu`: a call that blocks
        // (it should not: connections are made at init) must leave the other
        // threads free to poll, and abort() free to stop waiting for it.
        std::lock_guard<std::timed_mutex> calls(shared_->nccl_calls);
        ncclComm_t comm;
        {
          std::lock_guard<std::mutex> lock(shared_->mu);
          if (!shared_->abort_reason.empty()) throw Error(shared_->abort_reason);  // an abort is under way
          comm = shared_->comm;
        }
        first = ncclGroupStart();
        if (first == ncclSuccess) {
          ncclResult_t r = calls_(comm);
          if (r != ncclSuccess && r != ncclInProgress) first = r;
          r = ncclGroupEnd();
          if (first == ncclSuccess) first = r;
        }
      }
      // After the lock is released: on a failure settle() aborts, which takes it.
      shared_->settle(first, name_, deadline());
      COPPICE_CUDA_CHECK(cudaEventRecord(done_, shared_->stream), "nccl");
      calls_ = nullptr;
      state_.store(kEnqueued, std::memory_order_release);
    } catch (const std::exception& e) {
      calls_ = nullptr;
      launch_error_ = e.what();
      state_.store(kFailed, std::memory_order_release);
    }
  }

  void wait() override {
    if (waited_) return;
    if (!error_.empty()) throw Error(error_);
    try {
      wait_enqueued();
      shared_->wait_event(done_, name_, deadline());
      // Staged CPU tensors come back now; the copies run on the default
      // stream, after the collective (the host has seen it finish).
      cuda::DeviceGuard guard(shared_->device);
      if (cpu_target_.defined()) {
        cpu_target_.copy_(device_result_);
        result_ = cpu_target_;
      } else if (result_to_cpu_) {
        result_ = device_result_.to(Device::cpu());
      } else {
        result_ = device_result_;
      }
      keep_.clear();
      waited_ = true;
    } catch (const std::exception& e) {
      error_ = e.what();
      throw;
    }
  }

  // The default stream waits for `done_` on the device. A CPU-staged
  // result needs the host, so it waits as wait() does.
  void wait_on_device() override {
    if (waited_ || on_device_) return;
    if (!error_.empty()) throw Error(error_);
    if (cpu_target_.defined() || result_to_cpu_) {
      wait();
      return;
    }
    try {
      wait_enqueued();
      shared_->check_usable();
      cuda::DeviceGuard guard(shared_->device);
      COPPICE_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(shared_->device), done_, 0), "nccl");
      result_ = device_result_;
      on_device_ = true;
    } catch (const std::exception& e) {
      error_ = e.what();
      throw;
    }
  }

  // True once the collective has ended on the GPU, or failed (the queue's
  // watchdog asks, on its thread, from the launch on: false until enqueued).
  bool finished() override {
    const int state = state_.load(std::memory_order_acquire);
    return state == kFailed || (state == kEnqueued && cudaEventQuery(done_) != cudaErrorNotReady);
  }

  bool is_completed() override {
    if (waited_ || !error_.empty()) return true;
    const int state = state_.load(std::memory_order_acquire);
    if (state == kFailed || !shared_->check_reason().empty()) return true;
    return state == kEnqueued && cudaEventQuery(done_) == cudaSuccess;
  }

  const Tensor& result() const override {
    check_waited("result");
    return result_;
  }
  const std::vector<int64_t>& sizes() const override {
    check_waited("sizes");
    return sizes_;
  }

  Clock::time_point deadline() const override { return issued_ + shared_->options.timeout; }
  const std::string& name() const override { return name_; }

  // Set by the communicator when issuing.
  std::vector<Tensor> keep_;    // inputs and staging buffers, alive until the collective is done
  Tensor device_result_;        // on the GPU
  Tensor cpu_target_;           // a staged in-place CPU tensor, written back in wait()
  bool result_to_cpu_ = false;  // an out-of-place result for a CPU input
  Tensor result_;               // set in wait()
  std::vector<int64_t> sizes_;

 private:
  static constexpr int kQueued = 0, kEnqueued = 1, kFailed = 2;

  // Until the launcher has enqueued the calls (it settles within the
  // deadline, or fails); its failure is this work's.
  void wait_enqueued() {
    Backoff backoff;
    for (;;) {
      const int state = state_.load(std::memory_order_acquire);
      if (state == kEnqueued) return;
      if (state == kFailed) throw Error(launch_error_);
      if (Clock::now() >= deadline()) shared_->abort_and_throw(shared_->timeout_text(name_));
      backoff.pause();
    }
  }

  void check_waited(const char* what) const {
    COPPICE_CHECK(waited_ || on_device_, "nccl: ", name_, ": ", what, "() before wait() returned");
  }

  std::shared_ptr<NcclShared> shared_;
  std::string name_;
  Clock::time_point issued_;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  Calls calls_;
  std::atomic<int> state_{kQueued};
  std::string launch_error_;  // written before state_ turns kFailed
  bool waited_ = false;
  bool on_device_ = false;  // wait_on_device() returned: result_ is usable by the default stream
  std::string error_;
};

namespace {

char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// Shape with dim 0 replaced.
Shape with_dim0(Shape shape, int64_t n) {
  shape[0] = n;
  return shape;
}

}  // namespace

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int rank, int world_size, int cuda_device,
                                   const NcclOptions& options)
    : shared_(std::make_shared<NcclShared>()), rank_(rank), world_size_(world_size), device_(cuda_device) {
  COPPICE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "nccl: rank ", rank,
                " is not a rank of a world of size ", world_size);
  COPPICE_CHECK(options.timeout.count() > 0 && options.init_timeout.count() > 0, "nccl: the timeouts must be > 0, got ",
                options.timeout.count(), " ms and ", options.init_timeout.count(), " ms (init)");
  const int devices = cuda_device_count();
  COPPICE_CHECK(cuda_device >= 0 && cuda_device < devices, "nccl: rank ", rank, ": cuda:", cuda_device,
                " does not exist (", devices, " visible)");
  ensure_nccl_env();
  shared_->rank = rank;
  shared_->world_size = world_size;
  shared_->device = cuda_device;
  shared_->options = options;

  cuda::DeviceGuard guard(cuda_device);
  COPPICE_CUDA_CHECK(cudaStreamCreateWithFlags(&shared_->stream, cudaStreamNonBlocking), "nccl");

  // Nonblocking, so that a peer that never joins cannot hang us here.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const std::string what = str_cat("init of rank ", rank, " of ", world_size, " on cuda:", cuda_device);
  const Clock::time_point deadline = Clock::now() + options.init_timeout;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->comm = comm;
  }
  if (comm == nullptr && r != ncclSuccess && r != ncclInProgress) {
    fail("nccl: ", what, " failed: ", nccl_error_text(r, nullptr));
  }
  try {
    shared_->settle(r, what, deadline);
  } catch (const Error&) {
    // settle's timeout text speaks of a peer that died or hung; at init the
    // likelier cause is a rank that was never started.
    const std::string reason = shared_->check_reason();
    if (reason.find("did not complete within") != std::string::npos) {
      throw Error(str_cat("nccl: ", what, " did not complete within ", seconds_text(options.init_timeout),
                          " (did every rank start and reach it?); the communicator was aborted"));
    }
    throw;
  }
  split_blocking(what, deadline);
  CollectiveQueue::Hooks hooks;
  hooks.on_thread_start = [cuda_device] { cudaSetDevice(cuda_device); };
  // A collective past its deadline: so that work the GPU queued behind it
  // (Work::wait_on_device) ends, and the next call on any thread throws the
  // timeout, even when no host thread waits on it. The abort also frees an
  // enqueue blocked in ncclGroupEnd (NcclShared::abort).
  hooks.on_overdue = [shared = shared_](const std::string& overdue) {
    if (shared->check_reason().empty()) shared->abort(shared->timeout_text(overdue));
  };
  queue_ = std::make_unique<CollectiveQueue>(std::move(hooks));
}

// Collectives go to a blocking communicator split from the nonblocking one,
// sharing its connections and its abort flag (splitShare): on a nonblocking
// communicator NCCL finishes every group on a thread it starts for it and
// the caller polls until it has, 49-64 us a collective on an H200 against
// 7-10 us on a blocking one (tools/device/experiments/nccl_issue_cost.cc),
// which left the last gradient buckets' all-reduces waiting to be launched
// and the GPU idle between them (issue 37). The split is a job of the
// nonblocking parent, polled like the init and bounded by its deadline
// (aborting the parent aborts it); the child exists once it is done.
void NcclCommunicator::split_blocking(const std::string& what, Clock::time_point deadline) {
  ncclComm_t parent;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    parent = shared_->comm;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.splitShare = 1;
  ncclComm_t child = nullptr;
  const ncclResult_t r = ncclCommSplit(parent, /*color=*/0, /*key=*/rank_, &child, &config);
  const std::string split = str_cat(what, " (its split into the collectives' communicator)");
  shared_->settle(r == ncclSuccess ? ncclInProgress : r, split, deadline);
  if (child == nullptr) {
    shared_->abort_and_throw(str_cat("nccl: ", split, " made no communicator; the communicator was aborted"));
  }
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->parent = parent;
  shared_->comm = child;
}

NcclCommunicator::~NcclCommunicator() {
  try {
    queue_.reset();  // every collective issued is enqueued (or failed) first
    NcclShared& s = *shared_;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.comm == nullptr) {  // aborted already
        if (s.abort_reason.empty()) s.abort_reason = "nccl: the communicator was destroyed";
        return;
      }
    }
    cuda::DeviceGuard guard(device_);
    const Clock::time_point deadline = Clock::now() + s.options.timeout;
    // Outstanding collectives first: finalizing would wait for them without a bound.
    Backoff backoff;
    bool healthy = true;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(s.stream);
      if (e == cudaSuccess) break;
      const ncclResult_t state = s.async_state();
      if (e != cudaErrorNotReady || (state != ncclSuccess && state != ncclInProgress) || Clock::now() >= deadline) {
        cudaGetLastError();
        healthy = false;
        break;
      }
      backoff.pause();
    }
    // Finalizes `comm` (the blocking one returns when done; the nonblocking
    // one is polled) and destroys it.
    auto finalize = [&](ncclComm_t& comm) {
      ncclResult_t r = ncclCommFinalize(comm);
      while (r == ncclInProgress && Clock::now() < deadline) {
        backoff.pause();
        r = async_error(comm);
      }
      if (r != ncclSuccess) return false;
      std::lock_guard<std::mutex> lock(s.mu);
      ncclCommDestroy(comm);
      comm = nullptr;
      return true;
    };
    bool finalized = false;
    if (healthy) {
      // From the check to the last destroy, no abort may run (a Work waited
      // on another thread can abort).
      std::lock_guard<std::timed_mutex> calls(s.nccl_calls);
      bool live;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        live = s.comm != nullptr && s.abort_reason.empty();
      }
      finalized = live && finalize(s.comm) && (s.parent == nullptr || finalize(s.parent));
    }
    // After the lock is released: abort() takes it.
    if (finalized) {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.abort_reason.empty()) s.abort_reason = "nccl: the communicator was destroyed";
      return;
    }
    const std::string reason = s.check_reason();
    if (!reason.empty()) {  // aborted meanwhile on another thread (or still aborting: finish it)
      s.abort(reason);
      return;
    }
    std::cerr << "nccl: rank " << rank_ << ": outstanding work or finalization did not complete within "
              << seconds_text(s.options.timeout) << " (or NCCL reported an error) when the communicator was destroyed;"
              << " aborting it" << std::endl;
    s.abort("nccl: the communicator was destroyed with work that did not complete; it was aborted");
  } catch (...) {
    // A destructor must not throw; the best left to do is abort.
    try {
      shared_->abort("nccl: the communicator was aborted while being destroyed");
    } catch (...) {}
  }
}

bool NcclCommunicator::aborted() const {
  // The reason is set as an abort starts (NcclShared::abort), so that this
  // agrees with the calls that throw it.
  std::lock_guard<std::mutex> lock(shared_->mu);
  return !shared_->abort_reason.empty();
}

void NcclCommunicator::abort(std::string_view why) { shared_->abort(std::string(why)); }

Work NcclCommunicator::issue(Collective collective, const Tensor& tensor, ReduceOp reduce, int root) {
  shared_->check_usable();
  const CollectiveCall call = check_collective(collective, tensor, reduce, root, world_size_);
  const std::string_view op = collective_name(collective);
  const ncclDataType_t dtype = collective == Collective::kBarrier ? ncclInt32 : nccl_dtype(call.dtype, op);
  const Device device = Device::cuda(device_);
  bool on_cpu = false;
  if (collective != Collective::kBarrier) {
    on_cpu = tensor.device().is_cpu();
    COPPICE_CHECK(on_cpu || tensor.device() == device, "nccl: ", op, ": the tensor is on ", tensor.device().to_string(),
                  " but the communicator of rank ", rank_, " is on ", device.to_string(),
                  " (move it there, or pass a CPU tensor, which is staged)");
  }

  const int64_t seq = next_seq_++;
  auto work = std::make_shared<NcclWork>(shared_, str_cat(op, " #", seq));
  cuda::DeviceGuard guard(device_);
  // The calls run on the launcher thread, later: they capture by value.
  cudaStream_t stream = shared_->stream;
  auto enqueue = [&](const std::shared_ptr<NcclWork>& w, NcclWork::Calls calls) {
    w->record_ready(std::move(calls));
    queue_->submit(w);
  };

  // The input on this device, contiguous (a copy queued on the default
  // stream, before the collective's ready event, when it is not).
  Tensor in;
  if (collective != Collective::kBarrier) {
    in = on_cpu ? tensor.contiguous().to(device) : tensor.contiguous();
    work->keep_.push_back(in);
  }
  const size_t esize = collective == Collective::kBarrier ? 4 : dtype_size(call.dtype);

  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast: {
      const size_t count = static_cast<size_t>(in.numel());
      void* p = in.data_ptr();
      const ncclRedOp_t red = nccl_op(reduce);
      enqueue(work, [=](ncclComm_t comm) -> ncclResult_t {
        if (count == 0) return ncclSuccess;  // every rank has the same shape, so every rank skips it
        if (collective == Collective::kAllReduce) return ncclAllReduce(p, p, count, dtype, red, comm, stream);
        return ncclBroadcast(p, p, count, dtype, root, comm, stream);
      });
      work->device_result_ = in;  // `tensor` itself when it is on the device
      if (on_cpu) work->cpu_target_ = tensor;
      break;
    }
    case Collective::kAllGather: {
      Tensor out = Tensor::empty(with_dim0(in.shape(), in.size(0) * world_size_), TensorOptions(in.dtype(), device));
      work->keep_.push_back(out);
      const size_t count = static_cast<size_t>(in.numel());
      const void* src = in.data_ptr();
      void* dst = out.data_ptr();
      enqueue(work, [=](ncclComm_t comm) -> ncclResult_t {
        if (count == 0) return ncclSuccess;
        return ncclAllGather(src, dst, count, dtype, comm, stream);
      });
      work->device_result_ = out;
      work->result_to_cpu_ = on_cpu;
      break;
    }
    case Collective::kReduceScatter: {
      Tensor out = Tensor::empty(with_dim0(in.shape(), in.size(0) / world_size_), TensorOptions(in.dtype(), device));
      work->keep_.push_back(out);
      const size_t count = static_cast<size_t>(out.numel());
      const ncclRedOp_t red = nccl_op(reduce);
      const void* src = in.data_ptr();
      void* dst = out.data_ptr();
      enqueue(work, [=](ncclComm_t comm) -> ncclResult_t {
        if (count == 0) return ncclSuccess;
        return ncclReduceScatter(src, dst, count, dtype, red, comm, stream);
      });
      work->device_result_ = out;
      work->result_to_cpu_ = on_cpu;
      break;
    }
    case Collective::kAllGatherV: {
      // NCCL has no all_gather_v. First every rank's size along dim 0 (one
      // i64 each, waited for: the output is allocated from them), then one
      // broadcast per rank into its slice of the output, in one group.
      Tensor mine = from_vector<int64_t>({in.size(0)}, {1}).to(device);
      Tensor all = Tensor::empty({world_size_}, TensorOptions(DType::kI64, device));
      auto sizes_work = std::make_shared<NcclWork>(shared_, work->name() + " (exchanging sizes)");
      sizes_work->keep_ = {mine, all};
      const void* mine_p = mine.data_ptr();
      void* all_p = all.data_ptr();
      enqueue(sizes_work, [=](ncclComm_t comm) -> ncclResult_t {
        return ncclAllGather(mine_p, all_p, 1, ncclInt64, comm, stream);
      });
      sizes_work->wait();
      std::vector<int64_t> sizes = all.to_vector<int64_t>();
      int64_t total = 0;
      for (int r = 0; r < world_size_; ++r) {
        if (sizes[r] < 0) {
          shared_->abort_and_throw(str_cat("nccl: ", work->name(), ": rank ", r, " reported size ", sizes[r],
                                           " (corrupt exchange); the communicator was aborted"));
        }
        total += sizes[r];
      }
      const int64_t row = in.size(0) > 0 ? in.numel() / in.size(0) : shape_numel(with_dim0(in.shape(), 1));
      Tensor out = Tensor::empty(with_dim0(in.shape(), total), TensorOptions(in.dtype(), device));
      work->keep_.push_back(out);
      char* out_p = byte_ptr(out);
      const void* in_p = in.data_ptr();
      const int world = world_size_, me = rank_;
      enqueue(work, [=](ncclComm_t comm) -> ncclResult_t {
        int64_t offset = 0;
        for (int r = 0; r < world; ++r) {
          const size_t count = static_cast<size_t>(sizes[r] * row);
          if (count > 0) {  // every rank knows every size, so all skip the same ones
            char* dst = out_p + offset * row * static_cast<int64_t>(esize);
            const void* src = r == me ? in_p : dst;
            const ncclResult_t res = ncclBroadcast(src, dst, count, dtype, r, comm, stream);
            if (res != ncclSuccess && res != ncclInProgress) return res;
          }
          offset += sizes[r];
        }
        return ncclSuccess;
      });
      work->device_result_ = out;
      work->result_to_cpu_ = on_cpu;
      work->sizes_ = std::move(sizes);
      break;
    }
    case Collective::kBarrier: {
      Tensor one = zeros({1}, TensorOptions(DType::kI32, device));
      work->keep_.push_back(one);
      void* one_p = one.data_ptr();
      enqueue(work, [=](ncclComm_t comm) -> ncclResult_t {
        return ncclAllReduce(one_p, one_p, 1, ncclInt32, ncclSum, comm, stream);
      });
      break;
    }
  }
  return Work(work);
}

Work NcclCommunicator::all_reduce(const Tensor& tensor, ReduceOp op) {
  return issue(Collective::kAllReduce, tensor, op, 0);
}
Work NcclCommunicator::broadcast(const Tensor& tensor, int root) {
  return issue(Collective::kBroadcast, tensor, ReduceOp::kSum, root);
}
Work NcclCommunicator::all_gather(const Tensor& input) {
  return issue(Collective::kAllGather, input, ReduceOp::kSum, 0);
}
Work NcclCommunicator::all_gather_v(const Tensor& input) {
  return issue(Collective::kAllGatherV, input, ReduceOp::kSum, 0);
}
Work NcclCommunicator::reduce_scatter(const Tensor& input, ReduceOp op) {
  return issue(Collective::kReduceScatter, input, op, 0);
}
Work NcclCommunicator::barrier() { return issue(Collective::kBarrier, Tensor(), ReduceOp::kSum, 0); }

// ---- distributed/nccl.h ----

bool nccl_available() { return nccl_unavailable_reason().empty(); }

std::string nccl_unavailable_reason() {
  if (!cuda_available()) return "no CUDA GPU is visible";
  return cuda::cuda_library_load_error(cuda::CudaLibrary::kNccl);
}

std::string nccl_unique_id() {
  ensure_nccl_env();
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  COPPICE_CHECK(r == ncclSuccess, "nccl: could not make a unique id: ", nccl_error_text(r, nullptr));
  return std::string(id.internal, sizeof(id.internal));
}

std::unique_ptr<Communicator> make_nccl_communicator_from_id(const std::string& unique_id, int rank, int world_size,
                                                             int cuda_device, const NcclOptions& options) {
  ncclUniqueId id;
  COPPICE_CHECK(unique_id.size() == sizeof(id.internal), "nccl: a unique id has ", sizeof(id.internal), " bytes, got ",
                unique_id.size());
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  return std::make_unique<NcclCommunicator>(id, rank, world_size, cuda_device, options);
}

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, int cuda_device,
                                                     const NcclOptions& options) {
  COPPICE_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "nccl: rank ", env.rank,
                " is not a rank of a world of size ", env.world_size);
  std::string id;
  if (env.rank == 0) id = nccl_unique_id();
  if (env.world_size > 1) {
    absl::StatusOr<std::string> got = rendezvous_broadcast(rendezvous_spec(env, options.init_timeout), id);
    if (!got.ok()) fail("nccl: ", std::string(got.status().message()));
    id = *std::move(got);
  }
  // A rank process works on its GPU alone: make it current for good, so that
  // library calls that name no device (cuBLAS, cuSPARSE handles) land there.
  const cudaError_t set = cudaSetDevice(cuda_device);
  COPPICE_CHECK(set == cudaSuccess, "nccl: rank ", env.rank, " cannot use GPU ", cuda_device, ": ",
                cudaGetErrorString(set));
  return make_nccl_communicator_from_id(id, env.rank, env.world_size, cuda_device, options);
}

}  // namespace coppice
