#include "sparse/one_hot.h"

#include <algorithm>
#include <vector>

#include "sparse/convert.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "tensor/ops.h"

namespace coppice {

Tensor one_hot(const Tensor& indices, int64_t num_classes, std::string_view format, DType dtype,
               const FormatOptions& options) {
  COPPICE_CHECK(indices.defined() && indices.is_dense() && is_integral(indices.dtype()),
                "one_hot: expected a dense integer tensor of indices, got ",
                indices.defined() ? str_cat(dtype_name(indices.dtype()), " ", indices.format()) : "undefined");
  COPPICE_CHECK(is_floating(dtype), "one_hot: the values' dtype must be floating, got ", dtype_name(dtype));
  COPPICE_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (inferred) or >= 0, got ", num_classes);
  const Tensor host = indices.to(Device::cpu()).to(DType::kI64).contiguous();
  const int64_t n = host.numel();
  const int64_t* idx = host.data<int64_t>();
  if (num_classes == -1) {
    COPPICE_CHECK(n > 0, "one_hot: num_classes cannot be inferred from no indices");
    num_classes = *std::max_element(idx, idx + n) + 1;
  }
  for (int64_t k = 0; k < n; ++k) {
    COPPICE_CHECK(idx[k] >= 0 && idx[k] < num_classes, "one_hot: index ", idx[k], " at flat position ", k,
                  " of indices ", shape_to_string(indices.shape()), " is outside [0, ", num_classes, ")");
  }
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  const Device device = indices.device();
  Tensor ones_values = ones({n}, TensorOptions(dtype, device));
  const bool one_d = indices.dim() == 1;
  if (format.empty()) format = one_d ? "csr" : "coo";

  Tensor built;
  if (one_d) {
    std::vector<int64_t> crow(static_cast<size_t>(n + 1));
    for (int64_t k = 0; k <= n; ++k) crow[k] = k;
    built = sparse_csr(from_vector(crow, {n + 1}).to(device), host.to(device), ones_values, shape);
  } else {
    // Row-major over the indices, so the COO is coalesced as built.
    const auto ndim = static_cast<int64_t>(shape.size());
    std::vector<int64_t> coords(static_cast<size_t>(ndim * n));
    for (int64_t k = 0; k < n; ++k) {
      int64_t flat = k;
      for (int64_t d = ndim - 1; d-- > 0;) {
        coords[d * n + k] = flat % shape[d];
        flat /= shape[d];
      }
      coords[(ndim - 1) * n + k] = idx[k];
    }
    built = sparse_coo(from_vector(coords, {ndim, n}).to(device), ones_values, shape, /*coalesced=*/true);
  }
  if (format == built.format()) return built;
  return format == "dense" ? to_dense(built) : to_format(built, format, options);
}

}  // namespace coppice
