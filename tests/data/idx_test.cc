#include "data/idx.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "data/gzip_source.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace coppice {
namespace {

using testing::gzip;
using testing::gzip_with_zeros;
using testing::idx_bytes;
using testing::temp_dir;
using testing::write_file;

// Expects `s` to be an error whose message contains every one of `parts`.
void expect_error(const absl::Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(Idx, ParsesU8) {
  absl::StatusOr<IdxArray> a = parse_idx(idx_bytes(0x08, {2, 3}, std::string("\x01\x02\x03\x04\x05\xff", 6)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->type, IdxType::kU8);
  EXPECT_EQ(a->dims, (Shape{2, 3}));
  Tensor t = a->to_tensor();
  EXPECT_EQ(t.dtype(), DType::kU8);
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 255}));
}

TEST(Idx, ParsesBigEndianTypes) {
  std::string i32;
  testing::put_be32(&i32, 0xfffffffe);  // -2
  testing::put_be32(&i32, 70000);
  absl::StatusOr<IdxArray> a = parse_idx(idx_bytes(0x0C, {2}, i32));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->to_tensor().to_vector<int64_t>(), (std::vector<int64_t>{-2, 70000}));

  std::string f32;
  testing::put_be32(&f32, 0x3fc00000);  // 1.5f
  a = parse_idx(idx_bytes(0x0D, {1, 1, 1}, f32));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->to_tensor().dtype(), DType::kF32);
  EXPECT_EQ(a->to_tensor().to_vector<double>(), (std::vector<double>{1.5}));

  a = parse_idx(idx_bytes(0x0B, {2}, std::string("\xff\xfd\x01\x00", 4)));  // i16 -3, 256
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->to_tensor().dtype(), DType::kI32);
  EXPECT_EQ(a->to_tensor().to_vector<int64_t>(), (std::vector<int64_t>{-3, 256}));

  a = parse_idx(idx_bytes(0x09, {1}, std::string("\x80", 1)));  // i8 -128
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->to_tensor().to_vector<int64_t>(), (std::vector<int64_t>{-128}));

  std::string f64;
  testing::put_be32(&f64, 0xc0040000);  // -2.5
  testing::put_be32(&f64, 0);
  a = parse_idx(idx_bytes(0x0E, {1}, f64));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->to_tensor().to_vector<double>(), (std::vector<double>{-2.5}));
}

TEST(Idx, ZeroSizedDimension) {
  absl::StatusOr<IdxArray> a = parse_idx(idx_bytes(0x08, {0, 28, 28}, ""));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->numel(), 0);
  EXPECT_EQ(a->to_tensor().shape(), (Shape{0, 28, 28}));
}

// Found by the IDX fuzzer (tests/fuzz): a 0 dimension made the array empty,
// so the other dims went unchecked, and the tensor's strides (the product of
// the dims with zeros as ones) overflowed.
TEST(Idx, ZeroDimensionDoesNotHideHugeOnes) {
  expect_error(parse_idx(idx_bytes(0x0E, {0, 0xffffffff, 0xffffff10, 64}, ""), "f.idx").status(),
               {"f.idx", "dimensions [0, 4294967295]...", "more than 2147483648 bytes", "counting a 0 dimension as 1"});
  // Large but within the limit: still an empty array.
  absl::StatusOr<IdxArray> a = parse_idx(idx_bytes(0x08, {65536, 0, 16384}, ""));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->to_tensor().shape(), (Shape{65536, 0, 16384}));
}

TEST(Idx, BadBytes) {
  expect_error(parse_idx("", "f.idx").status(), {"f.idx", "shorter than the 4-byte IDX magic"});
  expect_error(parse_idx(std::string("\x00\x01\x08\x01", 4) + "xxxx", "f.idx").status(), {"f.idx", "bad magic number"});
  expect_error(parse_idx(idx_bytes(0x07, {1}, "a"), "f.idx").status(), {"bad magic number", "0x07"});
  expect_error(parse_idx(idx_bytes(0x08, {}, ""), "f.idx").status(), {"bad number of dimensions 0"});
  expect_error(parse_idx(idx_bytes(0x08, {3, 3}, "").substr(0, 9), "f.idx").status(), {"truncated header"});
  expect_error(parse_idx(idx_bytes(0x08, {3, 3}, "12345678"), "f.idx").status(),
               {"f.idx", "truncated data", "needs 9 bytes", "has 8"});
  expect_error(parse_idx(idx_bytes(0x0C, {2}, "1234567"), "f.idx").status(), {"truncated data", "needs 8 bytes"});
  expect_error(parse_idx(idx_bytes(0x08, {2}, "123"), "f.idx").status(), {"1 unexpected bytes after the data"});
  expect_error(parse_idx(idx_bytes(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}, ""), "f.idx").status(), {"more than"});
}

TEST(Idx, Gunzip) {
  const std::string plain = idx_bytes(0x08, {4}, "abcd");
  absl::StatusOr<std::string> out = gunzip(gzip(plain));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, plain);
  // Concatenated members decompress to the concatenation.
  out = gunzip(gzip("abc") + gzip("def"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "abcdef");
  // A larger, compressible payload (the output buffer grows).
  std::string big(3'000'000, 'x');
  for (size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>(i);
  out = gunzip(gzip(big));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, big);
}

TEST(Idx, BadGzip) {
  const std::string gz = gzip(idx_bytes(0x08, {64}, std::string(64, 'q')));
  expect_error(gunzip("plain text", "f.gz").status(), {"f.gz", "not a gzip file", "0x70 0x6c"});
  expect_error(gunzip("", "f.gz").status(), {"not a gzip file"});
  for (size_t keep : {size_t{2}, size_t{10}, gz.size() / 2, gz.size() - 4, gz.size() - 1}) {
    expect_error(gunzip(gz.substr(0, keep), "f.gz").status(), {"f.gz"});
  }
  expect_error(gunzip(gz.substr(0, gz.size() - 4), "f.gz").status(), {"truncated gzip stream"});
  std::string corrupt = gz;
  corrupt[gz.size() - 6] ^= 0x55;  // inside the CRC-32
  expect_error(gunzip(corrupt, "f.gz").status(), {"f.gz", "corrupt gzip data"});
  corrupt = gz;
  corrupt[3] = static_cast<char>(0xe0);  // reserved flag bits
  expect_error(gunzip(corrupt, "f.gz").status(), {"corrupt gzip data"});
  expect_error(gunzip(gz + "junk", "f.gz").status(), {"4 bytes of trailing garbage"});
}

TEST(Idx, FlippedBytesNeverCrash) {
  // Every single-byte corruption of a small gzipped IDX file is either an
  // error or (when it only hits the gzip header's free fields) the same data.
  const std::string plain = idx_bytes(0x08, {3, 5}, std::string("abcdefghijklmno"));
  const std::string gz = gzip(plain);
  for (size_t i = 0; i < gz.size(); ++i) {
    for (unsigned char x : {0x01, 0x80, 0xff}) {
      std::string bad = gz;
      bad[i] = static_cast<char>(bad[i] ^ x);
      absl::StatusOr<std::string> out = gunzip(bad, "f.gz");
      if (!out.ok()) continue;
      absl::StatusOr<IdxArray> a = parse_idx(*out, "f.gz");
      if (a.ok()) { EXPECT_EQ(*out, plain) << "byte " << i; }
    }
  }
}

TEST(Idx, RandomBytesNeverCrash) {
  // Headers with random types, ranks and sizes over payloads of random length:
  // each parse is an error or an array whose data matches its header.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes;
    const int header = static_cast<int>(rng() % 24);
    for (int i = 0; i < header; ++i) bytes.push_back(static_cast<char>(rng() % 4 == 0 ? rng() : rng() % 4));
    if (trial % 2 == 0 && bytes.size() >= 4) {
      bytes[0] = bytes[1] = 0;
      bytes[2] = static_cast<char>(0x08 + rng() % 7);
    }
    bytes += std::string(rng() % 64, 'p');
    absl::StatusOr<IdxArray> a = parse_idx(bytes, "rand");
    if (!a.ok()) continue;
    EXPECT_EQ(a->data.size(), static_cast<size_t>(a->numel()) * idx_type_size(a->type));
    EXPECT_EQ(a->to_tensor().numel(), a->numel());
  }
}

TEST(Idx, ReadsFiles) {
  const std::string dir = temp_dir();
  const std::string plain = idx_bytes(0x08, {2, 2}, "wxyz");
  absl::StatusOr<IdxArray> a = read_idx(write_file(dir + "/a.idx", plain));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data, "wxyz");
  a = read_idx(write_file(dir + "/a.idx.gz", gzip(plain)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data, "wxyz");

  expect_error(read_idx(write_file(dir + "/plain.gz", plain)).status(), {dir + "/plain.gz", "not a gzip file"});
  expect_error(read_idx(dir + "/missing.gz").status(), {dir + "/missing.gz", "cannot open", "No such file"});
  expect_error(read_idx(dir).status(), {dir, "is a directory, not a regular file"});
  expect_error(read_idx(write_file(dir + "/empty.gz", "")).status(), {"empty.gz", "not a gzip file"});
  expect_error(read_idx(write_file(dir + "/trunc.gz", gzip(plain).substr(0, 12))).status(), {"trunc.gz"});
  expect_error(read_idx(write_file(dir + "/short.idx", plain.substr(0, plain.size() - 1))).status(),
               {"short.idx", "truncated data"});
}

// Counts the bytes another source hands out.
class CountingSource final : public ByteSource {
 public:
  explicit CountingSource(ByteSource& in) : in_(in) {}
  absl::StatusOr<size_t> read(char* dst, size_t n) override {
    absl::StatusOr<size_t> got = in_.read(dst, n);
    if (got.ok()) total += *got;
    return got;
  }
  uint64_t total = 0;

 private:
  ByteSource& in_;
};

TEST(Idx, GzipBombStopsAfterWhatTheHeaderPromises) {
  // 16 promised bytes, then 256 MiB of zeros in about 256 KB of gzip.
  const std::string bomb = gzip_with_zeros(idx_bytes(0x08, {16}, std::string(16, 'a')), uint64_t{256} << 20);
  ASSERT_LT(bomb.size(), size_t{1} << 20);
  MemorySource compressed(bomb);
  GzipSource plain(compressed, "idx bomb.gz");
  CountingSource counted(plain);
  const absl::Status s = read_idx_from(counted, "bomb.gz").status();
  expect_error(s, {"bomb.gz", "more than 65536 unexpected bytes after the data of u8 [16]", "promises 24 bytes"});
  // The header, the data and the margin: nothing like 256 MiB.
  EXPECT_LE(counted.total, 24 + kIdxTrailingMargin + 4096);

  const std::string dir = temp_dir();
  expect_error(read_idx(write_file(dir + "/bomb.gz", bomb)).status(), {dir + "/bomb.gz", "unexpected bytes"});
}

// The peak resident memory of this process so far, in bytes (Linux reports KiB).
int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

TEST(Idx, GzipStreamPromisingMuchCostsWhatItHolds) {
  // A header promising 2 x 3 x 301989891 u8 (1.8 GB, under kIdxMaxBytes) over
  // 20 bytes of data, gzipped so that its length is unknown until it ends:
  // refused as truncated, having held about what the stream holds (libFuzzer
  // found the reader allocating the whole promise first).
  const std::string gz = gzip(idx_bytes(0x08, {2, 3, 0x12000003}, std::string(20, 'a')));
  const int64_t before = peak_rss_bytes();
  MemorySource compressed(gz);
  GzipSource plain(compressed, "idx promise.gz");
  expect_error(read_idx_from(plain, "promise.gz").status(),
               {"promise.gz", "truncated data", "needs 1811939346 bytes", "has 20"});
  EXPECT_LT(peak_rss_bytes() - before, int64_t{256} << 20);
}

TEST(Idx, GzipStreamLongerOrShorterThanPromised) {
  const std::string dir = temp_dir();
  // Shorter: the file, both sizes.
  expect_error(read_idx(write_file(dir + "/short.gz", gzip(idx_bytes(0x08, {100}, std::string(10, 'a'))))).status(),
               {dir + "/short.gz", "truncated data", "needs 100 bytes", "decompressed data has 10"});
  expect_error(read_idx(write_file(dir + "/head.gz", gzip(std::string("\0\0\x08\x02\0\0", 6)))).status(),
               {dir + "/head.gz", "truncated header", "decompressed data has 6"});
  // Longer by a little: counted exactly.
  expect_error(read_idx(write_file(dir + "/long.gz", gzip(idx_bytes(0x08, {2}, "abc")))).status(),
               {dir + "/long.gz", "1 unexpected bytes after the data of u8 [2]"});
  // The promise checked after the data too: a bad CRC at the end is still found.
  std::string gz = gzip(idx_bytes(0x08, {4}, "abcd"));
  gz[gz.size() - 6] ^= 0x55;
  expect_error(read_idx(write_file(dir + "/crc.gz", gz)).status(), {dir + "/crc.gz", "corrupt gzip data"});
}

TEST(Idx, PlainFileSizeCheckedBeforeTheData) {
  const std::string dir = temp_dir();
  // A header that promises 47 MB over a 20-byte file: refused from the sizes.
  expect_error(read_idx(write_file(dir + "/a.idx", idx_bytes(0x08, {60000, 28, 28}, "abcd"))).status(),
               {dir + "/a.idx", "needs 47040000 bytes", "file has 4"});
  expect_error(read_idx(write_file(dir + "/b.idx", idx_bytes(0x08, {2}, "abcdef"))).status(),
               {dir + "/b.idx", "4 unexpected bytes"});
}

TEST(Idx, SpecialFilesAreRefusedWithoutBlocking) {
  ::alarm(20);  // a FIFO that blocked would end the test here
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/train-images-idx3-ubyte.gz";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_error(read_idx(fifo).status(), {fifo, "is a FIFO, not a regular file"});
  expect_error(read_idx("/dev/zero").status(), {"/dev/zero", "is a character device"});
  ::alarm(0);
}

}  // namespace
}  // namespace coppice
