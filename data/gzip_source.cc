#include "data/gzip_source.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "tensor/error.h"

namespace coppice {
namespace {

// Compressed bytes read from the input at a time.
constexpr size_t kInputChunk = size_t{64} << 10;

std::string hex_byte(unsigned char v) {
  const char* digits = "0123456789abcdef";
  return str_cat("0x", digits[v >> 4], digits[v & 15]);
}

bool at_gzip_magic(const z_stream& zs) { return zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b; }

}  // namespace

GzipSource::GzipSource(ByteSource& compressed, std::string name)
    : in_(compressed), name_(std::move(name)), buf_(kInputChunk) {
  std::memset(&zs_, 0, sizeof zs_);
  zs_.next_in = buf_.data();
  // 16: the gzip wrapper, whose CRC-32 and length zlib checks at each member's end.
  zs_ready_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK;
}

GzipSource::~GzipSource() {
  if (zs_ready_) inflateEnd(&zs_);
}

absl::Status GzipSource::error(absl::StatusCode code, const std::string& what) const {
  return absl::Status(code, str_cat(name_, ": ", what));
}

absl::Status GzipSource::fill(size_t want) {
  if (zs_.avail_in >= want || input_ended_) return absl::OkStatus();
  const size_t used = static_cast<size_t>(zs_.next_in - buf_.data());
  if (zs_.avail_in > 0) std::memmove(buf_.data(), zs_.next_in, zs_.avail_in);
  consumed_before_buf_ += used;
  zs_.next_in = buf_.data();
  while (zs_.avail_in < want && zs_.avail_in < buf_.size()) {
    absl::StatusOr<size_t> got =
        in_.read(reinterpret_cast<char*>(buf_.data()) + zs_.avail_in, buf_.size() - zs_.avail_in);
    if (!got.ok()) return got.status();
    if (*got == 0) {
      input_ended_ = true;
      break;
    }
    zs_.avail_in += static_cast<uInt>(*got);
  }
  return absl::OkStatus();
}

absl::Status GzipSource::start_member() {
  if (!zs_ready_) return error(absl::StatusCode::kInternal, "zlib inflateInit2 failed");
  if (absl::Status s = fill(2); !s.ok()) return s;
  if (zs_.avail_in < 2) {
    return error(absl::StatusCode::kInvalidArgument, str_cat("not a gzip file (", zs_.avail_in, " bytes)"));
  }
  if (!at_gzip_magic(zs_)) {
    return error(absl::StatusCode::kInvalidArgument, str_cat("not a gzip file (starts with ", hex_byte(zs_.next_in[0]),
                                                             " ", hex_byte(zs_.next_in[1]), ", expected 0x1f 0x8b)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> GzipSource::read(char* dst, size_t n) {
  if (n == 0 || ended_) return size_t{0};
  if (!started_) {
    if (absl::Status s = start_member(); !s.ok()) return s;
    started_ = true;
  }
  const size_t want = std::min<size_t>(n, std::numeric_limits<uInt>::max());
  for (;;) {
    if (zs_.avail_in == 0) {
      if (absl::Status s = fill(1); !s.ok()) return s;
    }
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(want);
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    const size_t produced = want - zs_.avail_out;
    const uint64_t offset = consumed_before_buf_ + static_cast<uint64_t>(zs_.next_in - buf_.data());
    if (rc == Z_STREAM_END) {
      // The member's CRC-32 and length matched. Then: the end, another
      // member (gzip writes concatenated files that way), or garbage.
      if (absl::Status s = fill(2); !s.ok()) return s;
      if (zs_.avail_in == 0) {
        ended_ = true;
        return produced;
      }
      if (!at_gzip_magic(zs_)) {
        const std::optional<uint64_t> rest = in_.remaining();
        return error(absl::StatusCode::kInvalidArgument,
                     rest ? str_cat(zs_.avail_in + *rest, " bytes of trailing garbage after the gzip stream")
                          : str_cat("trailing garbage after the gzip stream at compressed byte ", offset));
      }
      inflateReset(&zs_);
      if (produced > 0) return produced;
      continue;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
      return error(absl::StatusCode::kDataLoss, str_cat("corrupt gzip data at compressed byte ", offset, ": ",
                                                        zs_.msg != nullptr ? zs_.msg : "invalid data"));
    }
    if (rc == Z_MEM_ERROR) return error(absl::StatusCode::kResourceExhausted, "out of memory");
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return error(absl::StatusCode::kDataLoss,
                   str_cat("gzip error ", rc, zs_.msg != nullptr ? str_cat(": ", zs_.msg) : std::string()));
    }
    if (produced > 0) return produced;
    if (zs_.avail_in == 0 && input_ended_) {
      return error(absl::StatusCode::kDataLoss, str_cat("truncated gzip stream: input ends after ", offset,
                                                        " compressed bytes, before the end of the stream"));
    }
  }
}

}  // namespace coppice
