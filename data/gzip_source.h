// What a gzip stream decompresses to, as a ByteSource read a piece at a
// time: only as much is decompressed as the reader asks for, so a reader
// that knows from a header how long the data is (IDX) stops a gzip bomb
// after that many bytes instead of inflating it whole.
//
// It takes one or more members (as gzip writes concatenated files) and
// checks each member's CRC-32 and length when its end is reached. Errors
// name the stream (`name`, "idx fm/a.gz") and what is wrong: not gzip (bad
// magic), corrupt data (with the compressed offset), a stream that ends
// early, bytes after the last member.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/byte_source.h"

namespace coppice {

class GzipSource final : public ByteSource {
 public:
  // Reads compressed bytes from `compressed`, which must outlive it.
  GzipSource(ByteSource& compressed, std::string name);
  ~GzipSource() override;
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  absl::StatusOr<size_t> read(char* dst, size_t n) override;
  const char* noun() const override { return "decompressed data"; }

 private:
  // Makes at least `want` compressed bytes available (fewer at the end of
  // the input); moves what is left to the front of the buffer first.
  absl::Status fill(size_t want);
  absl::Status start_member();
  absl::Status error(absl::StatusCode code, const std::string& what) const;

  ByteSource& in_;
  std::string name_;
  z_stream zs_;
  bool zs_ready_ = false;
  std::vector<unsigned char> buf_;
  uint64_t consumed_before_buf_ = 0;  // compressed bytes that came before buf_[0]
  bool input_ended_ = false;
  bool started_ = false;
  bool ended_ = false;
};

}  // namespace coppice
