// Argument checks shared by the CUDA kernels' host sides.
#pragma once

#include <string_view>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/tensor.h"

namespace coppice::cuda {

// Throws naming `op` unless `t` is a defined, dense tensor on a CUDA device.
inline void check_cuda_tensor(const Tensor& t, std::string_view op, std::string_view what) {
  check_dense(t, op, what);
  COPPICE_CHECK(t.device().is_cuda(), op, ": ", what, " is on ", t.device().to_string(), ", expected a CUDA device");
}

// ... and contiguous.
inline void check_contiguous_cuda(const Tensor& t, std::string_view op, std::string_view what) {
  check_cuda_tensor(t, op, what);
  COPPICE_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous");
}

inline void check_dtype(const Tensor& t, DType want, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.dtype() == want, op, ": ", what, " must be ", dtype_name(want), ", got ", dtype_name(t.dtype()));
}

inline void check_ndim(const Tensor& t, int64_t ndim, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.dim() == ndim, op, ": ", what, " must be ", ndim, "-D, got shape ", shape_to_string(t.shape()));
}

inline void check_inputs(const std::vector<Tensor>& in, size_t n, std::string_view op) {
  COPPICE_CHECK(in.size() == n, op, ": expected ", n, " inputs, got ", in.size());
}

// A list attribute of exactly `n` entries.
inline const std::vector<int64_t>& get_ints_n(const Attrs& attrs, std::string_view name, size_t n,
                                              std::string_view op) {
  const std::vector<int64_t>& v = attrs.get_ints(name);
  COPPICE_CHECK(v.size() == n, op, ": attribute '", name, "' needs ", n, " values, got ", v.size());
  return v;
}

}  // namespace coppice::cuda
