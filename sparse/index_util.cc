#include "sparse/index_util.h"

#include <cstring>

#include "tensor/ops.h"

namespace coppice::sparse_detail {

std::vector<int64_t> host_i64(const Tensor& t) {
  Tensor host = t.to(Device::cpu()).to(DType::kI64).contiguous();
  std::vector<int64_t> out(static_cast<size_t>(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(int64_t));
  return out;
}

std::vector<uint8_t> host_mask(const Tensor& mask) {
  Tensor host = mask.to(Device::cpu()).to(DType::kU8).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

Tensor index_tensor(const std::vector<int64_t>& v, const Shape& shape, DType dtype, Device device) {
  return from_vector(v, shape, TensorOptions(dtype, device));
}

void check_values(const Tensor& values, std::string_view op) {
  check_dense(values, op, "values");
  COPPICE_CHECK(is_floating(values.dtype()), op, ": values must be floating point (f32, f64, bf16, f16), got ",
                dtype_name(values.dtype()));
}

void check_index_part(const Tensor& t, std::string_view op, std::string_view name, std::vector<DType> allowed) {
  check_dense(t, op, name);
  bool ok = false;
  std::vector<std::string_view> names;
  for (DType d : allowed) {
    ok = ok || t.dtype() == d;
    names.push_back(dtype_name(d));
  }
  COPPICE_CHECK(ok, op, ": ", name, " must be ", str_join(names, " or "), ", got ", dtype_name(t.dtype()));
}

void check_shape(const Shape& shape, int64_t ndim, std::string_view op) {
  COPPICE_CHECK(ndim < 0 || static_cast<int64_t>(shape.size()) == ndim, op, ": shape must be ", ndim, "-D, got ",
                shape_to_string(shape));
  for (int64_t s : shape) COPPICE_CHECK(s >= 0, op, ": negative size in shape ", shape_to_string(shape));
}

Tensor scatter_to_dense(const Tensor& flat_positions, const Tensor& values, const Shape& shape) {
  Tensor dense = zeros({shape_numel(shape)}, values.options());
  if (values.numel() > 0) dense = scatter_add(dense, 0, flat_positions, values.reshape({-1}));
  return dense.view(shape);
}

}  // namespace coppice::sparse_detail
