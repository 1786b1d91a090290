#include "distributed/replica_sync.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "sparse/io/sparse_safetensors.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// FNV-1a, 64-bit: small, stable across builds and platforms.
class Fnv1a {
 public:
  void add_bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      hash_ ^= p[i];
      hash_ *= 0x100000001b3ull;
    }
  }
  void add(std::string_view s) {
    add_int(static_cast<int64_t>(s.size()));
    add_bytes(s.data(), s.size());
  }
  void add_int(int64_t v) { add_bytes(&v, sizeof v); }
  void add_shape(const Shape& shape) {
    add_int(static_cast<int64_t>(shape.size()));
    for (int64_t d : shape) add_int(d);
  }
  // A dense part: its dtype, shape and elements.
  void add_part(const Tensor& part) {
    add(dtype_name(part.dtype()));
    add_shape(part.shape());
    const Tensor host = part.to(Device::cpu()).contiguous();
    add_bytes(host.data_ptr(), static_cast<size_t>(host.numel()) * dtype_size(host.dtype()));
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

std::string describe(const Tensor& t) {
  return str_cat(t.format(), " ", dtype_name(t.dtype()), " ", shape_to_string(t.shape()));
}

Tensor bytes_tensor(const std::string& s, Device device) {
  std::vector<uint8_t> bytes(s.begin(), s.end());
  return from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())}).to(device);
}

std::string tensor_string(const Tensor& t) {
  const std::vector<uint8_t> v = t.to(Device::cpu()).to_vector<uint8_t>();
  return std::string(v.begin(), v.end());
}

// Every rank's text, in rank order (one all_gather_v).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine, Device device) {
  Work w = comm.all_gather_v(bytes_tensor(mine, device));
  w.wait();
  const std::string all = tensor_string(w.result());
  std::vector<std::string> out;
  size_t at = 0;
  for (int64_t n : w.sizes()) {
    out.push_back(all.substr(at, static_cast<size_t>(n)));
    at += static_cast<size_t>(n);
  }
  return out;
}

// Every rank's int64 values (equal counts), in rank order (one all_gather).
std::vector<int64_t> all_gather_ints(Communicator& comm, const std::vector<int64_t>& mine, Device device) {
  Work w = comm.all_gather(from_vector<int64_t>(mine, {static_cast<int64_t>(mine.size())}).to(device));
  w.wait();
  return w.result().to(Device::cpu()).to_vector<int64_t>();
}

void check_root(const Communicator& comm, int root, const std::string& what) {
  COPPICE_CHECK(root >= 0 && root < comm.world_size(), "broadcast_any('", what, "'): root ", root,
                " is not a rank of a world of ", comm.world_size());
}

// Broadcasts a dense tensor in place (through a contiguous copy if need be).
void broadcast_dense_in_place(Communicator& comm, const Tensor& tensor, int root) {
  if (tensor.is_contiguous()) {
    comm.broadcast(tensor, root).wait();
    return;
  }
  Tensor tmp = tensor.contiguous();
  comm.broadcast(tmp, root).wait();
  Tensor target = tensor;
  target.copy_(tmp);
}

// The root's tensor, rebuilt on every rank from its serialized parts through
// the formats' validating factories (sparse/io/sparse_safetensors.h).
Tensor broadcast_parts(Communicator& comm, const Tensor& tensor, int root, const std::string& what) {
  const Device device = tensor.device();
  std::string bytes;
  if (comm.rank() == root) {
    absl::StatusOr<std::string> s = serialize_sparse_safetensors({{what, tensor}});
    COPPICE_CHECK(s.ok(), "broadcast_any('", what, "'): cannot serialize on rank ", root, ": ", s.status().ToString());
    bytes = std::move(*s);
  }
  Tensor size = from_vector<int64_t>({static_cast<int64_t>(bytes.size())}, {1}).to(device);
  comm.broadcast(size, root).wait();
  const int64_t n = size.to(Device::cpu()).to_vector<int64_t>()[0];
  Tensor buffer = comm.rank() == root ? bytes_tensor(bytes, device) : zeros({n}, {DType::kU8, device});
  comm.broadcast(buffer, root).wait();
  if (comm.rank() == root) return tensor;
  absl::StatusOr<SparseSafetensorsFile> file =
      parse_sparse_safetensors(tensor_string(buffer), str_cat("broadcast_any('", what, "') from rank ", root));
  COPPICE_CHECK(file.ok(), "broadcast_any('", what, "'): rank ", comm.rank(), " cannot rebuild rank ", root,
                "'s tensor: ", file.status().ToString());
  const Tensor* got = file->find(what);
  COPPICE_CHECK(got != nullptr, "broadcast_any('", what, "'): rank ", root, "'s bytes hold no tensor '", what, "'");
  return to_device(*got, device);
}

}  // namespace

uint64_t pattern_fingerprint(const Tensor& tensor) {
  COPPICE_CHECK(tensor.defined(), "pattern_fingerprint: an undefined Tensor");
  Fnv1a h;
  h.add(tensor.format());
  h.add_shape(tensor.shape());
  if (tensor.is_dense()) return h.value();
  const SparseImpl& impl = sparse_impl(tensor, "pattern_fingerprint");
  for (const auto& [key, value] : impl.attributes()) {
    h.add(key);
    h.add(value);
  }
  for (const auto& [name, part] : impl.parts()) {
    h.add(name);
    // The values part is left out (its shape is not: BSR's carries the block shape).
    if (name == "values") {
      h.add_shape(part.shape());
    } else {
      h.add_part(part);
    }
  }
  return h.value();
}

Tensor broadcast_any(Communicator& comm, const Tensor& tensor, int root, const std::string& what) {
  COPPICE_CHECK(tensor.defined(), "broadcast_any('", what, "'): an undefined Tensor on rank ", comm.rank());
  check_root(comm, root, what);
  const Device device = tensor.device();
  // One all_gather_v of (format, dtype, shape) lets every rank name the first
  // rank that disagrees with the root, and throw the same message.
  const std::vector<std::string> kinds = all_gather_strings(comm, describe(tensor), device);
  for (size_t r = 0; r < kinds.size(); ++r) {
    COPPICE_CHECK(kinds[r] == kinds[root], "broadcast_any('", what, "'): rank ", r, " holds ", kinds[r],
                  " but the root, rank ", root, ", holds ", kinds[root]);
  }
  if (tensor.is_dense()) {
    broadcast_dense_in_place(comm, tensor, root);
    return tensor;
  }
  const std::vector<int64_t> sums = all_gather_ints(comm, {static_cast<int64_t>(pattern_fingerprint(tensor))}, device);
  bool all_match = true;
  for (int64_t s : sums) all_match = all_match && s == sums[static_cast<size_t>(root)];
  if (all_match) {
    broadcast_dense_in_place(comm, values(tensor), root);
    return tensor;
  }
  Tensor got = broadcast_parts(comm, tensor, root, what);
  // A rank whose pattern already was the root's keeps its handle (and pattern version).
  if (comm.rank() != root && sums[static_cast<size_t>(comm.rank())] == sums[static_cast<size_t>(root)]) {
    Tensor mine = values(tensor);
    mine.copy_(values(got));
    return tensor;
  }
  return got;
}

void check_patterns_agree(Communicator& comm, const std::map<std::string, Tensor>& tensors,
                          const std::string& context) {
  // [hash of the names, checksum of each tensor]: all_gather_v, so that ranks
  // holding a different number of tensors get a clear error instead of a
  // mismatched collective.
  Fnv1a names;
  std::vector<int64_t> mine{0};
  for (const auto& [name, t] : tensors) {
    names.add(name);
    mine.push_back(static_cast<int64_t>(pattern_fingerprint(t)));
  }
  mine[0] = static_cast<int64_t>(names.value());
  // On the tensors' device: a stream-ordered backend (NCCL) takes device tensors only.
  const Device device = tensors.empty() ? Device::cpu() : tensors.begin()->second.device();
  Work w = comm.all_gather_v(from_vector<int64_t>(mine, {static_cast<int64_t>(mine.size())}).to(device));
  w.wait();
  const std::vector<int64_t> all = w.result().to(Device::cpu()).to_vector<int64_t>();
  const std::vector<int64_t>& sizes = w.sizes();
  std::vector<std::vector<int64_t>> per_rank;
  size_t at = 0;
  for (int64_t n : sizes) {
    per_rank.emplace_back(all.begin() + at, all.begin() + at + n);
    at += static_cast<size_t>(n);
  }
  for (size_t r = 1; r < per_rank.size(); ++r) {
    COPPICE_CHECK(per_rank[r].size() == per_rank[0].size() && per_rank[r][0] == per_rank[0][0], context,
                  ": ranks check the patterns of different tensors: rank ", r, " names ", per_rank[r].size() - 1,
                  " tensors, rank 0 names ", per_rank[0].size() - 1, " (the names differ or their number does)");
  }
  size_t index = 1;
  for (const auto& [name, t] : tensors) {
    std::vector<std::string> differing;
    for (size_t r = 1; r < per_rank.size(); ++r) {
      if (per_rank[r][index] != per_rank[0][index]) differing.push_back(std::to_string(r));
    }
    COPPICE_CHECK(differing.empty(), context, ": the pattern of '", name, "' on rank(s) ", str_join(differing, ", "),
                  " differs from rank 0's (pattern checksums disagree): the replicas have drifted");
    ++index;
  }
}

std::vector<double> all_reduce_scalars(Communicator& comm, const std::vector<double>& values, ReduceOp op) {
  Tensor t = from_vector<double>(values, {static_cast<int64_t>(values.size())});
  comm.all_reduce(t, op).wait();
  return t.to_vector<double>();
}

}  // namespace coppice
