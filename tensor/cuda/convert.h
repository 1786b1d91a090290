// Element conversions shared by host and device code: the rules copy_ and
// fill_ follow, and the type each element type computes in.
#pragma once

#include <type_traits>

#include "tensor/half.h"

namespace coppice::cuda {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// bf16 and f16 compute in f32; every other type in itself.
template <typename T>
using compute_t = std::conditional_t<kIsHalf<T>, float, T>;

// Converts like static_cast, except: to bool is "!= 0" (NaN is true); the
// 16-bit floats go through f32. Floating to integer truncates toward zero;
// out of range (and NaN) is undefined on the CPU and saturates on the GPU.
template <typename To, typename From>
COPPICE_HOST_DEVICE inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (kIsHalf<To>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace coppice::cuda
