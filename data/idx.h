// Reading IDX files (the format of MNIST and Fashion-MNIST), plain or gzipped.
//
// Layout: two zero bytes, a type byte, the number of dimensions D, then D
// big-endian uint32 sizes, then the values in row-major order, big-endian.
// Types: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64.
//
// Reading never crashes on bad bytes (docs/architecture.md, Errors): every problem
// (missing file, not a regular file, not gzip, truncated or corrupt gzip, bad
// magic, unknown type, sizes that disagree with the file's length, sizes whose
// product (a 0 counted as 1) describes more than kIdxMaxBytes) is an error
// Status whose message names the file and what is wrong.
//
// Memory stays about what the header promises: the header is read first (from
// the decompressed stream for a gzipped file), then exactly the data it
// promises, then at most kIdxTrailingMargin more bytes to see that the data
// ends there. A gzip bomb whose header promises 47 MB costs 47 MB, whatever
// it would inflate to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/byte_source.h"
#include "tensor/tensor.h"

namespace coppice {

enum class IdxType : uint8_t { kU8 = 0x08, kI8 = 0x09, kI16 = 0x0B, kI32 = 0x0C, kF32 = 0x0D, kF64 = 0x0E };

// The element size of `type` in bytes.
size_t idx_type_size(IdxType type);
// "u8", "i8", "i16", "i32", "f32", "f64".
const char* idx_type_name(IdxType type);

// One parsed IDX file: its element type, its sizes, and its values in host
// byte order (row-major; multi-byte values already swapped from big-endian).
struct IdxArray {
  IdxType type = IdxType::kU8;
  Shape dims;
  std::string data;  // numel * idx_type_size(type) bytes

  int64_t numel() const { return shape_numel(dims); }
  // The values as a CPU tensor: u8 as kU8, i8 and i16 widened to kI32, i32 as
  // kI32, f32 as kF32, f64 as kF64.
  Tensor to_tensor() const;
};

// Limits that keep a hostile file from costing unbounded memory.
inline constexpr uint64_t kIdxMaxBytes = uint64_t{1} << 31;  // decompressed size
// The first read of a stream of unknown length; later ones double what was read.
inline constexpr uint64_t kIdxFirstRead = uint64_t{1} << 20;
inline constexpr int kIdxMaxDims = 16;
// How far past the promised data a stream is read to tell "longer than
// promised" (with the count of extra bytes, up to this) from "exactly".
inline constexpr uint64_t kIdxTrailingMargin = uint64_t{64} << 10;

// Reads one IDX array from `src` as the header says; `source` names it in
// errors. Refuses data shorter or longer than the header promises, naming
// both sizes.
absl::StatusOr<IdxArray> read_idx_from(ByteSource& src, const std::string& source);

// Parses the bytes of an (uncompressed) IDX file; `source` names them in errors.
absl::StatusOr<IdxArray> parse_idx(const std::string& bytes, const std::string& source = "<memory>");

// Decompresses a gzip stream (one or more members, as gzip writes them) held
// in memory (data/gzip_source.h). Errors: not gzip (bad magic), corrupt data
// or checksum, truncated stream, bytes after the last member, more than
// `max_bytes` (decompression stops there).
absl::StatusOr<std::string> gunzip(const std::string& bytes, const std::string& source = "<memory>",
                                   uint64_t max_bytes = kIdxMaxBytes);

// Reads an IDX file (a regular file: tensor/io/input_file.h; of at most
// kFileMaxBytes). A path ending in ".gz" must be gzip (and is decompressed
// through zlib as far as its header says); any other path is read as plain
// IDX, its size checked against the header before the data is read.
absl::StatusOr<IdxArray> read_idx(const std::string& path);

}  // namespace coppice
