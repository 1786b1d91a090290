// Faults of the NCCL backend that real NCCL cannot be made to show on one
// GPU, against a stand-in libnccl.so.2 (fake_nccl.cc, embedded in this
// binary and written out at its start; Coppice's loader is pointed at it by
// COPPICE_CUDA_LIBRARY_DIR, so no real NCCL is loaded in this process):
// - an enqueue that blocks inside ncclGroupEnd (behind a collective a dead
//   peer never ends) while no host thread waits for it: the communicator's
//   watchdog aborts it at its deadline, which frees the call, and the
//   destructor returns (before the watchdog had a thread of its own, both
//   waited for ever);
// - the same with a thread waiting in wait(): the timeout is thrown;
// - an enqueue that fails: wait() throws NCCL's error and every later call
//   throws at once.
// Each needs one GPU (the communicator's stream and events) and skips
// without, but for the test of the fake itself, which runs anywhere.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "distributed/nccl.h"
#include "distributed/nccl_communicator.h"
#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"
#include "tests/util/temp_dir.h"

extern const unsigned char coppice_fake_nccl_image[];
extern const size_t coppice_fake_nccl_image_size;

namespace coppice {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the NCCL backend needs a GPU"

// The test's own line to the fake library (its coppice_fake_nccl_* functions,
// and two of NCCL's, for the test of the fake itself).
struct FakeNccl {
  void (*block_next_group_end)() = nullptr;
  void (*fail_next_group_end)(int) = nullptr;
  int (*aborts)() = nullptr;
  int (*blocked_now)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
};

// Writes the fake out once and points the loader at it, before the
// process's first NCCL call; opens it as the loader will (same path, so the
// same copy) for its control functions.
const FakeNccl& fake_nccl() {
  static FakeNccl fake;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string dir = coppice::testing::temp_dir("fake_nccl");
    const std::string path = dir + "/libnccl.so.2";
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(coppice_fake_nccl_image, 1, coppice_fake_nccl_image_size, f), coppice_fake_nccl_image_size);
    ASSERT_EQ(std::fclose(f), 0);
    ::setenv("COPPICE_CUDA_LIBRARY_DIR", dir.c_str(), /*overwrite=*/1);
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    fake.block_next_group_end = reinterpret_cast<void (*)()>(dlsym(handle, "coppice_fake_nccl_block_next_group_end"));
    fake.fail_next_group_end = reinterpret_cast<void (*)(int)>(dlsym(handle, "coppice_fake_nccl_fail_next_group_end"));
    fake.aborts = reinterpret_cast<int (*)()>(dlsym(handle, "coppice_fake_nccl_aborts"));
    fake.blocked_now = reinterpret_cast<int (*)()>(dlsym(handle, "coppice_fake_nccl_blocked_now"));
    fake.group_end = reinterpret_cast<ncclResult_t (*)()>(dlsym(handle, "ncclGroupEnd"));
    fake.comm_abort = reinterpret_cast<ncclResult_t (*)(ncclComm_t)>(dlsym(handle, "ncclCommAbort"));
    ASSERT_TRUE(fake.block_next_group_end && fake.fail_next_group_end && fake.aborts && fake.group_end &&
                fake.comm_abort && fake.blocked_now);
  });
  if (fake.blocked_now == nullptr) throw std::runtime_error("the fake libnccl.so.2 could not be set up (see above)");
  return fake;
}

constexpr milliseconds kTimeout{1000};
// The watchdog looks every 100 ms; abort() then waits min(timeout, 10 s) for
// the blocked call before aborting under it. CI-like machines are slow: the
// upper bounds are generous, the lower ones exact.
constexpr milliseconds kAbortBound{1000};
constexpr milliseconds kSlack{4000};

// Polls `done` every few ms until it holds or `limit` passes; returns when.
template <typename Fn>
Clock::time_point poll_until(Fn done, milliseconds limit) {
  const Clock::time_point start = Clock::now();
  while (!done() && Clock::now() - start < limit) std::this_thread::sleep_for(milliseconds(2));
  return Clock::now();
}

// The premise of the tests below, on any machine (no GPU needed): the
// embedded library loads, and its ncclGroupEnd blocks until an abort.
TEST(FakeNccl, BlocksAGroupEndUntilAnAbort) {
  const FakeNccl& fake = fake_nccl();
  fake.block_next_group_end();
  ncclResult_t got = ncclSuccess;
  std::thread launcher([&] { got = fake.group_end(); });
  poll_until([&] { return fake.blocked_now() == 1; }, kSlack);
  EXPECT_EQ(fake.blocked_now(), 1);
  EXPECT_EQ(fake.comm_abort(nullptr), ncclSuccess);
  launcher.join();
  EXPECT_EQ(got, ncclInternalError);
  EXPECT_EQ(fake.blocked_now(), 0);
  EXPECT_EQ(fake.group_end(), ncclSuccess);  // once only
}

// A world of one on cuda:0 over the fake, after one healthy all_reduce
// (all_reduce #0), and a tensor to reduce.
class NcclFaultsFake : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA();
    fake_nccl();
    NcclOptions options;
    options.timeout = kTimeout;
    options.init_timeout = milliseconds(30000);
    comm_ = make_nccl_communicator_from_id(nccl_unique_id(), 0, 1, 0, options);
    t_ = full({256}, 1.0, TensorOptions(DType::kF32, Device::cuda(0)));
    comm_->all_reduce(t_).wait();
  }

  NcclCommunicator& nccl() { return dynamic_cast<NcclCommunicator&>(*comm_); }

  std::unique_ptr<Communicator> comm_;
  Tensor t_;
};

TEST_F(NcclFaultsFake, TheFakeIsTheLibraryLoaded) {
  EXPECT_TRUE(nccl_available()) << nccl_unavailable_reason();
  EXPECT_FALSE(nccl().aborted());
}

// The case the communicator's watchdog thread exists for.
TEST_F(NcclFaultsFake, AnEnqueueBlockedInNcclWithNoHostWaitIsAbortedAtItsDeadline) {
  const int aborts_before = fake_nccl().aborts();
  fake_nccl().block_next_group_end();
  ::testing::internal::CaptureStderr();
  const Clock::time_point issued = Clock::now();
  comm_->all_reduce(t_);  // all_reduce #1, dropped: nobody waits on the host
  poll_until([&] { return fake_nccl().blocked_now() == 1; }, kSlack);
  const Clock::time_point aborting = poll_until([&] { return nccl().aborted(); }, kTimeout + kSlack);
  ASSERT_TRUE(nccl().aborted()) << "no abort " << kTimeout.count() << " ms after the deadline";
  EXPECT_GE(aborting - issued, kTimeout);  // never early
  // The abort waits for the blocked call (kAbortBound), then goes ahead under it, which frees it.
  const Clock::time_point freed = poll_until([&] { return fake_nccl().blocked_now() == 0; }, kAbortBound + kSlack);
  EXPECT_EQ(fake_nccl().blocked_now(), 0);
  EXPECT_GT(fake_nccl().aborts(), aborts_before);
  EXPECT_LT(freed - issued, kTimeout + kAbortBound + kSlack);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("an NCCL call on another thread did not return within 1 s; aborting the communicator under it"),
            std::string::npos)
      << err;
  // Every later call throws the timeout at once.
  const Clock::time_point again = Clock::now();
  EXPECT_TRUE(coppice::testing::throws_with(
      [&] { comm_->all_reduce(t_); },
      {"nccl: all_reduce #1 did not complete within 1 s on rank 0", "the communicator was aborted"}));
  EXPECT_ERROR_NAMING(comm_->barrier(), "did not complete within");
  EXPECT_LT(Clock::now() - again, milliseconds(1000));
  const Clock::time_point destroying = Clock::now();
  comm_.reset();
  EXPECT_LT(Clock::now() - destroying, kSlack);
}

// The destructor, straight after issuing a collective whose enqueue blocks:
// it waits for the launch, which the watchdog frees at the deadline.
TEST_F(NcclFaultsFake, DestroyingWhileAnEnqueueIsBlockedIsBounded) {
  fake_nccl().block_next_group_end();
  ::testing::internal::CaptureStderr();
  const Clock::time_point issued = Clock::now();
  comm_->all_reduce(t_);
  comm_.reset();
  const auto took = Clock::now() - issued;
  ::testing::internal::GetCapturedStderr();
  EXPECT_GE(took, kTimeout);
  EXPECT_LT(took, kTimeout + kAbortBound + kSlack);
  EXPECT_EQ(fake_nccl().blocked_now(), 0);
}

TEST_F(NcclFaultsFake, AWaitOnABlockedEnqueueThrowsTheTimeout) {
  fake_nccl().block_next_group_end();
  ::testing::internal::CaptureStderr();
  const Clock::time_point issued = Clock::now();
  Work w = comm_->all_reduce(t_);
  EXPECT_TRUE(coppice::testing::throws_with(
      [&] { w.wait(); },
      {"nccl: all_reduce #1 did not complete within 1 s on rank 0", "the communicator was aborted"}));
  const auto took = Clock::now() - issued;
  ::testing::internal::GetCapturedStderr();
  EXPECT_GE(took, kTimeout);
  EXPECT_LT(took, kTimeout + kAbortBound + kSlack);
  EXPECT_TRUE(nccl().aborted());
}

TEST_F(NcclFaultsFake, AFailedEnqueueFailsItsWaitAndEveryLaterCall) {
  fake_nccl().fail_next_group_end(ncclRemoteError);
  Work w = comm_->all_reduce(t_);
  EXPECT_TRUE(coppice::testing::throws_with(
      [&] { w.wait(); }, {"nccl: all_reduce #1 failed on rank 0: remote process exited or there was a network error",
                          "the communicator was aborted"}));
  EXPECT_TRUE(nccl().aborted());
  EXPECT_ERROR_NAMING(comm_->all_reduce(t_), "all_reduce #1 failed on rank 0");
  const Clock::time_point destroying = Clock::now();
  comm_.reset();
  EXPECT_LT(Clock::now() - destroying, kSlack);
}

}  // namespace
}  // namespace coppice
