#include "tensor/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <set>

#include "tensor/backend.h"
#include "tensor/io/input_file.h"
#include "tensor/io/json.h"

namespace coppice {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

namespace {

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
constexpr size_t kChunkBytes = size_t{4} << 20;  // staging for strided copies and reads

std::string errno_text(int err) { return std::strerror(err); }

// ---------------------------------------------------------------- writing --

using Sink = std::function<absl::Status(const char* data, size_t size)>;

// Streams the bytes of dense tensor `t` (any device, any strides) to `sink` in
// row-major order.
absl::Status emit_tensor_bytes(const Tensor& t, const Sink& sink) {
  const int64_t numel = t.numel();
  if (numel == 0) return absl::OkStatus();
  const size_t es = dtype_size(t.dtype());
  const Shape& shape = t.shape();
  const Shape& strides = t.strides();
  // The range of element offsets the view touches (strides may be 0 or negative).
  int64_t lo = t.offset(), hi = t.offset();
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t extent = strides[d] * (shape[d] - 1);
    (extent < 0 ? lo : hi) += extent;
  }
  const char* storage_bytes = static_cast<const char*>(t.storage().data());
  std::vector<char> staging;
  const char* base;  // host address of element offset `lo`
  if (t.device().is_cpu()) {
    base = storage_bytes + lo * static_cast<int64_t>(es);
  } else {
    size_t span = static_cast<size_t>(hi - lo + 1) * es;
    staging.resize(span);
    backend_for(t.device())
        .copy(staging.data(), Device::cpu(), storage_bytes + lo * static_cast<int64_t>(es), t.device(), span);
    base = staging.data();
  }
  auto at = [&](int64_t element_offset) { return base + (element_offset - lo) * static_cast<int64_t>(es); };

  if (t.is_contiguous()) {
    const char* p = at(t.offset());
    size_t total = static_cast<size_t>(numel) * es;
    for (size_t done = 0; done < total;) {
      size_t n = std::min(kChunkBytes, total - done);
      absl::Status s = sink(p + done, n);
      if (!s.ok()) return s;
      done += n;
    }
    return absl::OkStatus();
  }

  // Strided: walk the index space row-major, gathering into a chunk buffer.
  const size_t ndim = shape.size();  // >= 1 here: a 0-d tensor is contiguous
  std::vector<int64_t> index(ndim, 0);
  std::vector<char> chunk;
  chunk.reserve(kChunkBytes + es * static_cast<size_t>(shape[ndim - 1]));
  const int64_t inner = shape[ndim - 1], inner_stride = strides[ndim - 1];
  int64_t outer_offset = t.offset();
  while (true) {
    const char* p = at(outer_offset);
    if (inner_stride == 1) {
      chunk.insert(chunk.end(), p, p + inner * static_cast<int64_t>(es));
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        const char* e = p + i * inner_stride * static_cast<int64_t>(es);
        chunk.insert(chunk.end(), e, e + es);
      }
    }
    if (chunk.size() >= kChunkBytes) {
      absl::Status s = sink(chunk.data(), chunk.size());
      if (!s.ok()) return s;
      chunk.clear();
    }
    // Advance the outer index (all dims but the last), odometer style.
    int64_t d = static_cast<int64_t>(ndim) - 2;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        outer_offset += strides[d];
        break;
      }
      outer_offset -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
    if (d < 0) break;
  }
  if (!chunk.empty()) return sink(chunk.data(), chunk.size());
  return absl::OkStatus();
}

// The JSON header (padded with spaces to a multiple of 8) and each tensor's byte size.
absl::StatusOr<std::string> make_header(const NamedTensors& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first_kv = true;
    for (const auto& [k, v] : metadata) {
      if (!first_kv) h += ",";
      h += json::quote(k) + ":" + json::quote(v);
      first_kv = false;
    }
    h += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") {
      return absl::InvalidArgumentError("a tensor may not be named \"__metadata__\" (reserved for metadata)");
    }
    if (!seen.insert(name).second) { return absl::InvalidArgumentError(str_cat("duplicate tensor name '", name, "'")); }
    if (!t.defined()) return absl::InvalidArgumentError(str_cat("tensor '", name, "' is undefined"));
    if (!t.is_dense()) {
      return absl::InvalidArgumentError(
          str_cat("tensor '", name, "' has format '", t.format(), "'; only dense tensors can be written"));
    }
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    if (!first) h += ",";
    first = false;
    h += json::quote(name);
    h += str_cat(":{\"dtype\":\"", safetensors_dtype_name(t.dtype()), "\",\"shape\":[", str_join(t.shape(), ","),
                 "],\"data_offsets\":[", offset, ",", offset + nbytes, "]}");
    offset += nbytes;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

std::string length_prefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// Runs `fn`, turning a coppice::Error (device copies) into a Status.
absl::Status guarded(const std::function<absl::Status()>& fn) {
  try {
    return fn();
  } catch (const Error& e) { return absl::InternalError(e.what()); } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory");
  }
}

absl::Status write_all(int fd, const char* data, size_t size, const std::string& tmp) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return absl::ErrnoToStatus(err, str_cat("writing ", tmp, ": ", errno_text(err)));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// ---------------------------------------------------------------- reading --

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads [offset, offset + n), which the caller has checked lies inside size().
  virtual absl::Status read(uint64_t offset, size_t n, void* dst) const = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, size_t size) : data_(static_cast<const char*>(data)), size_(size) {}
  uint64_t size() const override { return size_; }
  absl::Status read(uint64_t offset, size_t n, void* dst) const override {
    if (n > 0) std::memcpy(dst, data_ + offset, n);
    return absl::OkStatus();
  }

 private:
  const char* data_;
  size_t size_;
};

class FileSource final : public ByteSource {
 public:
  FileSource(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  uint64_t size() const override { return size_; }
  absl::Status read(uint64_t offset, size_t n, void* dst) const override {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      size_t want = std::min(n, kChunkBytes * 16);
      ssize_t got = ::pread(fd_, p, want, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        return absl::ErrnoToStatus(
            err, str_cat("safetensors ", path_, ": read failed at byte ", offset, ": ", errno_text(err)));
      }
      if (got == 0) {
        return absl::DataLossError(
            str_cat("safetensors ", path_, ": file shrank while reading (end of file at byte ", offset, ")"));
      }
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

std::string supported_dtypes() {
  std::vector<std::string> names;
  for (DType t : kAllDTypes) names.emplace_back(safetensors_dtype_name(t));
  return str_join(names, " ");
}

std::string offsets_text(uint64_t b, uint64_t e) { return str_cat("[", b, ", ", e, "]"); }

class Reader {
 public:
  Reader(const ByteSource& src, std::string source) : src_(src), source_(std::move(source)) {}

  absl::StatusOr<SafetensorsFile> run() {
    const uint64_t file_size = src_.size();
    if (file_size < 8) { return bad(str_cat("file is ", file_size, " bytes, too short for the 8-byte header length")); }
    unsigned char prefix[8];
    absl::Status s = src_.read(0, 8, prefix);
    if (!s.ok()) return s;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
    if (n == 0) return bad("header length is 0 (expected a JSON object)");
    if (n > kSafetensorsMaxHeaderBytes) {
      return bad(str_cat("header length ", n, " exceeds the limit of ", kSafetensorsMaxHeaderBytes,
                         " bytes (corrupt length prefix?)"));
    }
    if (n > file_size - 8) {
      return bad(str_cat("header length ", n, " exceeds the ", file_size - 8,
                         " bytes that follow the length prefix (truncated or corrupt file)"));
    }
    std::string header(static_cast<size_t>(n), '\0');
    s = src_.read(8, header.size(), header.data());
    if (!s.ok()) return s;
    if (header[0] != '{') return bad("header does not start with '{'");
    json::ParseLimits limits;
    limits.max_bytes = kSafetensorsMaxHeaderBytes;
    absl::StatusOr<json::Value> root = json::parse(header, limits);
    if (!root.ok()) return bad(str_cat("invalid header JSON: ", root.status().message()));
    if (!root->is_object()) return bad("header is not a JSON object");

    const uint64_t data_start = 8 + n;
    const uint64_t buffer_size = file_size - data_start;
    SafetensorsFile out;
    std::vector<Entry> entries;
    for (const auto& [name, v] : root->members()) {
      if (name == "__metadata__") {
        absl::Status ms = read_metadata(v, &out.metadata);
        if (!ms.ok()) return ms;
        continue;
      }
      Entry e;
      absl::Status es = read_entry(name, v, buffer_size, &e);
      if (!es.ok()) return es;
      entries.push_back(std::move(e));
    }
    absl::Status cs = check_coverage(entries, buffer_size);
    if (!cs.ok()) return cs;

    out.tensors.reserve(entries.size());
    for (const Entry& e : entries) {
      absl::StatusOr<Tensor> t = load(e, data_start);
      if (!t.ok()) return t.status();
      out.tensors.emplace_back(e.name, std::move(*t));
    }
    return out;
  }

 private:
  absl::Status bad(const std::string& what) const {
    return absl::InvalidArgumentError(str_cat("safetensors ", source_, ": ", what));
  }
  absl::Status bad_tensor(const std::string& name, const std::string& what) const {
    return bad(str_cat("tensor ", json::quote(name), ": ", what));
  }

  absl::Status read_metadata(const json::Value& v, std::map<std::string, std::string>* out) const {
    if (!v.is_object()) {
      return bad(str_cat("\"__metadata__\" must be an object of strings, got ", json::kind_name(v.kind())));
    }
    for (const auto& [k, val] : v.members()) {
      if (!val.is_string()) {
        return bad(str_cat("\"__metadata__\" value for key ", json::quote(k), " must be a string, got ",
                           json::kind_name(val.kind())));
      }
      (*out)[k] = val.as_string();
    }
    return absl::OkStatus();
  }

  absl::Status read_entry(const std::string& name, const json::Value& v, uint64_t buffer_size, Entry* e) const {
    e->name = name;
    if (!v.is_object()) return bad_tensor(name, str_cat("expected an object, got ", json::kind_name(v.kind())));
    for (const auto& m : v.members()) {
      if (m.first != "dtype" && m.first != "shape" && m.first != "data_offsets") {
        return bad_tensor(name,
                          str_cat("unexpected field ", json::quote(m.first), " (expected dtype, shape, data_offsets)"));
      }
    }
    const json::Value* dtype = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* offsets = v.find("data_offsets");
    if (dtype == nullptr) return bad_tensor(name, "missing \"dtype\"");
    if (shape == nullptr) return bad_tensor(name, "missing \"shape\"");
    if (offsets == nullptr) return bad_tensor(name, "missing \"data_offsets\"");

    if (!dtype->is_string()) return bad_tensor(name, "\"dtype\" must be a string");
    bool known = false;
    for (DType t : kAllDTypes) {
      if (dtype->as_string() == safetensors_dtype_name(t)) {
        e->dtype = t;
        known = true;
      }
    }
    if (!known) {
      return bad_tensor(name, str_cat("dtype ", json::quote(dtype->as_string()), " is not supported (expected one of ",
                                      supported_dtypes(), ")"));
    }

    if (!shape->is_array()) return bad_tensor(name, "\"shape\" must be an array of integers");
    int64_t numel = 1;
    bool any_zero = false;
    for (const json::Value& d : shape->items()) {
      if (!d.is_integer()) return bad_tensor(name, "\"shape\" must be an array of integers");
      if (d.as_integer() < 0) { return bad_tensor(name, str_cat("negative dimension ", d.as_integer(), " in shape")); }
      e->shape.push_back(d.as_integer());
      // The product of the non-zero dims must fit (contiguous strides use it).
      if (__builtin_mul_overflow(numel, std::max<int64_t>(d.as_integer(), 1), &numel)) {
        return bad_tensor(name, "shape's element count overflows 64 bits");
      }
      any_zero = any_zero || d.as_integer() == 0;
    }
    if (any_zero) numel = 0;
    uint64_t nbytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(e->dtype), &nbytes)) {
      return bad_tensor(name, "shape's byte size overflows 64 bits");
    }

    if (!offsets->is_array() || offsets->items().size() != 2 || !offsets->items()[0].is_integer() ||
        !offsets->items()[1].is_integer()) {
      return bad_tensor(name, "\"data_offsets\" must be an array of two integers [begin, end]");
    }
    int64_t b = offsets->items()[0].as_integer(), en = offsets->items()[1].as_integer();
    if (b < 0 || en < 0) return bad_tensor(name, str_cat("negative data_offsets [", b, ", ", en, "]"));
    e->begin = static_cast<uint64_t>(b);
    e->end = static_cast<uint64_t>(en);
    if (e->end < e->begin) {
      return bad_tensor(name, str_cat("data_offsets ", offsets_text(e->begin, e->end), " end before they begin"));
    }
    if (e->end - e->begin != nbytes) {
      return bad_tensor(name, str_cat("data_offsets ", offsets_text(e->begin, e->end), " span ", e->end - e->begin,
                                      " bytes, expected ", nbytes, " (shape ", shape_to_string(e->shape), " of ",
                                      safetensors_dtype_name(e->dtype), ")"));
    }
    if (e->end > buffer_size) {
      return bad_tensor(name, str_cat("data_offsets ", offsets_text(e->begin, e->end),
                                      " lie beyond the data buffer of ", buffer_size, " bytes"));
    }
    return absl::OkStatus();
  }

  // The tensors must tile the buffer exactly: no overlap, no hole, nothing after.
  absl::Status check_coverage(const std::vector<Entry>& entries, uint64_t buffer_size) const {
    std::vector<const Entry*> order;
    order.reserve(entries.size());
    for (const Entry& e : entries) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t covered = 0;
    const Entry* prev = nullptr;
    for (const Entry* e : order) {
      if (e->begin < covered) {
        return bad_tensor(e->name, str_cat("data_offsets ", offsets_text(e->begin, e->end), " overlap tensor ",
                                           json::quote(prev->name), " at ", offsets_text(prev->begin, prev->end)));
      }
      if (e->begin > covered) {
        return bad_tensor(e->name, str_cat("data_offsets ", offsets_text(e->begin, e->end),
                                           " leave a hole: expected the tensor to begin at byte ", covered));
      }
      covered = e->end;
      prev = e;
    }
    if (covered != buffer_size) {
      return bad(str_cat("the data buffer has ", buffer_size, " bytes but the tensors cover only ", covered, " (",
                         buffer_size - covered, " trailing bytes)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> load(const Entry& e, uint64_t data_start) const {
    Tensor t;
    try {
      t = Tensor::empty(e.shape, TensorOptions(e.dtype, Device::cpu()));
    } catch (const Error& err) {
      return absl::ResourceExhaustedError(
          str_cat("safetensors ", source_, ": tensor ", json::quote(e.name), ": ", err.what()));
    }
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    if (nbytes == 0) return t;
    char* dst = static_cast<char*>(t.storage().data());
    absl::Status s = src_.read(data_start + e.begin, nbytes, dst);
    if (!s.ok()) return s;
    if (e.dtype == DType::kBool) {
      for (size_t i = 0; i < nbytes; ++i) {
        unsigned char c = static_cast<unsigned char>(dst[i]);
        if (c > 1) {
          return bad_tensor(e.name,
                            str_cat("BOOL element ", i, " has byte value ", static_cast<int>(c), " (expected 0 or 1)"));
        }
      }
    }
    return t;
  }

  const ByteSource& src_;
  std::string source_;
};

}  // namespace

absl::StatusOr<std::string> serialize_safetensors(const NamedTensors& tensors,
                                                  const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = make_header(tensors, metadata);
  if (!header.ok()) return absl::Status(header.status().code(), str_cat("safetensors: ", header.status().message()));
  std::string out = length_prefix(header->size()) + *header;
  absl::Status s = guarded([&] {
    for (const auto& nt : tensors) {
      absl::Status st = emit_tensor_bytes(nt.second, [&](const char* p, size_t n) {
        out.append(p, n);
        return absl::OkStatus();
      });
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return absl::Status(s.code(), str_cat("safetensors: ", s.message()));
  return out;
}

absl::Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = make_header(tensors, metadata);
  if (!header.ok()) {
    return absl::Status(header.status().code(), str_cat("safetensors ", path, ": ", header.status().message()));
  }
  const std::string tmp = str_cat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    return absl::ErrnoToStatus(err, str_cat("safetensors ", path, ": cannot create ", tmp, ": ", errno_text(err)));
  }
  auto abandon = [&](const absl::Status& s) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return absl::Status(s.code(), str_cat("safetensors ", path, ": ", s.message()));
  };
  std::string prefix = length_prefix(header->size()) + *header;
  absl::Status s = write_all(fd, prefix.data(), prefix.size(), tmp);
  if (!s.ok()) return abandon(s);
  s = guarded([&] {
    for (const auto& nt : tensors) {
      absl::Status st = emit_tensor_bytes(nt.second, [&](const char* p, size_t n) { return write_all(fd, p, n, tmp); });
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return abandon(s);
  if (::fsync(fd) != 0) {
    int err = errno;
    return abandon(absl::ErrnoToStatus(err, str_cat("fsync ", tmp, ": ", errno_text(err))));
  }
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) {
    int err = errno;
    return abandon(absl::ErrnoToStatus(err, str_cat("close ", tmp, ": ", errno_text(err))));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    return abandon(absl::ErrnoToStatus(err, str_cat("rename ", tmp, " to ", path, ": ", errno_text(err))));
  }
  // Make the rename itself durable; some file systems cannot fsync a directory, which is not an error.
  int dir = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> parse_safetensors(const void* data, size_t size, const std::string& source) {
  MemorySource src(data, size);
  return Reader(src, source).run();
}

absl::StatusOr<SafetensorsFile> parse_safetensors(const std::string& bytes, const std::string& source) {
  return parse_safetensors(bytes.data(), bytes.size(), source);
}

absl::StatusOr<SafetensorsFile> read_safetensors(const std::string& path) {
  // A FIFO, a device or a directory is refused without blocking.
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok()) return absl::Status(file.status().code(), str_cat("safetensors ", file.status().message()));
  FileSource src(file->fd(), file->size(), path);
  return Reader(src, path).run();
}

}  // namespace coppice
