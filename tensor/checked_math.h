// Integer arithmetic that detects overflow, for sizes that come from outside
// (shapes, element and byte counts, offsets, steps x batch, epochs x steps).
//
// The result type R is explicit or, when left out, the common type of the
// operands. Overflow means that the exact, mathematical result does not fit
// R, whatever the operands' types: a negative result does not fit an
// unsigned R (checked_mul<size_t>(int64_t{-1}, 4) overflows), and mixing
// signed and unsigned operands is exact (GCC/Clang __builtin_*_overflow).
//
//   int64_t numel;
//   if (mul_overflows(a, b, &numel)) ...           // test, no throw
//   size_t bytes = checked_mul<size_t>(numel, 4, "empty: shape [..] of f32");
//     // throws coppice::Error "empty: shape [..] of f32: 4611686018427387904 * 4 overflows a 64-bit unsigned integer"
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "tensor/error.h"

namespace coppice {

namespace checked_math_internal {
template <typename R, typename A, typename B>
using Result = std::conditional_t<std::is_void_v<R>, std::common_type_t<A, B>, R>;

template <typename T>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "a bool";
  else if constexpr (std::is_signed_v<T>)
    return sizeof(T) == 8 ? "a 64-bit integer" : "a 32-bit integer";
  else
    return sizeof(T) == 8 ? "a 64-bit unsigned integer" : "a 32-bit unsigned integer";
}

// `what` is text, or a callable that makes it (only when it is needed).
template <typename T, typename What, typename A, typename B>
[[noreturn]] void overflow(const What& what, A a, const char* op, B b) {
  if constexpr (std::is_invocable_v<const What&>) {
    fail(what(), ": ", a, op, b, " overflows ", type_name<T>(), " (max ", std::numeric_limits<T>::max(), ")");
  } else {
    fail(what, ": ", a, op, b, " overflows ", type_name<T>(), " (max ", std::numeric_limits<T>::max(), ")");
  }
}
}  // namespace checked_math_internal

// True when a * b (a + b) does not fit *out; otherwise *out holds it.
template <typename T, typename A, typename B>
[[nodiscard]] constexpr bool mul_overflows(A a, B b, T* out) {
  static_assert(std::is_integral_v<A> && std::is_integral_v<B> && std::is_integral_v<T>, "integers only");
  return __builtin_mul_overflow(a, b, out);
}
template <typename T, typename A, typename B>
[[nodiscard]] constexpr bool add_overflows(A a, B b, T* out) {
  static_assert(std::is_integral_v<A> && std::is_integral_v<B> && std::is_integral_v<T>, "integers only");
  return __builtin_add_overflow(a, b, out);
}
// a * b (a + b) as R; throws coppice::Error naming `what`, the operands and
// the type when it does not fit. `what` is a string, or a callable returning
// one (for text that costs something to build: [&] { return str_cat("shape
// ", ...); }), called only on overflow.
template <typename R = void, typename A, typename B, typename What>
checked_math_internal::Result<R, A, B> checked_mul(A a, B b, const What& what) {
  checked_math_internal::Result<R, A, B> out;
  if (mul_overflows(a, b, &out)) checked_math_internal::overflow<decltype(out)>(what, a, " * ", b);
  return out;
}
template <typename R = void, typename A, typename B, typename What>
checked_math_internal::Result<R, A, B> checked_add(A a, B b, const What& what) {
  checked_math_internal::Result<R, A, B> out;
  if (add_overflows(a, b, &out)) checked_math_internal::overflow<decltype(out)>(what, a, " + ", b);
  return out;
}

// ceil(a / b) for a >= 0 and b > 0, without the overflow of (a + b - 1) / b.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Whether a finite double v converts to T without undefined behaviour
// (its value truncated toward zero lies in T's range).
template <typename T>
constexpr bool fits_in(double v) {
  static_assert(std::is_integral_v<T>, "integers only");
  // max + 1 is a power of two, exact in a double (max itself may not be);
  // NaN fails both comparisons.
  constexpr double upper = static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  constexpr double lower = static_cast<double>(std::numeric_limits<T>::min());
  return v >= lower && v < upper;
}

}  // namespace coppice
