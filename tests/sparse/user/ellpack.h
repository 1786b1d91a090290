// ELLPACK, a sparse format defined outside the core as a user would define
// one: every row stores k slots, cols i32 [rows, k] (-1 = padding, stored
// columns strictly increasing then padding) and values [rows, k]. Linking
// this library registers it: its row in the format table (sparse/formats.h:
// from a mask, saved parts), its conversion to dense, and CPU matmul and
// sddmm kernels that count their calls. Tests of user formats share it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice::ellpack_test {

class EllpackImpl : public SparseImpl {
 public:
  EllpackImpl(Tensor cols, Tensor values, Shape shape, uint64_t version)
      : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
        cols_(std::move(cols)),
        values_(std::move(values)) {}
  Layout layout() const override { return Layout::kCustom; }
  std::string_view format() const override { return "ellpack"; }
  int64_t nnz() const override {
    int64_t n = 0;
    for (int64_t c : cols_.to_vector<int64_t>()) n += c >= 0;
    return n;
  }
  const Tensor& values() const override { return values_; }
  SparseParts parts() const override { return {{"cols", cols_}, {"values", values_}}; }
  std::map<std::string, std::string> attributes() const override { return {{"k", std::to_string(k())}}; }
  Tensor with_values(const Tensor& values) const override {
    COPPICE_CHECK(values.shape() == values_.shape(), "ellpack.with_values: wrong shape");
    return Tensor(std::make_shared<EllpackImpl>(cols_, values.contiguous(), shape(), pattern_version()));
  }
  Tensor to_dense() const override {
    const int64_t rows = shape()[0], ncols = shape()[1];
    std::vector<double> d(static_cast<size_t>(rows * ncols), 0.0);
    const auto c = cols_.to_vector<int64_t>();
    const auto v = values_.to_vector<double>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t s = 0; s < k(); ++s) {
        const int64_t col = c[static_cast<size_t>(r * k() + s)];
        if (col >= 0) d[static_cast<size_t>(r * ncols + col)] += v[static_cast<size_t>(r * k() + s)];
      }
    }
    return from_vector(d, shape(), TensorOptions(DType::kF64)).to(dtype());
  }
  Tensor to(TensorOptions options) const override {
    COPPICE_CHECK(options.device.type == DeviceType::kCpu, "ellpack: CPU only");
    return Tensor(std::make_shared<EllpackImpl>(cols_, values_.to(options.dtype), shape(), pattern_version()));
  }
  const Tensor& cols() const { return cols_; }
  int64_t k() const { return cols_.size(1); }

 private:
  Tensor cols_, values_;
};

// The validating factory (parts from outside).
Tensor sparse_ellpack(const Tensor& cols, const Tensor& values, const Shape& shape);

const EllpackImpl& ellpack(const Tensor& t);

// Calls of the registered kernels.
extern std::atomic<int> matmul_calls, sddmm_calls;

// True once the format and its kernels are registered (at static
// initialization; a test asserts it so that the linker keeps this library).
bool registered();

}  // namespace coppice::ellpack_test
