// Template definitions for tensor.h.
#pragma once

namespace coppice {

template <typename T>
T* Tensor::data() const {
  COPPICE_CHECK(dtype() == dtype_of<T>(), "tensor.data<", dtype_name(dtype_of<T>()), ">(): the tensor holds ",
                dtype_name(dtype()));
  return static_cast<T*>(data_ptr());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to(DType::kF64).contiguous();
  const double* p = host.data<double>();
  std::vector<T> out(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
  return out;
}

}  // namespace coppice
