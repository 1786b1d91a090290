#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"

namespace coppice {
namespace {

absl::Status bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(str_cat("idx ", source, ": ", what));
}

absl::Status data_loss(const std::string& source, const std::string& what) {
  return absl::DataLossError(str_cat("idx ", source, ": ", what));
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

absl::StatusOr<IdxArray> parse_idx(const std::string& bytes, const std::string& source) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  if (size < 4) { return bad(source, str_cat("file has ", size, " bytes, shorter than the 4-byte IDX magic number")); }
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
  if (size < header) {
    return bad(source, str_cat("truncated header: ", ndim, " dimensions need ", header, " bytes, file has ", size));
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
  const uint64_t want = numel * elem;
  const uint64_t have = size - header;
  if (have < want) {
    return bad(source, str_cat("truncated data: ", idx_type_name(out.type), " ", shape_to_string(out.dims), " needs ",
                               want, " bytes after the ", header, "-byte header, file has ", have));
  }
  if (have > want) {
    return bad(source,
               str_cat(have - want, " unexpected bytes after the data of ", idx_type_name(out.type), " ",
                       shape_to_string(out.dims), " (file has ", size, " bytes, expected ", header + want, ")"));
  }
  out.data.assign(bytes, header, want);
  if (elem > 1) {  // big-endian to host order
    for (uint64_t i = 0; i < numel; ++i) {
      char* v = &out.data[i * elem];
      std::reverse(v, v + elem);
    }
  }
  return out;
}

absl::StatusOr<std::string> gunzip(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x1f ||
      static_cast<unsigned char>(bytes[1]) != 0x8b) {
    return bad(source, bytes.size() < 2
                           ? str_cat("not a gzip file (", bytes.size(), " bytes)")
                           : str_cat("not a gzip file (starts with ", hex_byte(static_cast<unsigned char>(bytes[0])),
                                     " ", hex_byte(static_cast<unsigned char>(bytes[1])), ", expected 0x1f 0x8b)"));
  }
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {  // 16: gzip wrapper, with its CRC-32 and length check
    return absl::InternalError(str_cat("idx ", source, ": zlib inflateInit2 failed"));
  }
  struct Ender {
    z_stream* zs;
    ~Ender() { inflateEnd(zs); }
  } ender{&zs};

  std::string out;
  // The last four bytes hold the (first member's) length mod 2^32: a hint only.
  uint64_t hint = 0;
  if (bytes.size() >= 4) {
    const auto* t = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - 4);
    hint = uint64_t{t[0]} | (uint64_t{t[1]} << 8) | (uint64_t{t[2]} << 16) | (uint64_t{t[3]} << 24);
  }
  // Deflate expands at most about 1032:1, which bounds what a lying hint can cost.
  hint = std::min<uint64_t>(hint, uint64_t{bytes.size()} * 1032);
  out.resize(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(hint + 1, 4096), kIdxMaxBytes + 1)));

  size_t in_pos = 0;
  size_t out_pos = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data());
  for (;;) {
    if (out_pos == out.size()) {
      if (out.size() > kIdxMaxBytes) {
        return bad(source, str_cat("decompresses to more than ", kIdxMaxBytes, " bytes"));
      }
      out.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t{out.size()} * 2, kIdxMaxBytes + 1)));
    }
    const size_t in_chunk = std::min<size_t>(bytes.size() - in_pos, std::numeric_limits<uInt>::max());
    const size_t out_chunk = std::min<size_t>(out.size() - out_pos, std::numeric_limits<uInt>::max());
    zs.next_in = const_cast<Bytef*>(in + in_pos);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(&out[out_pos]);
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (in_pos == bytes.size()) break;
      // Another member follows (gzip writes concatenated members that way), or garbage.
      if (bytes.size() - in_pos >= 2 && in[in_pos] == 0x1f && in[in_pos + 1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      return bad(source, str_cat(bytes.size() - in_pos, " bytes of trailing garbage after the gzip stream"));
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
      return data_loss(
          source, str_cat("corrupt gzip data at compressed byte ", in_pos, ": ", zs.msg ? zs.msg : "invalid data"));
    }
    if (rc == Z_MEM_ERROR) return absl::ResourceExhaustedError(str_cat("idx ", source, ": out of memory"));
    if (rc == Z_BUF_ERROR || rc == Z_OK) {
      if (in_pos == bytes.size() && zs.avail_out > 0) {
        return data_loss(source, str_cat("truncated gzip stream: input ends after ", bytes.size(),
                                         " compressed bytes, before the end of the stream"));
      }
      continue;
    }
    return data_loss(source, str_cat("gzip error ", rc, zs.msg ? str_cat(": ", zs.msg) : std::string()));
  }
  if (out_pos > kIdxMaxBytes) return bad(source, str_cat("decompresses to more than ", kIdxMaxBytes, " bytes"));
  out.resize(out_pos);
  return out;
}

absl::StatusOr<IdxArray> read_idx(const std::string& path) {
  absl::StatusOr<std::string> raw = read_file_bytes(path);
  if (!raw.ok()) return raw.status();
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (!gz) return parse_idx(*raw, path);
  absl::StatusOr<std::string> plain = gunzip(*raw, path);
  if (!plain.ok()) return plain.status();
  raw->clear();
  raw->shrink_to_fit();
  return parse_idx(*plain, path);
}

}  // namespace coppice
