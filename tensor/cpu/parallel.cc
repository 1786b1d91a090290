#include "tensor/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor/runtime_options.h"

namespace coppice::cpu {
namespace {

// True on pool workers, and on a caller while it runs a job: nested
// parallel_for calls then run inline instead of waiting on a busy pool.
thread_local bool t_in_parallel = false;

// RuntimeOptions::num_threads (COPPICE_NUM_THREADS), else the hardware's.
int threads_from_options() {
  if (const int n = runtime_options().num_threads; n > 0) return n;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) std::thread([this] { worker(); }).detach();
  }

  // Runs `fn` over [begin, end) in chunks of `chunk`; the caller takes part.
  // Returns false, without running anything, when another caller holds the pool.
  bool run(int64_t begin, int64_t end, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->begin = begin;
    job->end = end;
    job->chunk = chunk;
    job->nchunks = (end - begin + chunk - 1) / chunk;
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = job;
      ++generation_;
    }
    work_cv_.notify_all();
    t_in_parallel = true;
    work(*job);
    t_in_parallel = false;
    {
      std::unique_lock<std::mutex> l(mu_);
      done_cv_.wait(l, [&] { return job->done.load() == job->nchunks; });
      job_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
    return true;
  }

 private:
  // Workers hold the job through a shared_ptr, so a late worker may still
  // look at it after the caller returned; it only calls fn for an unclaimed
  // chunk, and once all chunks are done none is left.
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t begin = 0, end = 0, chunk = 1, nchunks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};
    std::mutex error_mu;
    std::exception_ptr error;
  };

  void worker() {
    t_in_parallel = true;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> l(mu_);
        work_cv_.wait(l, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      if (job) work(*job);
    }
  }

  void work(Job& job) {
    for (;;) {
      int64_t c = job.next.fetch_add(1);
      if (c >= job.nchunks) return;
      if (!job.failed.load()) {
        int64_t b = job.begin + c * job.chunk;
        int64_t e = std::min(job.end, b + job.chunk);
        try {
          (*job.fn)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> l(job.error_mu);
          if (!job.error) job.error = std::current_exception();
          job.failed.store(true);
        }
      }
      if (job.done.fetch_add(1) + 1 == job.nchunks) {
        std::lock_guard<std::mutex> l(mu_);
        done_cv_.notify_all();
      }
    }
  }

  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool(num_threads());  // never destroyed: workers outlive static destructors
  return *p;
}

}  // namespace

int num_threads() {
  static const int n = threads_from_options();
  return n;
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int threads = num_threads();
  if (n <= grain || threads == 1 || t_in_parallel) {
    fn(begin, end);
    return;
  }
  // A few chunks per thread balance uneven work; none smaller than grain.
  int64_t chunk = std::max<int64_t>(grain, (n + 4 * threads - 1) / (4 * threads));
  if (!pool().run(begin, end, chunk, fn)) fn(begin, end);
}

}  // namespace coppice::cpu
