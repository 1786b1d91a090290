// Reading and writing named dense tensors in the safetensors format.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the byte buffer; offsets are
// relative to the start of the buffer. Dtypes: F32 F64 BF16 F16 I32 I64 U8 BOOL.
//
// Writing is atomic: the file is written to "<path>.tmp.<pid>", fsynced and
// renamed over `path`, so a crash leaves either the old file or the new one.
// Reading is bounds-checked and never crashes on bad bytes: every problem is
// an error Status naming the file, the tensor and what was expected
// (docs/architecture.md, Errors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace coppice {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // CPU, contiguous, in header order
  std::map<std::string, std::string> metadata;

  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Limits that keep a hostile file from costing unbounded memory or time.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;  // as the reference implementation

// Writes `tensors` (any device, any strides; dense only) in the given order,
// with `metadata` as "__metadata__" (omitted when empty). Names must be unique
// and not "__metadata__". Returns an error instead of throwing. (From a
// std::map: NamedTensors(m.begin(), m.end()); a second overload would make
// write_safetensors(path, {{"w", w}}) ambiguous.)
absl::Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// The whole file as bytes (what write_safetensors writes); for tests and
// in-memory use.
absl::StatusOr<std::string> serialize_safetensors(const NamedTensors& tensors,
                                                  const std::map<std::string, std::string>& metadata = {});

// Reads and validates a file. Tensor data is read straight into each tensor's
// storage, so memory peaks at the tensors' size. Anything but a regular file
// (a FIFO, a device, a directory) is refused without blocking
// (tensor/io/input_file.h).
absl::StatusOr<SafetensorsFile> read_safetensors(const std::string& path);

// The same from bytes in memory; `source` names them in error messages.
absl::StatusOr<SafetensorsFile> parse_safetensors(const void* data, size_t size,
                                                  const std::string& source = "<memory>");
absl::StatusOr<SafetensorsFile> parse_safetensors(const std::string& bytes, const std::string& source = "<memory>");

}  // namespace coppice
