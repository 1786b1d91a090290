#include "data/idx.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "data/byte_source.h"
#include "data/gzip_source.h"

namespace coppice {
namespace {

absl::Status bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(str_cat("idx ", source, ": ", what));
}

bool known_type(uint8_t code) {
  switch (code) {
    case 0x08:
    case 0x09:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x0E: return true;
    default: return false;
  }
}

uint32_t load_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex_byte(unsigned v) {
  const char* digits = "0123456789abcdef";
  return str_cat("0x", digits[(v >> 4) & 15], digits[v & 15]);
}

}  // namespace

size_t idx_type_size(IdxType type) {
  switch (type) {
    case IdxType::kU8:
    case IdxType::kI8: return 1;
    case IdxType::kI16: return 2;
    case IdxType::kI32:
    case IdxType::kF32: return 4;
    case IdxType::kF64: return 8;
  }
  return 1;
}

const char* idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::kU8: return "u8";
    case IdxType::kI8: return "i8";
    case IdxType::kI16: return "i16";
    case IdxType::kI32: return "i32";
    case IdxType::kF32: return "f32";
    case IdxType::kF64: return "f64";
  }
  return "?";
}

Tensor IdxArray::to_tensor() const {
  const int64_t n = numel();
  auto widen = [&](auto tag) {
    using T = decltype(tag);
    Tensor t = Tensor::empty(dims, DType::kI32);
    int32_t* out = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, data.data() + i * sizeof(T), sizeof(T));
      out[i] = v;
    }
    return t;
  };
  auto copy = [&](DType dtype) {
    Tensor t = Tensor::empty(dims, dtype);
    if (n > 0) std::memcpy(t.data_ptr(), data.data(), data.size());
    return t;
  };
  switch (type) {
    case IdxType::kU8: return copy(DType::kU8);
    case IdxType::kI8: return widen(int8_t{});
    case IdxType::kI16: return widen(int16_t{});
    case IdxType::kI32: return copy(DType::kI32);
    case IdxType::kF32: return copy(DType::kF32);
    case IdxType::kF64: return copy(DType::kF64);
  }
  fail("IdxArray::to_tensor: unknown type");
}

absl::StatusOr<IdxArray> read_idx_from(ByteSource& src, const std::string& source) {
  unsigned char head[4 + 4 * kIdxMaxDims];
  absl::StatusOr<size_t> got = read_up_to(src, reinterpret_cast<char*>(head), 4);
  if (!got.ok()) return got.status();
  if (*got < 4) {
    return bad(source, str_cat(src.noun(), " has ", *got, " bytes, shorter than the 4-byte IDX magic number"));
  }
  const unsigned char* p = head;
  if (p[0] != 0 || p[1] != 0 || !known_type(p[2])) {
    return bad(source, str_cat("bad magic number ", hex_byte(p[0]), " ", hex_byte(p[1]), " ", hex_byte(p[2]), " ",
                               hex_byte(p[3]),
                               " (expected 0x00 0x00, a type byte 0x08/0x09/0x0b/0x0c/0x0d/0x0e, "
                               "and the number of dimensions)"));
  }
  IdxArray out;
  out.type = static_cast<IdxType>(p[2]);
  const int ndim = p[3];
  if (ndim < 1 || ndim > kIdxMaxDims) {
    return bad(source, str_cat("bad number of dimensions ", ndim, " (expected 1 to ", kIdxMaxDims, ")"));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  got = read_up_to(src, reinterpret_cast<char*>(head) + 4, header - 4);
  if (!got.ok()) return got.status();
  if (*got < header - 4) {
    return bad(source, str_cat("truncated header: ", ndim, " dimensions need ", header, " bytes, ", src.noun(), " has ",
                               4 + *got));
  }
  const uint64_t elem = idx_type_size(out.type);
  uint64_t numel = 1;
  // The product of the dims with zeros taken as ones (what a tensor's strides
  // multiply): bounded too, so that an empty array cannot carry dims whose
  // product overflows.
  uint64_t extent = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t n = load_be32(p + 4 + 4 * d);
    out.dims.push_back(static_cast<int64_t>(n));
    const uint64_t m = std::max<uint64_t>(n, 1);
    if (extent > kIdxMaxBytes / elem / m) {
      return bad(source, str_cat("dimensions ", shape_to_string(out.dims), "... describe more than ", kIdxMaxBytes,
                                 " bytes of data", numel * n == 0 ? " (counting a 0 dimension as 1)" : ""));
    }
    extent *= m;
    numel *= n;
  }
  // What the header promises: checked above to be at most kIdxMaxBytes.
  const uint64_t want = numel * elem;
  const auto truncated = [&](uint64_t have) {
    return bad(source, str_cat("truncated data: ", idx_type_name(out.type), " ", shape_to_string(out.dims), " needs ",
                               want, " bytes after the ", header, "-byte header, ", src.noun(), " has ", have));
  };
  const auto unexpected = [&](const std::string& extra) {
    return bad(source, str_cat(extra, " unexpected bytes after the data of ", idx_type_name(out.type), " ",
                               shape_to_string(out.dims), " (the header promises ", header + want, " bytes in all)"));
  };
  // A source that knows its length (a file, bytes in memory) is checked
  // before the data is read.
  if (const std::optional<uint64_t> have = src.remaining()) {
    if (*have < want) return truncated(*have);
    if (*have > want) return unexpected(std::to_string(*have - want));
  }
  // Exactly what the header promises is read (decompressed), then at most
  // kIdxTrailingMargin more to find out whether the data ends there: a
  // stream that holds more is refused without inflating the rest. A stream
  // of unknown length fills a buffer grown as the data arrives (doubling,
  // from kIdxFirstRead), so a header that promises up to kIdxMaxBytes over a
  // few bytes of data costs what the data holds, not the promise (a fuzzed
  // gzip stream promising 1.8 GB of u8 allocated it all before finding 20
  // bytes).
  const bool known_length = src.remaining().has_value();
  uint64_t have = 0;
  while (have < want) {
    const uint64_t size = known_length ? want : std::min(want, std::max(2 * have, kIdxFirstRead));
    out.data.resize(static_cast<size_t>(size));
    got = read_up_to(src, out.data.data() + have, static_cast<size_t>(size - have));
    if (!got.ok()) return got.status();
    have += *got;
    if (have < size) return truncated(have);
  }
  absl::StatusOr<uint64_t> extra = skip_up_to(src, kIdxTrailingMargin + 1);
  if (!extra.ok()) return extra.status();
  if (*extra > kIdxTrailingMargin) return unexpected(str_cat("more than ", kIdxTrailingMargin));
  if (*extra > 0) return unexpected(std::to_string(*extra));
  if (elem > 1) {  // big-endian to host order
    for (uint64_t i = 0; i < numel; ++i) {
      char* v = &out.data[i * elem];
      std::reverse(v, v + elem);
    }
  }
  return out;
}

absl::StatusOr<IdxArray> parse_idx(const std::string& bytes, const std::string& source) {
  MemorySource src(bytes);
  return read_idx_from(src, source);
}

absl::StatusOr<std::string> gunzip(const std::string& bytes, const std::string& source, uint64_t max_bytes) {
  MemorySource compressed(bytes);
  GzipSource plain(compressed, str_cat("idx ", source));
  std::string out;
  for (;;) {
    if (out.size() > max_bytes) return bad(source, str_cat("decompresses to more than ", max_bytes, " bytes"));
    const size_t at = out.size();
    // Grown as it fills: what the stream holds is not known before it ends.
    out.resize(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(2 * at, 4096), max_bytes + 1)));
    absl::StatusOr<size_t> got = read_up_to(plain, out.data() + at, out.size() - at);
    if (!got.ok()) return got.status();
    if (at + *got < out.size()) {
      out.resize(at + *got);
      return out;
    }
  }
}

absl::StatusOr<IdxArray> read_idx(const std::string& path) {
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok()) return file.status();
  // The compressed file itself is bounded as a plain one is: its bytes are
  // read (not held) whatever they decompress to.
  if (file->size() > kFileMaxBytes) {
    return bad(path, str_cat(file->size(), " bytes, more than the limit of ", kFileMaxBytes));
  }
  FileSource raw(std::move(*file));
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (!gz) return read_idx_from(raw, path);
  GzipSource plain(raw, str_cat("idx ", path));
  return read_idx_from(plain, path);
}

}  // namespace coppice
