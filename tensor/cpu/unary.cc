// The CPU kernels of the unary elementwise ops (tensor/unary_ops.h): x of any
// strides in, a contiguous y of x's shape and dtype out, one kernel per op,
// the table's functor in a loop. Floating types compute in compute_t (f32 for
// bf16/f16); ops of Domain kAny also take integers and bool, kAnyButBool
// integers only.
#include <cmath>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"
#include "tensor/unary_ops.h"

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

Tensor one_input(const std::vector<Tensor>& in, std::string_view name) {
  COPPICE_CHECK(in.size() == 1, name, ": expected 1 input, got ", in.size());
  return in[0];
}

template <typename Op>
void register_op(Op) {
  Dispatcher::instance().register_kernel(Op::kName, DeviceType::kCpu, {"dense"},
                                         [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                           return {apply(one_input(in, Op::kName), Op{})};
                                         });
}

bool register_all() {
  unary_ops::for_each([](auto op) { register_op(op); });
  using unary_ops::Clamp;
  Dispatcher::instance().register_kernel(Clamp::kName, DeviceType::kCpu, {"dense"},
                                         [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                                           const Tensor x = one_input(in, Clamp::kName);
                                           const Clamp op =
                                               Clamp::bounds(attrs.get_double("min", -INFINITY),
                                                             attrs.get_double("max", INFINITY), is_floating(x.dtype()));
                                           return {apply(x, op)};
                                         });
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cpu
