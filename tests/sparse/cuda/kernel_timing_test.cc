// The planners' measured route choices (sparse/cuda/kernel_timing.h) time
// their routes alone: work queued before a measurement has finished when its
// first route runs, on the device's stream and on run_beside's side stream.
#include "sparse/cuda/kernel_timing.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/cuda/stream.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using sparse_cuda::chosen_route;
using sparse_cuda::TimedRoute;

// About 60 ms of bf16 products on an H100, queued on the current stream and
// not waited for, then an event recorded after them.
struct BusyWork {
  cudaEvent_t done = nullptr;
  BusyWork() { EXPECT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess); }
  ~BusyWork() { cudaEventDestroy(done); }
  void queue() const {
    const Tensor a = full({4096, 4096}, 0.5, TensorOptions(DType::kBF16, kCuda));
    for (int i = 0; i < 300; ++i) (void)matmul(a, a);
    EXPECT_EQ(cudaEventRecord(done, cuda::current_stream(0)), cudaSuccess);
  }
};

// Routes that note whether the busy work had finished when they ran (the
// measurement's own events on the routes' stream aside).
struct Probe {
  const BusyWork& work;
  int runs = 0;
  int busy = 0;
  std::vector<TimedRoute> routes() {
    auto run = [this] {
      ++runs;
      if (cudaEventQuery(work.done) != cudaSuccess) ++busy;
      return Tensor();
    };
    return {{"tiles", run}, {"dense", run}};
  }
};

TEST(KernelTimingTest, AMeasurementWaitsForTheWorkQueuedBeforeIt) {
  SKIP_WITHOUT_CUDA();
  const BusyWork work;
  work.queue();
  Probe probe{work};
  chosen_route("bsr_sddmm", "kernel_timing_test: queued before", 0, "kernel_timing_test", probe.routes());
  EXPECT_EQ(probe.runs, 6);  // each route: a warm-up run and two timed ones
  EXPECT_EQ(probe.busy, 0);
}

// Inside run_beside's second function the measurement's routes run on the
// side stream, forked after the first function's work: that work, too, has
// finished before they run.
TEST(KernelTimingTest, AMeasurementOnTheSideStreamWaitsForTheMainStream) {
  SKIP_WITHOUT_CUDA();
  const BusyWork work;
  Probe probe{work};
  run_beside(
      kCuda, [&] { work.queue(); },
      [&] { chosen_route("bsr_sddmm", "kernel_timing_test: beside", 0, "kernel_timing_test", probe.routes()); });
  join_beside(kCuda);
  EXPECT_EQ(probe.runs, 6);
  EXPECT_EQ(probe.busy, 0);
}

// A recorded choice is not measured again: nothing runs, nothing waits.
TEST(KernelTimingTest, ARecordedChoiceRunsNoRoute) {
  SKIP_WITHOUT_CUDA();
  const BusyWork work;
  Probe first{work}, second{work};
  const std::string key = "kernel_timing_test: recorded";
  const size_t winner = chosen_route("bsr_sddmm", key, 0, "kernel_timing_test", first.routes());
  EXPECT_EQ(chosen_route("bsr_sddmm", key, 0, "kernel_timing_test", second.routes()), winner);
  EXPECT_EQ(second.runs, 0);
}

}  // namespace
}  // namespace coppice
