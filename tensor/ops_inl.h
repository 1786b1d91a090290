// Template definitions for ops.h.
#pragma once

#include <cstring>

namespace coppice {

template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape, TensorOptions options) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  COPPICE_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
                " values do not fill shape ", shape_to_string(shape));
  Tensor host = Tensor::empty(shape, TensorOptions(dtype_of<T>(), Device::cpu()));
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = host.data<bool>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else {
    if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  return host.to(options);
}

}  // namespace coppice
