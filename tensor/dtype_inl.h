// Template definitions for dtype.h.
#pragma once

#include "tensor/error.h"

namespace coppice {

template <typename Fn>
decltype(auto) dispatch_floating(DType t, std::string_view op, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn(TypeTag<float>{});
    case DType::kF64: return fn(TypeTag<double>{});
    case DType::kBF16: return fn(TypeTag<BFloat16>{});
    case DType::kF16: return fn(TypeTag<Half>{});
    default: fail(op, ": expected a floating-point tensor, got ", dtype_name(t));
  }
}

}  // namespace coppice
