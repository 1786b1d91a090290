// Helpers shared by the format implementations (not a public API).
//
// Index parts are small next to values and their validation is sequential,
// so formats compute patterns on the host and move the result to the parts'
// device; values never leave their device (they move with index_select,
// scatter_add and views).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice::sparse_detail {

// Any integer or bool tensor, copied to the host as i64, in row-major order.
std::vector<int64_t> host_i64(const Tensor& t);
// A bool tensor, copied to the host.
std::vector<uint8_t> host_mask(const Tensor& mask);
// A dense tensor of `shape` holding `v`, converted to `dtype`, on `device`.
Tensor index_tensor(const std::vector<int64_t>& v, const Shape& shape, DType dtype, Device device);
inline Tensor index_tensor(const std::vector<int64_t>& v, DType dtype, Device device) {
  return index_tensor(v, {static_cast<int64_t>(v.size())}, dtype, device);
}

// Throws naming `op` unless `values` is a dense tensor of a floating dtype.
void check_values(const Tensor& values, std::string_view op);
// Throws naming `op` unless `t` is a dense tensor with an integer dtype in `allowed`.
void check_index_part(const Tensor& t, std::string_view op, std::string_view name, std::vector<DType> allowed);
// Throws naming `op` unless every dim of `shape` is non-negative and there are `ndim` of them (-1: any).
void check_shape(const Shape& shape, int64_t ndim, std::string_view op);

// The zeroes-and-scatter that turns (flat position, value) pairs into a dense
// tensor of `shape`: positions are i64 on the values' device. Duplicates add.
Tensor scatter_to_dense(const Tensor& flat_positions, const Tensor& values, const Shape& shape);

}  // namespace coppice::sparse_detail
