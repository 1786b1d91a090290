#include "tensor/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "tensor/error.h"

namespace coppice {
namespace {

// "<path>: <doing>: <errno text>" (ErrnoToStatus adds the text), with the
// code errno maps to (NotFound for ENOENT).
absl::Status errno_status(int err, const std::string& path, const char* doing) {
  return absl::ErrnoToStatus(err, str_cat(path, ": ", doing));
}

absl::Status not_regular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(str_cat(path, ": is ", file_type_name(mode), ", not a regular file"));
}

absl::Status too_large(const std::string& path, uint64_t size, uint64_t max_bytes) {
  return absl::InvalidArgumentError(str_cat(path, ": ", size, " bytes, more than the limit of ", max_bytes));
}

// A file longer than its size said: it grew, or it is a /proc file.
absl::Status longer_than_limit(const std::string& path, uint64_t max_bytes) {
  return absl::InvalidArgumentError(str_cat(path, ": more than the limit of ", max_bytes, " bytes"));
}

}  // namespace

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "an unknown kind of file";
}

absl::StatusOr<mode_t> file_type_at(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_status(errno, path, "cannot stat");
  return st.st_mode & S_IFMT;
}

absl::StatusOr<InputFile> InputFile::open(const std::string& path) {
  // Refused before opening when the path already says what it is: opening a
  // device or a FIFO is not always free of effects. The check that counts
  // is the fstat below, on what was opened.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
  // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
  // O_NOCTTY: a terminal never becomes the controlling one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return errno_status(errno, path, "cannot open");
  InputFile file(path, fd, 0);
  if (::fstat(fd, &st) != 0) return errno_status(errno, path, "cannot stat");
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
  file.size_ = static_cast<uint64_t>(st.st_size);
  // A regular file never blocks; reads go back to ordinary blocking I/O so
  // that none of them can end early with EAGAIN.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return errno_status(errno, path, "cannot open");
  return file;
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> InputFile::read_some(void* dst, size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd_, dst, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) return errno_status(errno, path_, "read failed");
  }
}

absl::StatusOr<std::string> InputFile::read_all(uint64_t max_bytes) {
  if (size_ > max_bytes) return too_large(path_, size_, max_bytes);
  // Sized by fstat, plus one byte to see the end (or a file that grew); a
  // file of unknown size grows the buffer as it is read.
  std::string out(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(size_, 4096), max_bytes) + 1), '\0');
  size_t done = 0;
  for (;;) {
    if (done == out.size()) {
      if (done > max_bytes) return longer_than_limit(path_, max_bytes);
      out.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t{out.size()} * 2, max_bytes + 1)));
    }
    absl::StatusOr<size_t> got = read_some(&out[done], out.size() - done);
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    done += *got;
  }
  if (done > max_bytes) return longer_than_limit(path_, max_bytes);
  out.resize(done);
  return out;
}

absl::StatusOr<std::string> read_file_bytes(const std::string& path, uint64_t max_bytes) {
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok()) return file.status();
  return file->read_all(std::min(max_bytes, kFileMaxBytes));
}

}  // namespace coppice
