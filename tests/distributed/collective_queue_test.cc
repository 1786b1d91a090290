// Tests for distributed/collective_queue.h, with collectives that are plain
// flags: launches in submission order, a submit that never waits for a
// launch, and the watchdog's reports: a collective running past its
// deadline, a launch blocked past its deadline (the case a watchdog on the
// launcher's own thread could not see, and that made the queue's destructor
// wait for ever), each reported once and never early, and none for
// collectives that end in time.
#include "distributed/collective_queue.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace coppice {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Generous: CI's two cores run other tests beside this one. The lower
// bounds (never early) are exact.
constexpr milliseconds kLate{5000};
constexpr milliseconds kPeriod{20};

// What the queue's threads did, in order, for the test thread to read.
class Record {
 public:
  void launched(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    launched_.push_back(name);
  }
  void overdue(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    overdue_.push_back(name);
    overdue_at_ = Clock::now();
  }
  void thread_started() {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.insert(std::this_thread::get_id());
  }
  std::vector<std::string> launched() {
    std::lock_guard<std::mutex> lock(mu_);
    return launched_;
  }
  std::vector<std::string> overdue() {
    std::lock_guard<std::mutex> lock(mu_);
    return overdue_;
  }
  Clock::time_point overdue_at() {
    std::lock_guard<std::mutex> lock(mu_);
    return overdue_at_;
  }
  std::set<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> launched_;
  std::vector<std::string> overdue_;
  Clock::time_point overdue_at_;
  std::set<std::thread::id> threads_;
};

// A collective that ends when told to; its launch can be made to block
// until released (as ncclGroupEnd blocks until the communicator is aborted).
class FakeCollective final : public QueuedCollective {
 public:
  FakeCollective(std::string name, Clock::time_point deadline, Record* record)
      : name_(std::move(name)), deadline_(deadline), record_(record) {}

  void launch() noexcept override {
    record_->launched(name_);
    std::unique_lock<std::mutex> lock(mu_);
    launching_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !block_launch_; });
    if (end_at_launch_) ended_ = true;
  }
  bool finished() override { return ended_.load(); }
  Clock::time_point deadline() const override { return deadline_; }
  const std::string& name() const override { return name_; }

  void block_launch() { block_launch_ = true; }
  void end_at_launch() { end_at_launch_ = true; }
  void release_launch() {
    std::lock_guard<std::mutex> lock(mu_);
    block_launch_ = false;
    cv_.notify_all();
  }
  void wait_until_launching() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return launching_; });
  }
  void end() { ended_ = true; }

 private:
  const std::string name_;
  const Clock::time_point deadline_;
  Record* const record_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool launching_ = false;
  bool block_launch_ = false;
  bool end_at_launch_ = false;
  std::atomic<bool> ended_{false};
};

std::shared_ptr<FakeCollective> collective(const std::string& name, milliseconds from_now, Record* record) {
  return std::make_shared<FakeCollective>(name, Clock::now() + from_now, record);
}

CollectiveQueue::Hooks recording(Record* record) {
  CollectiveQueue::Hooks hooks;
  hooks.on_thread_start = [record] { record->thread_started(); };
  hooks.on_overdue = [record](const std::string& name) { record->overdue(name); };
  return hooks;
}

TEST(CollectiveQueue, LaunchesInSubmissionOrder) {
  Record record;
  std::vector<std::string> expected;
  {
    CollectiveQueue queue(recording(&record), kPeriod);
    for (int i = 0; i < 200; ++i) {
      auto c = collective("c" + std::to_string(i), milliseconds(60000), &record);
      c->end_at_launch();
      expected.push_back(c->name());
      queue.submit(c);
    }
  }  // the destructor launches everything submitted
  EXPECT_EQ(record.launched(), expected);
  EXPECT_TRUE(record.overdue().empty());
}

TEST(CollectiveQueue, HooksRunOnTwoThreadsOtherThanTheCaller) {
  Record record;
  { CollectiveQueue queue(recording(&record), kPeriod); }
  const std::set<std::thread::id> threads = record.threads();
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

TEST(CollectiveQueue, SubmitDoesNotWaitForALaunch) {
  Record record;
  CollectiveQueue queue(recording(&record), kPeriod);
  auto slow = collective("slow", milliseconds(60000), &record);
  slow->block_launch();
  slow->end_at_launch();
  queue.submit(slow);
  slow->wait_until_launching();
  auto next = collective("next", milliseconds(60000), &record);
  next->end_at_launch();
  const Clock::time_point start = Clock::now();
  queue.submit(next);  // queued behind a launch that blocks
  EXPECT_LT(Clock::now() - start, milliseconds(500));
  EXPECT_EQ(record.launched(), std::vector<std::string>{"slow"});
  slow->release_launch();
}

TEST(CollectiveQueue, ReportsACollectiveRunningPastItsDeadlineOnce) {
  Record record;
  CollectiveQueue queue(recording(&record), kPeriod);
  const Clock::time_point start = Clock::now();
  auto stuck = collective("all_reduce #3", milliseconds(300), &record);  // launched, never ends
  const Clock::time_point deadline = stuck->deadline();
  queue.submit(stuck);
  auto later = collective("all_reduce #4", milliseconds(400), &record);  // overdue too, not reported again
  queue.submit(later);
  while (record.overdue().empty() && Clock::now() - start < kLate) std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(record.overdue(), std::vector<std::string>{"all_reduce #3"});
  EXPECT_GE(record.overdue_at(), deadline);  // never early
  EXPECT_LT(record.overdue_at(), deadline + kLate);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(record.overdue().size(), 1u);  // once: the watchdog watches nothing after it
  // Submissions after the report still launch (a backend's fail fast).
  auto after = collective("after", milliseconds(1), &record);
  queue.submit(after);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(record.overdue().size(), 1u);
}

// The case the watchdog exists for: the launcher blocked inside a launch (a
// library call that returns only when the communicator is aborted), with a
// collective queued behind it and nobody waiting on the host. The report
// comes at the blocked collective's deadline, its hook frees the launch, and
// the destructor returns having launched the queued one too.
TEST(CollectiveQueue, ReportsALaunchBlockedPastItsDeadline) {
  Record record;
  std::shared_ptr<FakeCollective> blocked = collective("all_reduce #9", milliseconds(300), &record);
  blocked->block_launch();
  CollectiveQueue::Hooks hooks = recording(&record);
  hooks.on_overdue = [&record, blocked](const std::string& name) {
    record.overdue(name);
    blocked->release_launch();  // what aborting the communicator does
  };
  const Clock::time_point start = Clock::now();
  {
    CollectiveQueue queue(std::move(hooks), kPeriod);
    queue.submit(blocked);
    queue.submit(collective("all_reduce #10", milliseconds(400), &record));
  }  // waits for the blocked launch: the watchdog frees it
  const Clock::time_point done = Clock::now();
  EXPECT_EQ(record.overdue(), std::vector<std::string>{"all_reduce #9"});
  EXPECT_GE(record.overdue_at(), blocked->deadline());
  EXPECT_GE(done, blocked->deadline());
  EXPECT_LT(done - start, kLate);
  EXPECT_EQ(record.launched(), (std::vector<std::string>{"all_reduce #9", "all_reduce #10"}));
}

TEST(CollectiveQueue, NothingReportedForCollectivesThatEndInTime) {
  Record record;
  std::vector<std::shared_ptr<FakeCollective>> running;
  {
    CollectiveQueue queue(recording(&record), kPeriod);
    // Each runs longer than the watch period and ends before its deadline.
    for (int i = 0; i < 5; ++i) {
      auto c = collective("c" + std::to_string(i), milliseconds(2000 + 100 * i), &record);
      queue.submit(c);
      running.push_back(c);
      std::this_thread::sleep_for(milliseconds(60));
      c->end();
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(record.overdue().empty());
  EXPECT_EQ(record.launched().size(), 5u);
}

// The queue lets go of a finished collective at the next launch, not a
// watch period later: a backend's collective may hold its buffers (the NCCL
// backend's does, until a host wait), which a step's next buckets want.
TEST(CollectiveQueue, LetsGoOfAFinishedCollectiveAtTheNextLaunch) {
  Record record;
  CollectiveQueue queue(recording(&record), milliseconds(60000));
  auto first = collective("first", milliseconds(60000), &record);
  const std::weak_ptr<FakeCollective> watched = first;
  queue.submit(first);
  while (record.launched().empty()) std::this_thread::sleep_for(milliseconds(1));
  std::this_thread::sleep_for(milliseconds(50));  // the watchdog has looked (and seen it running)
  first->end();
  first.reset();
  auto second = collective("second", milliseconds(60000), &record);
  second->end_at_launch();
  const Clock::time_point start = Clock::now();
  queue.submit(second);
  while (!watched.expired() && Clock::now() - start < kLate) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_TRUE(watched.expired());
  EXPECT_LT(Clock::now() - start, milliseconds(2000));  // the period is a minute
}

// A collective that has finished is not reported, even when the watchdog
// first looks after its deadline.
TEST(CollectiveQueue, AFinishedCollectivePastItsDeadlineIsNotReported) {
  Record record;
  {
    CollectiveQueue queue(recording(&record), milliseconds(500));
    auto c = collective("quick", milliseconds(50), &record);
    c->end_at_launch();
    queue.submit(c);
    std::this_thread::sleep_for(milliseconds(700));  // past the deadline and a watch
  }
  EXPECT_TRUE(record.overdue().empty());
}

}  // namespace
}  // namespace coppice
