// Helpers for the data tests: files written to a temporary directory
// (tests/util/temp_dir.h), and IDX/gzip bytes built by hand.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace coppice {
namespace testing {

inline std::string write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(f.good()) << path;
  return path;
}

inline void put_be32(std::string* s, uint32_t v) {
  s->push_back(static_cast<char>(v >> 24));
  s->push_back(static_cast<char>(v >> 16));
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}

// An IDX header for type `type` and sizes `dims`, followed by `payload`.
inline std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string s;
  s.push_back(0);
  s.push_back(0);
  s.push_back(static_cast<char>(type));
  s.push_back(static_cast<char>(dims.size()));
  for (uint32_t d : dims) put_be32(&s, d);
  return s + payload;
}

// `bytes` as one gzip member (zlib's deflate with the gzip wrapper).
inline std::string gzip(const std::string& bytes) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, bytes.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(&out[0]);
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// `prefix` followed by `zeros` zero bytes, as one gzip member, compressed a
// piece at a time: a gzip bomb (deflate packs zeros about 1000:1) without
// holding what it inflates to.
inline std::string gzip_with_zeros(const std::string& prefix, uint64_t zeros) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  const std::string chunk(size_t{1} << 20, '\0');
  std::string out;
  std::string buf(size_t{1} << 16, '\0');
  auto feed = [&](const char* data, size_t n, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    zs.avail_in = static_cast<uInt>(n);
    do {
      zs.next_out = reinterpret_cast<Bytef*>(&buf[0]);
      zs.avail_out = static_cast<uInt>(buf.size());
      deflate(&zs, flush);
      out.append(buf, 0, buf.size() - zs.avail_out);
    } while (zs.avail_out == 0 || (flush == Z_FINISH && zs.avail_in > 0));
  };
  feed(prefix.data(), prefix.size(), Z_NO_FLUSH);
  for (uint64_t left = zeros; left > 0;) {
    const size_t n = static_cast<size_t>(left < chunk.size() ? left : chunk.size());
    feed(chunk.data(), n, Z_NO_FLUSH);
    left -= n;
  }
  feed(nullptr, 0, Z_FINISH);
  deflateEnd(&zs);
  return out;
}

}  // namespace testing
}  // namespace coppice
