#include "distributed/collective_queue.h"

#include <utility>
#include <vector>

namespace coppice {

using Clock = std::chrono::steady_clock;

CollectiveQueue::CollectiveQueue(Hooks hooks, std::chrono::milliseconds watch_period)
    : hooks_(std::move(hooks)),
      watch_period_(watch_period),
      watchdog_([this] { run_watchdog(); }),
      launcher_([this] { run_launcher(); }) {}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  launcher_cv_.notify_one();
  launcher_.join();  // the watchdog goes on meanwhile: a stuck launch is reported at its deadline
  watchdog_.join();
}

void CollectiveQueue::submit(std::shared_ptr<QueuedCollective> collective) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(collective));
  }
  launcher_cv_.notify_one();
}

void CollectiveQueue::run_launcher() {
  if (hooks_.on_thread_start) hooks_.on_thread_start();
  for (;;) {
    std::shared_ptr<QueuedCollective> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      launcher_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {  // stopping, and everything submitted is launched
        launcher_done_ = true;
        break;
      }
      next = std::move(queue_.front());
      queue_.pop_front();
      // Watched from before its launch: a launch that blocks is bounded too.
      if (!reported_) {
        in_flight_.push_back(next);
        in_flight_grew_ = true;
      }
    }
    watchdog_cv_.notify_one();
    next->launch();
  }
  watchdog_cv_.notify_one();
}

void CollectiveQueue::run_watchdog() {
  if (hooks_.on_thread_start) hooks_.on_thread_start();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    watchdog_cv_.wait(lock, [&] { return launcher_done_ || (!in_flight_.empty() && !reported_); });
    if (launcher_done_) return;
    in_flight_grew_ = false;
    // Released outside the lock: the last reference to a collective may do
    // work of its own (the NCCL backend's orders the default stream).
    std::vector<std::shared_ptr<QueuedCollective>> ended;
    std::shared_ptr<QueuedCollective> overdue;
    const Clock::time_point now = Clock::now();
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if ((*it)->finished()) {
        ended.push_back(std::move(*it));
        it = in_flight_.erase(it);
      } else {
        if (overdue == nullptr && now >= (*it)->deadline()) overdue = *it;
        ++it;
      }
    }
    if (overdue != nullptr) {
      reported_ = true;
      for (auto& c : in_flight_) ended.push_back(std::move(c));
      in_flight_.clear();
      lock.unlock();
      ended.clear();
      if (hooks_.on_overdue) hooks_.on_overdue(overdue->name());
      overdue.reset();
      lock.lock();
      continue;
    }
    lock.unlock();
    ended.clear();
    lock.lock();
    // Until the next period, or a launch: each launch also drops what has
    // finished, so that the collectives' buffers (which a finished one may
    // hold) go back as they would with no watchdog, not a period later.
    if (!in_flight_.empty()) {
      watchdog_cv_.wait_for(lock, watch_period_, [&] { return launcher_done_ || in_flight_grew_; });
    }
  }
}

}  // namespace coppice
