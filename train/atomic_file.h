// Replacing a file so that a crash at any moment leaves either the old file
// or the new one, never a partial file under its name (checkpoints, run
// markers, rewritten metrics).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace coppice {

// Test hooks for write_file_atomically.
struct AtomicWriteOptions {
  // >= 0: write only this many bytes of the temporary file, leave it there
  // and fail as a killed writer would (nothing is renamed).
  int64_t simulate_crash_after_bytes = -1;
};

// Writes `bytes` to `path` through a temporary file in the same directory
// (".<name>.tmp.<pid>"): write, fsync, rename, fsync the directory. On error
// the temporary file is removed and `path` is unchanged.
absl::Status write_file_atomically(const std::string& path, const std::string& bytes,
                                   const AtomicWriteOptions& options = {});

}  // namespace coppice
