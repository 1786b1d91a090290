// A stream of bytes read front to back: a string in memory, a file
// (tensor/io/input_file.h), or what a gzip stream decompresses to
// (data/gzip_source.h).
//
// Readers of formats whose header says how long the data is (IDX) read
// through it, so that they can stop where the header says the data ends
// instead of reading, or decompressing, everything first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tensor/io/input_file.h"

namespace coppice {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `n` (> 0) bytes into `dst`; 0 only at the end. Errors name the source.
  virtual absl::StatusOr<size_t> read(char* dst, size_t n) = 0;
  // The bytes left, when known without reading them (a string's, a regular
  // file's); nullopt for a decompressed stream.
  virtual std::optional<uint64_t> remaining() const { return std::nullopt; }
  // What it is in messages: "file", "decompressed data".
  virtual const char* noun() const { return "file"; }
};

// Reads until `n` bytes have come or the source ends; how many came.
absl::StatusOr<size_t> read_up_to(ByteSource& src, char* dst, size_t n);

// Reads and drops up to `limit` bytes; how many there were (at most
// `limit`, so that a stream that never ends costs bounded time).
absl::StatusOr<uint64_t> skip_up_to(ByteSource& src, uint64_t limit);

// Bytes held in memory (not copied: they must outlive the source).
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {}
  absl::StatusOr<size_t> read(char* dst, size_t n) override;
  std::optional<uint64_t> remaining() const override { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

// An opened regular file, from its current position.
class FileSource final : public ByteSource {
 public:
  explicit FileSource(InputFile file) : file_(std::move(file)) {}
  absl::StatusOr<size_t> read(char* dst, size_t n) override;
  // By the size the file had when opened; unknown once more than that has
  // been read (it grew, or it is a /proc file whose size says 0).
  std::optional<uint64_t> remaining() const override;

 private:
  InputFile file_;
  uint64_t pos_ = 0;
};

}  // namespace coppice
