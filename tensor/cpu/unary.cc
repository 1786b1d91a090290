// The CPU kernels of the unary elementwise ops (tensor/unary_ops.h): x of any
// strides in, a contiguous y of x's shape and dtype out, one kernel per op,
// the table's functor in a loop. Floating types compute in compute_t (f32 for
// bf16/f16); ops of Domain kAny also take integers and bool, kAnyButBool
// integers only.
#include <cmath>

#include "tensor/cpu/loops.h"
#include "tensor/unary_registration.h"

namespace coppice::cpu {
namespace {

using unary_ops::Domain;

// y = op(x) in x's compute type.
template <typename Op>
Tensor apply(const Tensor& x, Op op) {
  constexpr std::string_view name = Op::kName;
  constexpr Domain domain = Op::kDomain;
  COPPICE_CHECK(!(domain == Domain::kAnyButBool && x.dtype() == DType::kBool), name, ": not defined for bool tensors");
  Tensor y = Tensor::empty(x.shape(), x.options());
  auto loop = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    // Transcendental functions cost more an element: smaller parallel chunks.
    constexpr int64_t grain = domain == Domain::kFloating ? kGrain / 4 : kGrain;
    map1<T, T>(y, x, grain, [&](T v) { return T(op(static_cast<C>(v))); });
  };
  if constexpr (domain == Domain::kFloating) {
    dispatch_floating(x.dtype(), name, loop);
  } else {
    dispatch_dtype(x.dtype(), loop);
  }
  return y;
}

bool register_all() {
  unary_ops::register_kernels(DeviceType::kCpu, [](const Tensor& x, auto op) { return apply(x, op); });
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cpu
