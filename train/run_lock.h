// One run per checkpoint directory: an advisory lock (flock) on
// <dir>/.coppice-run.lock, held for the run's life by the process that
// writes there (rank 0).
//
// The holder describes itself in <dir>/.coppice-run.holder ("pid 1234, run
// 0123456789abcdef, started 2026-11-28 09:00:00 UTC"), so that a second run
// is refused with a line naming it, and removes that file when it lets go.
// The lock file itself is never written and stays when the run ends:
// removing it would let a third run lock a new file while a second still
// waits on the old one; so a run that fails leaves the directory as it found
// it. The kernel drops the lock when its holder exits, so a crashed or killed
// run never leaves the directory locked (its stale holder file is replaced
// by the next holder's).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace coppice {

inline constexpr char kRunLockName[] = ".coppice-run.lock";
inline constexpr char kRunHolderName[] = ".coppice-run.holder";

class RunLock {
 public:
  // Locks `dir` (created when missing) for this process. FailedPrecondition
  // naming `key`, the directory and the holder when another process holds
  // it; Unavailable naming the file when it cannot be created or locked.
  static absl::StatusOr<RunLock> acquire(const std::string& dir, const std::string& key);

  RunLock() = default;
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  bool held() const { return fd_ >= 0; }
  // Records the run's id in the holder line, once the run knows it.
  void set_run_id(const std::string& run_id);
  void release();

 private:
  void write_holder();

  int fd_ = -1;
  std::string path_;
  std::string holder_path_;
  std::string run_id_;
  std::string started_;
};

}  // namespace coppice
