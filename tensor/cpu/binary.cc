// The CPU kernels of the binary elementwise ops (tensor/binary_ops.h): a and
// b of one dtype and any strides broadcast; the output is contiguous, of a's
// dtype (bool for comparisons). One kernel per op, the table's functor in a
// loop; floating types compute in compute_t (f32 for bf16/f16).
#include "tensor/binary_ops.h"
#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

using binary_ops::Compare;
using binary_ops::Domain;

template <typename Op>
Tensor apply(const Tensor& a, const Tensor& b) {
  constexpr std::string_view name = Op::kName;
  constexpr bool kComparison = Op::kCompare != Compare::kNone;
  COPPICE_CHECK(a.dtype() == b.dtype(), name, ": operands must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  COPPICE_CHECK(!(Op::kDomain == Domain::kAnyButBool && a.dtype() == DType::kBool), name,
                ": not defined for bool tensors");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, TensorOptions(kComparison ? DType::kBool : a.dtype(), a.device()));
  auto loop = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Op f{};
    if constexpr (kComparison) {
      map2<bool, T>(out, a, b, kGrain, [&](T x, T y) { return f(static_cast<C>(x), static_cast<C>(y)); });
    } else {
      map2<T, T>(out, a, b, kGrain, [&](T x, T y) { return T(f(static_cast<C>(x), static_cast<C>(y))); });
    }
  };
  if constexpr (Op::kDomain == Domain::kFloating) {
    dispatch_floating(a.dtype(), name, loop);
  } else {
    dispatch_dtype(a.dtype(), loop);
  }
  return out;
}

bool register_all() {
  binary_ops::for_each([](auto op) {
    using Op = decltype(op);
    Dispatcher::instance().register_kernel(Op::kName, DeviceType::kCpu, {"dense", "dense"},
                                           [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                             COPPICE_CHECK(in.size() == 2, Op::kName, ": expected 2 inputs, got ",
                                                           in.size());
                                             return {apply<Op>(in[0], in[1])};
                                           });
  });
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cpu
