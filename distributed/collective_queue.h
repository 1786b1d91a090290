// CollectiveQueue: the thread that launches a communicator's collectives in
// the order they were issued, and a watchdog, a thread of its own, that
// reports the first collective not ended by its deadline, whether it is
// still being launched or already running. The caller of submit() only
// queues (so a gradient hook in the middle of backward never waits in the
// collective library), and a collective that no host thread waits for is
// still bounded.
//
// Why the watchdog is not the launcher: a launch can block inside the
// library (NCCL's ncclGroupEnd on a blocking communicator, its queue to the
// GPU full behind a collective a dead peer never ends). A watchdog on the
// launcher's own thread would then never run again, and neither would the
// queue's destructor return (it joins the launcher). Here the watchdog calls
// `on_overdue` (the NCCL backend aborts the communicator, which frees the
// blocked call) at the stuck collective's deadline.
//
// Backend-neutral (no CUDA, no NCCL), so that its timing is tested on the
// CPU (tests/distributed/collective_queue_test.cc); its user is the NCCL
// backend (distributed/nccl_communicator.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace coppice {

// One collective as the queue sees it.
class QueuedCollective {
 public:
  virtual ~QueuedCollective() = default;
  // On the launcher thread, once, in submission order. May block; a failure
  // is the collective's own to report (to whoever waits for it).
  virtual void launch() noexcept = 0;
  // On the watchdog thread, from the moment launch() begins (so it must be
  // safe to call while launch() runs): true once the collective has ended
  // or failed. False while it is being launched. Called with the queue's
  // lock held: it must be quick (an event query) and must not submit().
  virtual bool finished() = 0;
  // When it must have ended by. Constant.
  virtual std::chrono::steady_clock::time_point deadline() const = 0;
  // For the report, e.g. "all_reduce #7". Constant.
  virtual const std::string& name() const = 0;
};

class CollectiveQueue {
 public:
  struct Hooks {
    // Runs first on each of the two threads (the NCCL backend makes its GPU
    // current there). May be empty.
    std::function<void()> on_thread_start;
    // Called once, on the watchdog thread, with the name of the first
    // collective found unfinished past its deadline; the watchdog watches
    // nothing after it. It must make a launch() blocked in the library
    // return (an abort does), or the queue's destructor waits for it. Not
    // called for a collective that finished by its deadline.
    std::function<void(const std::string& overdue)> on_overdue;
  };

  // How often the watchdog looks while something is in flight: a collective
  // is reported at most this long after its deadline (plus finished()'s time).
  static constexpr std::chrono::milliseconds kWatchPeriod{100};

  explicit CollectiveQueue(Hooks hooks, std::chrono::milliseconds watch_period = kWatchPeriod);
  // Launches everything submitted (the other ranks expect these collectives;
  // after a fault they fail fast), then stops both threads. A launch stuck
  // past its deadline is reported by the watchdog meanwhile, so this waits
  // no longer than the last deadline, the watch period and on_overdue.
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Queues `collective` for launch after everything submitted before it.
  // Returns at once; any thread.
  void submit(std::shared_ptr<QueuedCollective> collective);

 private:
  void run_launcher();
  void run_watchdog();

  const Hooks hooks_;
  const std::chrono::milliseconds watch_period_;

  std::mutex mu_;
  std::condition_variable launcher_cv_;  // queue_ grew, or stopping_
  std::condition_variable watchdog_cv_;  // in_flight_ grew, or launcher_done_
  // Submitted, not yet launched.
  std::deque<std::shared_ptr<QueuedCollective>> queue_;
  // Being launched or launched, not yet seen finished (until a report).
  std::deque<std::shared_ptr<QueuedCollective>> in_flight_;
  bool stopping_ = false;        // the destructor began: launch what is queued, then end
  bool launcher_done_ = false;   // the launcher has ended: so does the watchdog
  bool reported_ = false;        // on_overdue was called
  bool in_flight_grew_ = false;  // since the watchdog last looked

  // Last: they start once the members above exist.
  std::thread watchdog_;
  std::thread launcher_;
};

}  // namespace coppice
