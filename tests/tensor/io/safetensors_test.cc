#include "tensor/io/safetensors.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/temp_dir.h"

namespace coppice {
namespace {

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                DType::kI32, DType::kI64, DType::kU8,   DType::kBool};

// A contiguous CPU tensor whose bytes follow a pattern (0/1 for bool).
Tensor patterned(const Shape& shape, DType dtype, int seed = 0) {
  Tensor t = Tensor::empty(shape, TensorOptions(dtype, Device::cpu()));
  size_t n = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  unsigned char* p = static_cast<unsigned char*>(t.storage().data());
  for (size_t i = 0; i < n; ++i) {
    p[i] = dtype == DType::kBool ? static_cast<unsigned char>((i + seed) % 3 == 0)
                                 : static_cast<unsigned char>(i * 31 + 7 * seed + (i >> 8));
  }
  return t;
}

// The bytes of `t` in row-major order, gathered element by element through its strides (CPU only).
std::string bytes_of(const Tensor& t) {
  std::string out;
  size_t es = dtype_size(t.dtype());
  if (t.numel() == 0) return out;
  const char* base = static_cast<const char*>(t.storage().data());
  std::vector<int64_t> idx(t.shape().size(), 0);
  for (int64_t k = 0; k < t.numel(); ++k) {
    int64_t off = t.offset();
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    out.append(base + off * static_cast<int64_t>(es), es);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file from header text and a data buffer (header padded to 8 as the writer does).
std::string make_file(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(got.device().is_cpu()) << what;
  // (Tensor::is_contiguous() says false for some empty shapes, such as [2, 0, 4].)
  EXPECT_TRUE(got.numel() == 0 || got.is_contiguous()) << what;
  EXPECT_EQ(bytes_of(got), bytes_of(want)) << what;
}

TEST(SafetensorsTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<Shape> shapes = {{}, {0}, {1}, {5}, {2, 3}, {2, 0, 4}, {3, 1, 4}, {2, 3, 4, 5}};
  NamedTensors tensors;
  int seed = 0;
  for (DType dt : kAllDTypes) {
    for (const Shape& s : shapes) {
      tensors.emplace_back(str_cat(dtype_name(dt), "_", shape_to_string(s)), patterned(s, dt, seed++));
    }
  }
  absl::StatusOr<std::string> bytes = serialize_safetensors(tensors);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<SafetensorsFile> back = parse_safetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tensors.size(), tensors.size());
  EXPECT_TRUE(back->metadata.empty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].first, tensors[i].first);  // file order kept
    expect_same(back->tensors[i].second, tensors[i].second, tensors[i].first);
  }
  // The header is padded to a multiple of 8.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>((*bytes)[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ((*bytes)[8 + n - 1] == ' ' || (*bytes)[8 + n - 1] == '}', true);
}

TEST(SafetensorsTest, RoundTripsThroughAFile) {
  std::string dir = testing::temp_dir("safetensors");
  std::string path = dir + "/model.safetensors";
  NamedTensors tensors = {{"w", patterned({4, 3}, DType::kF32)},
                          {"b", patterned({3}, DType::kBF16, 1)},
                          {"step", patterned({}, DType::kI64, 2)},
                          {"mask", patterned({7}, DType::kBool, 3)},
                          {"none", patterned({0, 2}, DType::kF16)}};
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "line\n\"quoted\" \xc3\xa9 \\ /"}, {"", "e"}};
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"model.safetensors"});  // no temporary left behind

  absl::StatusOr<SafetensorsFile> back = read_safetensors(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata, meta);
  ASSERT_EQ(back->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].first, tensors[i].first);
    expect_same(back->tensors[i].second, tensors[i].second, tensors[i].first);
  }
  ASSERT_NE(back->find("step"), nullptr);
  EXPECT_EQ(*back->find("step")->data<int64_t>(), *tensors[2].second.data<int64_t>());
  EXPECT_EQ(back->find("nope"), nullptr);
  // The file is what serialize_safetensors produces.
  EXPECT_EQ(read_file(path), *serialize_safetensors(tensors, meta));

  // From a map (name order); writing over an existing file replaces it.
  std::map<std::string, Tensor> by_name = {{"z", patterned({2}, DType::kU8)}, {"a", patterned({2}, DType::kI32)}};
  ASSERT_TRUE(write_safetensors(path, NamedTensors(by_name.begin(), by_name.end())).ok());
  back = read_safetensors(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].first, "a");
  EXPECT_EQ(back->tensors[1].first, "z");
  EXPECT_TRUE(back->metadata.empty());
  EXPECT_EQ(list_dir(dir).size(), 1u);
}

TEST(SafetensorsTest, WritesNonContiguousInputsRowMajor) {
  Tensor base = patterned({4, 6}, DType::kF32);
  Tensor cube = patterned({2, 3, 4}, DType::kI64, 5);
  Tensor halfs = patterned({5, 4}, DType::kBF16, 9);
  NamedTensors tensors = {
      {"transposed", base.t()},
      {"strided_slice", base.slice(1, 1, 6, 2)},
      {"row_slice", base.slice(0, 1, 3)},
      {"column", base.select(1, 2)},
      {"expanded", patterned({3, 1}, DType::kF64).expand({3, 4})},
      {"broadcast_scalar", patterned({}, DType::kI32).expand({2, 2})},
      {"permuted", cube.permute({2, 0, 1})},
      {"element", cube.select(0, 1).select(0, 2).select(0, 3)},
      {"bf16_t", halfs.t().slice(0, 1, 4)},
      {"empty_view", base.slice(0, 2, 2)},
  };
  int strided = 0;
  for (const auto& nt : tensors) strided += nt.second.is_contiguous() ? 0 : 1;
  EXPECT_EQ(strided, 7);
  absl::StatusOr<std::string> bytes = serialize_safetensors(tensors);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<SafetensorsFile> back = parse_safetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) expect_same(back->tensors[i].second, tensors[i].second, tensors[i].first);
  // Spot check the transpose by value.
  const float* src = base.data<float>();
  const float* got = back->find("transposed")->data<float>();
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(std::memcmp(&got[r * 4 + c], &src[c * 6 + r], 4), 0);
  }
}

TEST(SafetensorsTest, WritesCudaTensors) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (this build has no CUDA backend, or no GPU is visible)";
  Tensor host = patterned({8, 5}, DType::kF32);
  Tensor dev = host.to(Device::cuda());
  NamedTensors tensors = {{"dev", dev}, {"dev_t", dev.t()}, {"dev_slice", dev.slice(1, 1, 5, 2)}};
  absl::StatusOr<std::string> bytes = serialize_safetensors(tensors);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<SafetensorsFile> back = parse_safetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  expect_same(back->tensors[0].second, host, "dev");
  expect_same(back->tensors[1].second, host.t(), "dev_t");
  expect_same(back->tensors[2].second, host.slice(1, 1, 5, 2), "dev_slice");
}

// A file built byte by byte from the format description.
TEST(SafetensorsTest, MatchesAHandBuiltFile) {
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}"
      "      ";  // 138 bytes of JSON + 6 spaces = 144
  ASSERT_EQ(header.size(), 144u);
  const std::string expected = std::string("\x90\0\0\0\0\0\0\0", 8) + header +
                               std::string("\x00\x00\x80\x3f\x00\x00\x20\xc0", 8) +  // 1.0f, -2.5f
                               std::string("\x07\0\0\0\0\0\0\0", 8);                 // 7
  NamedTensors tensors = {{"a", from_vector<float>({1.0f, -2.5f})}, {"b", from_vector<int64_t>({7}, Shape{})}};
  absl::StatusOr<std::string> bytes = serialize_safetensors(tensors, {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, expected);

  absl::StatusOr<SafetensorsFile> back = parse_safetensors(expected);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata.at("format"), "pt");
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].second.shape(), Shape({2}));
  EXPECT_EQ(back->tensors[0].second.data<float>()[1], -2.5f);
  EXPECT_EQ(back->tensors[1].second.dim(), 0);
  EXPECT_EQ(*back->tensors[1].second.data<int64_t>(), 7);
}

// Other writers order entries as they like and may not pad; both are valid.
TEST(SafetensorsTest, ReadsUnpaddedHeadersWithEntriesOutOfOffsetOrder) {
  std::string header =
      "{\"second\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
      "\"first\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
      "\"__metadata__\":{\"k\":\"\\u00e9\\n\"}}\n";
  absl::StatusOr<SafetensorsFile> f =
      parse_safetensors(make_file(header, std::string("\x00\x3c\x00\xc0\x05\x06", 6), /*pad=*/false));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[0].first, "second");
  EXPECT_EQ(f->tensors[0].second.data<uint8_t>()[1], 6);
  EXPECT_EQ(static_cast<float>(f->tensors[1].second.data<Half>()[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(f->tensors[1].second.data<Half>()[1]), -2.0f);
  EXPECT_EQ(f->metadata.at("k"), "\xc3\xa9\n");
  // An empty file (no tensors) is fine too.
  f = parse_safetensors(make_file("{}", ""));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->tensors.empty());
}

TEST(SafetensorsTest, RejectsBadWrites) {
  std::string dir = testing::temp_dir("safetensors");
  std::string path = dir + "/out.safetensors";
  write_file(path, "previous");
  struct Case {
    NamedTensors tensors;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back(
      {{{"a", patterned({2}, DType::kF32)}, {"a", patterned({2}, DType::kF32)}}, "duplicate tensor name 'a'"});
  cases.push_back({{{"__metadata__", patterned({2}, DType::kF32)}}, "__metadata__"});
  cases.push_back({{{"u", Tensor()}}, "tensor 'u' is undefined"});
  for (const Case& c : cases) {
    absl::Status s = write_safetensors(path, c.tensors);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(path), absl::string_view::npos) << s;
    EXPECT_FALSE(serialize_safetensors(c.tensors).ok());
  }
  EXPECT_EQ(read_file(path), "previous");  // untouched
  EXPECT_EQ(list_dir(dir).size(), 1u);     // and no temporary left

  absl::Status s = write_safetensors(dir + "/no/such/dir/x.safetensors", {{"a", patterned({1}, DType::kU8)}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create"), absl::string_view::npos) << s;

  absl::StatusOr<SafetensorsFile> r = read_safetensors(dir + "/missing.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  r = read_safetensors(dir);
  ASSERT_FALSE(r.ok());
}

// ---- corrupt input ---------------------------------------------------------

std::string valid_file() {
  NamedTensors tensors = {{"w", patterned({3, 2}, DType::kF32)},
                          {"flag", patterned({3}, DType::kBool)},
                          {"e", patterned({0}, DType::kI64)},
                          {"s", patterned({}, DType::kF64)}};
  return *serialize_safetensors(tensors, {{"k", "v"}});
}

TEST(SafetensorsCorruptTest, EveryTruncationFails) {
  std::string good = valid_file();
  ASSERT_TRUE(parse_safetensors(good).ok());
  std::string dir = testing::temp_dir("safetensors");
  std::string path = dir + "/t.safetensors";
  for (size_t len = 0; len < good.size(); ++len) {
    // A fresh heap copy of exactly `len` bytes, so that ASan sees any overread.
    std::vector<char> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
    absl::StatusOr<SafetensorsFile> f = parse_safetensors(prefix.data(), prefix.size(), "trunc");
    ASSERT_FALSE(f.ok()) << "prefix of " << len << " bytes was accepted";
    EXPECT_NE(f.status().message().find("safetensors trunc: "), absl::string_view::npos) << f.status();
    if (len % 16 == 0) {  // and through the file reader
      write_file(path, good.substr(0, len));
      absl::StatusOr<SafetensorsFile> g = read_safetensors(path);
      ASSERT_FALSE(g.ok()) << len;
      EXPECT_NE(g.status().message().find(path), absl::string_view::npos) << g.status();
    }
  }
}

TEST(SafetensorsCorruptTest, TableOfBadFiles) {
  auto entry = [](const std::string& name, const std::string& body) { return "\"" + name + "\":" + body; };
  const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\1');
  struct Case {
    std::string name;
    std::string bytes;
    std::string message;
  };
  std::vector<Case> cases = {
      {"empty file", "", "too short for the 8-byte header length"},
      {"seven bytes", std::string(7, '\0'), "too short"},
      {"zero header length", le64(0) + eight, "header length is 0"},
      {"header longer than file", le64(64) + "{}", "exceeds the 2 bytes that follow"},
      {"absurd header length", le64(uint64_t{1} << 62) + "{}", "exceeds the limit of 100000000"},
      {"max header length", le64(~uint64_t{0}) + "{}", "exceeds the limit"},
      {"header length too short", le64(4) + "{\"a\":{}}", "invalid header JSON"},
      {"not an object", make_file("[1,2]", ""), "does not start with '{'"},
      {"leading space", make_file(" {}", ""), "does not start with '{'"},
      {"trailing garbage", make_file("{}x", ""), "trailing characters"},
      {"trailing NUL padding", make_file("{}" + std::string(6, '\0'), "", false), "trailing characters"},
      {"second object", make_file("{}{}", ""), "trailing characters"},
      {"bad JSON", make_file("{\"a\":{\"dtype\":\"F32\",}}", ""), "invalid header JSON"},
      {"unterminated", make_file("{\"a", ""), "unterminated string"},
      {"deep nesting", make_file("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", ""), "nesting"},
      {"duplicate names", make_file("{" + entry("a", f32x2) + "," + entry("a", f32x2) + "}", eight),
       "duplicate key \"a\""},
      {"entry not an object", make_file("{\"a\":3}", ""), "tensor \"a\": expected an object"},
      {"missing dtype", make_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight), "missing \"dtype\""},
      {"missing shape", make_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight), "missing \"shape\""},
      {"missing offsets", make_file(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "missing \"data_offsets\""},
      {"extra field", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight),
       "unexpected field \"x\""},
      {"unknown dtype", make_file(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", eight),
       "dtype \"F8_E4M3\" is not supported"},
      {"lowercase dtype", make_file(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", eight),
       "dtype \"f32\" is not supported"},
      {"dtype not a string", make_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
       "\"dtype\" must be a string"},
      {"shape not an array", make_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight),
       "\"shape\" must be an array"},
      {"shape of strings", make_file(R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", eight),
       "\"shape\" must be an array of integers"},
      {"fractional shape", make_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       "only integers"},
      {"negative dim", make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "negative dimension -2"},
      {"overflowing shape",
       make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "element count overflows"},
      {"overflowing bytes",
       make_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", eight),
       "byte size overflows"},
      {"huge dim beside zero",
       make_file(R"({"a":{"dtype":"F32","shape":[0,9223372036854775807,2],"data_offsets":[0,0]}})", ""),
       "element count overflows"},
      {"offsets not pair", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", eight),
       "two integers"},
      {"offsets not array", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", eight),
       "two integers"},
      {"negative offsets", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", eight),
       "negative data_offsets"},
      {"reversed offsets", make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
       "end before they begin"},
      {"size mismatch", make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "span 8 bytes, expected 12 (shape [3] of F32)"},
      {"offsets out of range", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", eight),
       "beyond the data buffer of 8 bytes"},
      {"offsets far out of range",
       make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[9223372036854775805,9223372036854775807]}})", eight),
       "beyond the data buffer"},
      {"overlap",
       make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       "tensor \"b\": data_offsets [4, 8] overlap tensor \"a\" at [0, 8]"},
      {"same range twice",
       make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
           eight),
       "overlap"},
      {"empty tensor inside another",
       make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
           eight),
       "overlap"},
      {"hole at start", make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "leave a hole: expected the tensor to begin at byte 0"},
      {"hole between",
       make_file(
           R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
           eight),
       "tensor \"b\": data_offsets [6, 8] leave a hole"},
      {"trailing data", make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "4 trailing bytes"},
      {"data but no tensors", make_file("{}", eight), "8 trailing bytes"},
      {"metadata not an object", make_file(R"({"__metadata__":[]})", ""), "\"__metadata__\" must be an object"},
      {"metadata value not a string", make_file(R"({"__metadata__":{"k":1}})", ""),
       "\"__metadata__\" value for key \"k\" must be a string, got integer"},
      {"metadata nested", make_file(R"({"__metadata__":{"k":{"x":"y"}}})", ""), "must be a string, got object"},
      {"bool byte 2", make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\1\0\2", 3)),
       "BOOL element 2 has byte value 2"},
      {"invalid UTF-8 name", make_file("{\"\xff\":{}}", ""), "invalid UTF-8"},
  };
  for (const Case& c : cases) {
    std::vector<char> bytes(c.bytes.begin(), c.bytes.end());  // exact-size heap copy for ASan
    absl::StatusOr<SafetensorsFile> f = parse_safetensors(bytes.data(), bytes.size(), "bad.st");
    ASSERT_FALSE(f.ok()) << c.name << " was accepted";
    std::string msg(f.status().message());
    EXPECT_EQ(msg.rfind("safetensors bad.st: ", 0), 0u) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos)
        << c.name << ": got '" << msg << "', expected to contain '" << c.message << "'";
  }
}

// A header of many names costs time linear in its size: 200,000 metadata
// keys and 100,000 (empty) tensors are read, and a duplicate among them,
// first, in the middle or last, is refused by name, all within a small
// test's time (one such header once took minutes to refuse).
TEST(SafetensorsCorruptTest, HeadersWithManyNames) {
  constexpr size_t kKeys = 200000, kTensors = 100000;
  auto header = [&](size_t dup_key, size_t dup_tensor) {  // index renamed to k0 / t0; 0: none
    std::string h = "{\"__metadata__\":{";
    for (size_t i = 0; i < kKeys; ++i) h += str_cat(i ? "," : "", "\"k", i == dup_key ? 0 : i, "\":\"v\"");
    h += "}";
    for (size_t i = 0; i < kTensors; ++i) {
      h += str_cat(",\"t", i == dup_tensor ? 0 : i, "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
    }
    return h + "}";
  };
  absl::StatusOr<SafetensorsFile> f = parse_safetensors(make_file(header(0, 0), ""), "many.st");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata.size(), kKeys);
  ASSERT_EQ(f->tensors.size(), kTensors);
  EXPECT_EQ(f->tensors.back().first, str_cat("t", kTensors - 1));
  for (size_t dup : {size_t{1}, kKeys / 2, kKeys - 1}) {
    f = parse_safetensors(make_file(header(dup, 0), ""), "many.st");
    ASSERT_FALSE(f.ok()) << "metadata key " << dup << " duplicated";
    EXPECT_NE(f.status().message().find(": duplicate key \"k0\""), std::string::npos) << f.status();
  }
  for (size_t dup : {size_t{1}, kTensors / 2, kTensors - 1}) {
    f = parse_safetensors(make_file(header(0, dup), ""), "many.st");
    ASSERT_FALSE(f.ok()) << "tensor " << dup << " duplicated";
    EXPECT_NE(f.status().message().find(": duplicate key \"t0\""), std::string::npos) << f.status();
  }
}

// Random damage to a valid file: any outcome but a crash (or an ASan report) is fine.
TEST(SafetensorsCorruptTest, RandomByteDamageNeverCrashes) {
  std::string good = valid_file();
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string bad = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % bad.size();
      // Mostly aim at the length prefix and the header, where the structure is.
      if (iter % 4 != 0) pos = rng() % std::min<size_t>(bad.size(), 8 + 112);
      bad[pos] = static_cast<char>(rng() % 4 == 0 ? "{}[]\",:0123456789-"[rng() % 18] : rng() & 0xff);
    }
    if (iter % 5 == 0) bad.resize(rng() % (bad.size() + 1));
    std::vector<char> bytes(bad.begin(), bad.end());
    absl::StatusOr<SafetensorsFile> f = parse_safetensors(bytes.data(), bytes.size());
    if (f.ok()) ++accepted;
  }
  // Flips in tensor data (and some in padding) are harmless; most header damage is not.
  EXPECT_LT(accepted, 4000);
}

}  // namespace
}  // namespace coppice
