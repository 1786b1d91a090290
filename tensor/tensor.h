// The Tensor handle: one type for every format (docs/architecture.md, Key decisions).
//
// A Tensor is a cheap shared handle to a TensorImpl. Dense tensors are strided
// views of a Storage; sparse formats (sparse/) are other TensorImpls that hold
// their parts as dense tensors. Copying a Tensor shares the data; clone() copies.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace coppice {

enum class Layout : uint8_t { kDense, kCoo, kCsr, kCsc, kBsr, kBlockedEll, kNm, kMasked, kCustom };
std::string_view layout_name(Layout layout);

class TensorImpl {
 public:
  TensorImpl(Shape shape, DType dtype, Device device) : shape_(std::move(shape)), dtype_(dtype), device_(device) {}
  virtual ~TensorImpl() = default;

  virtual Layout layout() const = 0;
  // The name the dispatcher keys kernels by: "dense", "csr", ... or the name a
  // user-defined format registered under.
  virtual std::string_view format() const = 0;
  // The family whose kernels serve this format where it has none of its own
  // (every format declared by its levels: "levels", sparse/levels); empty
  // for a format outside any family. The dispatcher tries a call's formats,
  // then their families, then the dense fallback.
  virtual std::string_view kernel_family() const { return {}; }

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

 protected:
  Shape shape_;
  DType dtype_;
  Device device_;
};

// A strided view of a Storage. Strides and offset count elements, not bytes.
class DenseImpl final : public TensorImpl {
 public:
  DenseImpl(Storage storage, Shape shape, Shape strides, int64_t offset, DType dtype)
      : TensorImpl(std::move(shape), dtype, storage.device()),
        storage_(std::move(storage)),
        strides_(std::move(strides)),
        offset_(offset) {}

  Layout layout() const override { return Layout::kDense; }
  std::string_view format() const override { return "dense"; }

  const Storage& storage() const { return storage_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }

 private:
  Storage storage_;
  Shape strides_;
  int64_t offset_;
};

struct TensorOptions {
  DType dtype = DType::kF32;
  Device device = Device::cpu();

  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}    // NOLINT: zeros({2}, DType::kF64) reads well
  TensorOptions(Device d) : device(d) {}  // NOLINT
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A dense tensor over `storage`.
  static Tensor from_storage(Storage storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  // A new, uninitialized, contiguous dense tensor.
  static Tensor empty(const Shape& shape, TensorOptions options = {});

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // The impl as a concrete type, or nullptr when it is another format.
  template <typename Impl>
  Impl* impl_as() const {
    return dynamic_cast<Impl*>(impl_.get());
  }
  // True when both handles share one impl (not just equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  Layout layout() const { return checked()->layout(); }
  std::string_view format() const { return checked()->format(); }
  bool is_dense() const { return layout() == Layout::kDense; }
  bool is_sparse() const { return !is_dense(); }
  const Shape& shape() const { return checked()->shape(); }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // d may be negative
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return checked()->dtype(); }
  Device device() const { return checked()->device(); }
  TensorOptions options() const { return {dtype(), device()}; }

  // Dense only (throw naming the format otherwise).
  const Shape& strides() const;
  int64_t stride(int64_t d) const;
  int64_t offset() const;
  const Storage& storage() const;
  bool is_contiguous() const;
  void* data_ptr() const;  // address of element [0, ..., 0]
  template <typename T>
  T* data() const;  // typed data_ptr(); checks the dtype

  // Views: share storage, never copy (dense only).
  Tensor view(const Shape& shape) const;     // needs compatible strides; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // Python-style clamping
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;                // exact bounds
  Tensor select(int64_t dim, int64_t index) const;                                // drops `dim`
  Tensor expand(const Shape& shape) const;  // -1 keeps a size; new leading dims allowed
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // Copies.
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;  // itself when already there
  Tensor to(DType dtype) const;    // itself when already that type
  Tensor to(TensorOptions options) const;

  // In place (dense only); return *this.
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype, crosses devices

  // The single value of a one-element tensor.
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  // All values as a flat vector (copied to the CPU, converted to T).
  template <typename T>
  std::vector<T> to_vector() const;

  std::string to_string() const;

 private:
  TensorImpl* checked() const {
    COPPICE_CHECK(impl_ != nullptr, "tensor: use of an undefined Tensor");
    return impl_.get();
  }
  const DenseImpl& dense(std::string_view op) const;

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Throws naming `op` and `what` ("input", "weight", ...) unless `t` is defined and dense.
void check_dense(const Tensor& t, std::string_view op, std::string_view what);
// Throws unless all defined tensors are on the same device.
void check_same_device(const std::vector<Tensor>& ts, std::string_view op);

}  // namespace coppice

#include "tensor/tensor_inl.h"
