#include "data/byte_source.h"

#include <algorithm>
#include <cstring>

namespace coppice {

absl::StatusOr<size_t> read_up_to(ByteSource& src, char* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    absl::StatusOr<size_t> got = src.read(dst + done, n - done);
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    done += *got;
  }
  return done;
}

absl::StatusOr<uint64_t> skip_up_to(ByteSource& src, uint64_t limit) {
  char scratch[4096];
  uint64_t skipped = 0;
  while (skipped < limit) {
    absl::StatusOr<size_t> got =
        src.read(scratch, static_cast<size_t>(std::min<uint64_t>(sizeof scratch, limit - skipped)));
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    skipped += *got;
  }
  return skipped;
}

absl::StatusOr<size_t> MemorySource::read(char* dst, size_t n) {
  const size_t k = std::min(n, bytes_.size() - pos_);
  if (k > 0) std::memcpy(dst, bytes_.data() + pos_, k);
  pos_ += k;
  return k;
}

absl::StatusOr<size_t> FileSource::read(char* dst, size_t n) {
  absl::StatusOr<size_t> got = file_.read_some(dst, n);
  if (got.ok()) pos_ += *got;
  return got;
}

std::optional<uint64_t> FileSource::remaining() const {
  if (pos_ > file_.size() || (file_.size() == 0 && pos_ == 0)) return std::nullopt;
  return file_.size() - pos_;
}

}  // namespace coppice
