// Reading a whole file into memory, with errors as Status values.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace coppice {

// Larger files are refused.
inline constexpr uint64_t kFileMaxBytes = uint64_t{1} << 31;

// The bytes of the regular file at `path`. Errors name the file: cannot open
// (with errno's text), not a regular file, larger than `max_bytes` (at most
// kFileMaxBytes; refused before anything is read), read error.
absl::StatusOr<std::string> read_file_bytes(const std::string& path, uint64_t max_bytes = kFileMaxBytes);

}  // namespace coppice
