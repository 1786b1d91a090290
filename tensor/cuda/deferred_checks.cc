#include "tensor/cuda/deferred_checks.h"

#include <cuda_runtime_api.h>

#include <array>
#include <deque>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace coppice::cuda {
namespace {

constexpr const char* kOp = "deferred check";
constexpr int kMaxDevices = 64;
// Answers in flight a device before a new check waits for the oldest: a
// program that never reads a result back still holds a bounded number.
constexpr int kSlots = 1024;

struct Pending {
  int slot;
  cudaEvent_t arrived;  // recorded behind the answer's copy
  int64_t passed;       // the answer of a check that passed
  std::function<void(int64_t)> resolve;
};

struct Resolved {
  int64_t value;
  std::function<void(int64_t)> resolve;
};

struct DeviceChecks {
  std::mutex mu;
  int64_t* host = nullptr;  // pinned, kSlots answers; allocated at the first check, never freed
  std::vector<int> free_slots;
  std::vector<cudaEvent_t> free_events;
  std::deque<Pending> pending;  // in the order queued, which is the order the copies run
};

DeviceChecks& checks_of(int device) {
  static std::array<DeviceChecks, kMaxDevices> all;
  COPPICE_CHECK(device >= 0 && device < kMaxDevices, kOp, ": device index ", device, " out of range [0, ", kMaxDevices,
                ")");
  return all[static_cast<size_t>(device)];
}

// Takes the checks whose answers have arrived (all of them with `wait`) off
// the queue; the caller resolves them outside the lock (a resolve reads the
// device, and may throw).
std::vector<Resolved> take_done(DeviceChecks& c, bool wait) {
  std::vector<Resolved> done;
  std::lock_guard<std::mutex> lock(c.mu);
  while (!c.pending.empty()) {
    Pending& p = c.pending.front();
    const cudaError_t state = wait ? cudaEventSynchronize(p.arrived) : cudaEventQuery(p.arrived);
    if (state == cudaErrorNotReady) break;
    COPPICE_CUDA_CHECK(state, kOp);
    done.push_back({c.host[p.slot], std::move(p.resolve)});
    c.free_slots.push_back(p.slot);
    c.free_events.push_back(p.arrived);
    c.pending.pop_front();
  }
  return done;
}

// Recycles the checks whose answers have arrived and passed, wherever they
// are in the queue (the copies of checks queued on different streams may
// land out of order); a failure stays for settle_checks.
void recycle_passed(DeviceChecks& c) {
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto it = c.pending.begin(); it != c.pending.end();) {
    const cudaError_t state = cudaEventQuery(it->arrived);
    if (state == cudaErrorNotReady || (state == cudaSuccess && c.host[it->slot] != it->passed)) {
      ++it;
      continue;
    }
    COPPICE_CUDA_CHECK(state, kOp);
    c.free_slots.push_back(it->slot);
    c.free_events.push_back(it->arrived);
    it = c.pending.erase(it);
  }
}

void resolve_all(std::vector<Resolved>& done) {
  std::exception_ptr first;
  for (Resolved& r : done) {
    try {
      r.resolve(r.value);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

void settle_checks(int device, bool wait) {
  DeviceChecks& c = checks_of(device);
  std::vector<Resolved> done;
  {
    DeviceGuard guard(device);
    done = take_done(c, wait);
  }
  resolve_all(done);
}

void defer_check(int device, const int64_t* answer, int64_t passed, std::function<void(int64_t)> resolve) {
  COPPICE_CHECK(!capturing(device), kOp, ": internal: a check queued during a graph capture of cuda:", device,
                " (it belongs to after_each_replay)");
  DeviceChecks& c = checks_of(device);
  DeviceGuard guard(device);
  recycle_passed(c);
  std::unique_lock<std::mutex> lock(c.mu);
  if (c.host == nullptr) {
    void* host = nullptr;
    COPPICE_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int64_t) * kSlots, cudaHostAllocPortable), kOp);
    c.host = static_cast<int64_t*>(host);
    for (int s = kSlots - 1; s >= 0; --s) c.free_slots.push_back(s);
  }
  while (c.free_slots.empty()) {  // kSlots checks in flight: wait for them
    lock.unlock();
    settle_checks(device, true);
    lock.lock();
  }
  const int slot = c.free_slots.back();
  cudaEvent_t arrived = nullptr;
  if (c.free_events.empty()) {
    COPPICE_CUDA_CHECK(cudaEventCreateWithFlags(&arrived, cudaEventDisableTiming), kOp);
  } else {
    arrived = c.free_events.back();
    c.free_events.pop_back();
  }
  const cudaStream_t stream = current_stream(device);
  const cudaError_t copied = cudaMemcpyAsync(c.host + slot, answer, sizeof(int64_t), cudaMemcpyDeviceToHost, stream);
  const cudaError_t recorded = copied == cudaSuccess ? cudaEventRecord(arrived, stream) : copied;
  if (recorded != cudaSuccess) {
    c.free_events.push_back(arrived);
    COPPICE_CUDA_CHECK(recorded, kOp);
  }
  c.free_slots.pop_back();
  c.pending.push_back({slot, arrived, passed, std::move(resolve)});
}

size_t pending_checks(int device) {
  DeviceChecks& c = checks_of(device);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.pending.size();
}

}  // namespace coppice::cuda
