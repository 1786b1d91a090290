// Registers one device's kernels of the unary table (tensor/unary_ops.h),
// one per op, and clamp's: each kernel is `apply(x, functor)`, the device's
// loop over the table's functor (tensor/cpu/unary.cc, tensor/cuda/unary.cu).
#pragma once

#include <cmath>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/unary_ops.h"

namespace coppice::unary_ops {

inline Tensor one_input(const std::vector<Tensor>& in, std::string_view name) {
  COPPICE_CHECK(in.size() == 1, name, ": expected 1 input, got ", in.size());
  return in[0];
}

// apply: (const Tensor& x, auto functor) -> Tensor.
template <typename Apply>
void register_kernels(DeviceType device, Apply apply) {
  for_each([&](auto op) {
    using Op = decltype(op);
    Dispatcher::instance().register_kernel(Op::kName, device, {"dense"},
                                           [apply](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                             return {apply(one_input(in, Op::kName), Op{})};
                                           });
  });
  Dispatcher::instance().register_kernel(
      Clamp::kName, device, {"dense"},
      [apply](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
        const Tensor x = one_input(in, Clamp::kName);
        return {apply(x, Clamp::bounds(attrs.get_double("min", -INFINITY), attrs.get_double("max", INFINITY),
                                       is_floating(x.dtype())))};
      });
}

}  // namespace coppice::unary_ops
