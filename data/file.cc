#include "data/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "tensor/error.h"

namespace coppice {
namespace {

// Closes a file descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

absl::StatusOr<std::string> read_file_bytes(const std::string& path, uint64_t max_bytes) {
  max_bytes = std::min(max_bytes, kFileMaxBytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, str_cat("cannot open ", path, ": ", std::strerror(err)));
  }
  FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, str_cat("cannot stat ", path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(str_cat(path, ": not a regular file"));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(str_cat(path, ": ", st.st_size, " bytes, more than the limit of ", max_bytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, &out[done], out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return absl::ErrnoToStatus(err, str_cat("reading ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace coppice
