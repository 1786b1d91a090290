#include "train/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tensor/error.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

absl::Status errno_error(const std::string& what, const std::string& path) {
  return absl::UnavailableError(str_cat(what, " '", path, "': ", std::strerror(errno)));
}

absl::Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return errno_error("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_error("cannot fsync directory", dir);
  return absl::OkStatus();
}

}  // namespace

absl::Status write_file_atomically(const std::string& path, const std::string& bytes,
                                   const AtomicWriteOptions& options) {
  const fs::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string tmp =
      (fs::path(dir) / str_cat(".", target.filename().string(), ".tmp.", static_cast<int64_t>(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("cannot create", tmp);
  size_t to_write = bytes.size();
  const bool crash = options.simulate_crash_after_bytes >= 0;
  if (crash) to_write = std::min(to_write, static_cast<size_t>(options.simulate_crash_after_bytes));
  size_t done = 0;
  while (done < to_write) {
    const ssize_t n = ::write(fd, bytes.data() + done, to_write - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status st = errno_error("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (crash) {
    ::close(fd);
    return absl::AbortedError(str_cat("simulated crash after ", done, " bytes of '", tmp, "'"));
  }
  if (::fsync(fd) != 0) {
    const absl::Status st = errno_error("cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::close(fd) != 0) {
    const absl::Status st = errno_error("cannot close", tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status st = errno_error(str_cat("cannot rename '", tmp, "' to"), path);
    ::unlink(tmp.c_str());
    return st;
  }
  return fsync_dir(dir);
}

}  // namespace coppice
