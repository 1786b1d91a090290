// The base of every sparse format (docs/architecture.md, Formats).
//
// A sparse tensor is a TensorImpl whose parts are dense tensors on one device
// (values, pointers, indices, masks). Its pattern (which positions are
// stored) carries a version number: a tensor made from new parts gets a fresh
// version, one made by with_values() keeps its source's, so kernels can cache
// descriptors and analysis per pattern and training state can tell when a
// mask changed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

using SparseParts = std::vector<std::pair<std::string, Tensor>>;

class SparseImpl : public TensorImpl {
 public:
  SparseImpl(Shape shape, DType dtype, Device device, uint64_t pattern_version)
      : TensorImpl(std::move(shape), dtype, device), pattern_version_(pattern_version) {}

  uint64_t pattern_version() const { return pattern_version_; }
  // Stored entries (explicit zeros included).
  virtual int64_t nnz() const = 0;
  // The stored values, in the format's order.
  virtual const Tensor& values() const = 0;
  // The parts that define the tensor, by name ("values", "crow_indices", ...).
  virtual SparseParts parts() const = 0;
  // Format parameters beyond the parts (block shape, n and m), as strings.
  virtual std::map<std::string, std::string> attributes() const { return {}; }
  // The same pattern (and version) with other values of values()' shape and device.
  virtual Tensor with_values(const Tensor& values) const = 0;
  virtual Tensor to_dense() const = 0;
  // The same tensor (and pattern version) with index parts moved to
  // options.device and values moved and converted to options.dtype.
  virtual Tensor to(TensorOptions options) const = 0;

 private:
  uint64_t pattern_version_;
};

// A process-wide fresh pattern version (never 0).
uint64_t new_pattern_version();

// Helpers on any tensor: dense tensors count every element as stored.
const SparseImpl& sparse_impl(const Tensor& t, std::string_view op);
int64_t nnz(const Tensor& t);
double density(const Tensor& t);            // nnz / numel (1 for an empty tensor)
uint64_t pattern_version(const Tensor& t);  // 0 for dense
Tensor values(const Tensor& t);
Tensor with_values(const Tensor& t, const Tensor& values);
Tensor to_dense(const Tensor& t);  // itself when dense
// Moves a tensor of any format (Tensor::to handles only dense); the pattern
// version is kept.
Tensor to_device(const Tensor& t, Device device);
// Converts the values of a tensor of any format; the pattern version is kept.
Tensor to_dtype(const Tensor& t, DType dtype);

// A readable form of a tensor of any format: for a sparse one, the header of
// Tensor::to_string plus nnz, density, pattern version and the format's
// attributes, then one line per part; a part prints its values when it has at
// most `max_part_elements` of them, else only its dtype and shape. Dense
// tensors print as Tensor::to_string does.
std::string to_string(const Tensor& t, int64_t max_part_elements = 64);

// Registers a format's conversion to dense (SparseImpl::to_dense) with the
// dispatcher, for its counted dense fallback. Each format defines one at
// static initialization, which is why //sparse:formats is alwayslink.
struct ToDenseRegistrar {
  explicit ToDenseRegistrar(std::string format);
};

}  // namespace coppice
