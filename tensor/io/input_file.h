// A file the program reads (a job, a checkpoint, a dataset), opened so that
// whatever stands at its path cannot stall or flood the reader.
//
// A path may name a FIFO (reading waits for a writer that never comes), a
// character device (/dev/zero never ends), a socket or a directory. An
// InputFile opens without blocking (O_NONBLOCK, so a FIFO opens at once),
// checks what it opened with fstat on the descriptor itself (no window
// between a check of the path and the open), refuses anything but a regular
// file with one line naming the path and what it is ("fm/a.gz: is a FIFO,
// not a regular file"), and only then turns blocking reads back on. Opening
// is refused earlier, without opening, when the path already says it is not
// a regular file, so that opening a device has no side effect either.
//
// Every reader of outside files goes through it: the job file
// (train/yaml_limits.h), safetensors and checkpoints (tensor/io/safetensors.h),
// IDX and text datasets (data/), the dataset fingerprint.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace coppice {

// read_file_bytes refuses larger files.
inline constexpr uint64_t kFileMaxBytes = uint64_t{1} << 31;

// What a stat mode is, as messages say it: "a regular file", "a directory",
// "a FIFO", "a character device", "a block device", "a socket", "a symbolic
// link", or "an unknown kind of file".
const char* file_type_name(mode_t mode);

// The type bits of what `path` names, following symbolic links, found
// without opening it (stat): for callers that take a file or a directory.
// Errors name the path and the system's reason ("x: cannot stat: No such
// file or directory"; NotFound for a missing path).
absl::StatusOr<mode_t> file_type_at(const std::string& path);

class InputFile {
 public:
  // Opens the regular file at `path` for reading, as the header says.
  // Errors name the path: "cannot open: <errno text>", "is a FIFO, not a
  // regular file" (InvalidArgument), ...
  static absl::StatusOr<InputFile> open(const std::string& path);

  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // The size fstat gave at open (0 for /proc files, whose size is unknown).
  uint64_t size() const { return size_; }

  // Up to `n` bytes from the current position into `dst`; 0 only at the end
  // of the file. Errors name the path.
  absl::StatusOr<size_t> read_some(void* dst, size_t n);

  // The rest of the file, at most `max_bytes`: a file whose size says more is
  // refused before anything is read ("x: 3000 bytes, more than the limit of
  // 2048"), and one that turns out longer while read (it grew, or it is a
  // /proc file of unknown size) is refused once it passes the limit.
  absl::StatusOr<std::string> read_all(uint64_t max_bytes);

 private:
  InputFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The bytes of the regular file at `path` (InputFile::open, then read_all of
// at most min(max_bytes, kFileMaxBytes)).
absl::StatusOr<std::string> read_file_bytes(const std::string& path, uint64_t max_bytes = kFileMaxBytes);

}  // namespace coppice
