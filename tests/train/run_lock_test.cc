// One run per checkpoint directory (train/run_lock.h): a second lock on a
// held directory is refused naming the holder's pid and run id, and the
// directory is free again once the holder lets go (or dies: the kernel drops
// an flock with its process).
#include "train/run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace coppice {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(tmp != nullptr ? tmp : "/tmp") / "run_lock_test" / name;
  fs::remove_all(p);
  return p.string();
}

TEST(RunLock, ASecondRunIsRefusedNamingTheHolder) {
  const std::string dir = temp_dir("second");
  absl::StatusOr<RunLock> first = RunLock::acquire(dir, "checkpoint.dir");
  ASSERT_TRUE(first.ok()) << first.status();
  first->set_run_id("0123456789abcdef");
  absl::StatusOr<RunLock> second = RunLock::acquire(dir, "checkpoint.dir");
  ASSERT_FALSE(second.ok());
  const std::string m(second.status().message());
  EXPECT_NE(m.find("checkpoint.dir '" + dir + "' is in use by another run"), std::string::npos) << m;
  EXPECT_NE(m.find("pid " + std::to_string(::getpid())), std::string::npos) << m;
  EXPECT_NE(m.find("run 0123456789abcdef"), std::string::npos) << m;

  first->release();
  absl::StatusOr<RunLock> third = RunLock::acquire(dir, "checkpoint.dir");
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(RunLock, ALockDiesWithItsProcess) {
  const std::string dir = temp_dir("dies");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<RunLock> lock = RunLock::acquire(dir, "checkpoint.dir");
    const char c = lock.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // killed below, holding the lock
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_FALSE(RunLock::acquire(dir, "checkpoint.dir").ok());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(RunLock::acquire(dir, "checkpoint.dir").ok());
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(RunLock, ALinkUnderTheLocksNameIsNotFollowed) {
  const std::string dir = temp_dir("link");
  fs::create_directories(dir);
  fs::create_symlink("/etc/passwd", fs::path(dir) / kRunLockName);
  absl::StatusOr<RunLock> lock = RunLock::acquire(dir, "checkpoint.dir");
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(std::string(lock.status().message()).find(kRunLockName), std::string::npos) << lock.status();
}

}  // namespace
}  // namespace coppice
