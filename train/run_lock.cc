#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

#include "tensor/error.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The holder's line, for the message of a run that finds the lock taken;
// "" when there is none yet (the holder is starting).
std::string read_holder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return "";
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return "";
  std::string line(buf, static_cast<size_t>(n));
  const size_t end = line.find('\n');
  if (end != std::string::npos) line.resize(end);
  for (char& c : line) {
    if (c < 0x20 || c == 0x7f) c = '?';
  }
  return line;
}

}  // namespace

absl::StatusOr<RunLock> RunLock::acquire(const std::string& dir, const std::string& key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(str_cat(key, ": cannot create '", dir, "': ", ec.message()));
  RunLock lock;
  lock.path_ = (fs::path(dir) / kRunLockName).string();
  lock.holder_path_ = (fs::path(dir) / kRunHolderName).string();
  // O_NOFOLLOW: a symbolic link planted under the lock's name is refused,
  // not followed into a file of someone else's.
  lock.fd_ = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (lock.fd_ < 0)
    return absl::UnavailableError(
        str_cat(key, ": cannot open the run lock '", lock.path_, "': ", std::strerror(errno)));
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(lock.holder_path_);
    ::close(lock.fd_);  // not ours: release() would remove the holder's file
    lock.fd_ = -1;
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          str_cat(key, " '", dir, "' is in use by another run (", holder.empty() ? "its holder is starting" : holder,
                  "; lock file '", lock.path_,
                  "'): one run per checkpoint directory; wait for it to end, or give this run another ", key));
    }
    return absl::UnavailableError(str_cat(key, ": cannot lock '", lock.path_, "': ", std::strerror(err)));
  }
  lock.started_ = utc_now();
  lock.write_holder();
  return lock;
}

RunLock::RunLock(RunLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      holder_path_(std::move(other.holder_path_)),
      run_id_(std::move(other.run_id_)),
      started_(std::move(other.started_)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    holder_path_ = std::move(other.holder_path_);
    run_id_ = std::move(other.run_id_);
    started_ = std::move(other.started_);
  }
  return *this;
}

RunLock::~RunLock() { release(); }

void RunLock::set_run_id(const std::string& run_id) {
  run_id_ = run_id;
  write_holder();
}

// Best effort: the line only helps the message of a refused run; the lock
// itself is the flock.
void RunLock::write_holder() {
  if (fd_ < 0) return;
  const std::string line =
      str_cat("pid ", static_cast<int64_t>(::getpid()), run_id_.empty() ? std::string() : str_cat(", run ", run_id_),
              ", started ", started_, "\n");
  const int fd = ::open(holder_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

void RunLock::release() {
  if (fd_ < 0) return;
  ::unlink(holder_path_.c_str());  // before the lock goes: the next holder writes its own
  ::close(fd_);                    // closing drops the flock
  fd_ = -1;
}

}  // namespace coppice
