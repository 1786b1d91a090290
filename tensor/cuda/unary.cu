// The CUDA kernels of the unary elementwise ops (tensor/unary_ops.h), twins
// of tensor/cpu/unary.cc: the same functor per op, x of any strides in, a
// contiguous y of x's shape and dtype out; a contiguous, 16-byte aligned
// bf16/f16 x in 16-byte packs (elementwise.cuh), with the same bits.
#include <cmath>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/unary_registration.h"

namespace coppice::cuda {
namespace {

using unary_ops::Domain;

template <typename T, typename Op>
struct UnaryFn {
  T* y;
  const T* x;
  Op op;
  __device__ void operator()(const int64_t* off) const { y[off[0]] = T(op(static_cast<compute_t<T>>(x[off[1]]))); }
};

template <typename T, typename Op>
Tensor launch(std::string_view name, const Tensor& x, Op op) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  // bf16/f16, contiguous and aligned: 16-byte packs (gelu in the GPT MLP).
  if (launch_packed<false, T>(name, y, x, Tensor(), op)) return y;
  launch_elementwise(name, x.device().index, x.shape(), {&y, &x},
                     UnaryFn<T, Op>{static_cast<T*>(y.data_ptr()), static_cast<const T*>(x.data_ptr()), op});
  return y;
}

template <typename Op>
Tensor apply(const Tensor& x, Op op) {
  constexpr std::string_view name = Op::kName;
  constexpr Domain domain = Op::kDomain;
  check_cuda_tensor(x, name, "input");
  COPPICE_CHECK(!(domain == Domain::kAnyButBool && x.dtype() == DType::kBool), name, ": not defined for bool tensors");
  auto run = [&](auto tag) { return launch<typename decltype(tag)::type>(name, x, op); };
  if constexpr (domain == Domain::kFloating) {
    return dispatch_floating(x.dtype(), name, run);
  } else {
    return dispatch_dtype(x.dtype(), run);
  }
}

bool register_all() {
  unary_ops::register_kernels(DeviceType::kCuda, [](const Tensor& x, auto op) { return apply(x, op); });
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cuda
