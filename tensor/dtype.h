// Element types. bf16 and f16 are stored in 16 bits and computed in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tensor/half.h"

namespace coppice {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8, kBool };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);                     // "f32", "bf16", ...
bool dtype_from_name(std::string_view name, DType* out);  // accepts our names and safetensors' ("F32", "BF16", ...)
std::string_view safetensors_dtype_name(DType t);         // "F32", "BF16", ... (the safetensors spelling)
bool is_floating(DType t);
bool is_integral(DType t);  // i32, i64, u8 (not bool)

// The type arithmetic happens in: f32 for the 16-bit floats, the type itself otherwise.
DType compute_dtype(DType t);

// The common type of two operands, as in NumPy's rules restricted to our types:
// any float beats any integer, the wider float wins, and mixed 16-bit floats
// (bf16 with f16) promote to f32.
DType promote_types(DType a, DType b);

// C++ type for each DType, and back.
template <DType T>
struct CppType;
template <>
struct CppType<DType::kF32> {
  using type = float;
};
template <>
struct CppType<DType::kF64> {
  using type = double;
};
template <>
struct CppType<DType::kBF16> {
  using type = BFloat16;
};
template <>
struct CppType<DType::kF16> {
  using type = Half;
};
template <>
struct CppType<DType::kI32> {
  using type = int32_t;
};
template <>
struct CppType<DType::kI64> {
  using type = int64_t;
};
template <>
struct CppType<DType::kU8> {
  using type = uint8_t;
};
template <>
struct CppType<DType::kBool> {
  using type = bool;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::kF16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kU8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}

}  // namespace coppice

// COPPICE_DISPATCH_DTYPE(dtype, "op", [&](auto tag) { using T = typename decltype(tag)::type; ... })
// calls the lambda with a tag whose ::type is the C++ element type.
namespace coppice {
template <typename T>
struct TypeTag {
  using type = T;
};

template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn(TypeTag<float>{});
    case DType::kF64: return fn(TypeTag<double>{});
    case DType::kBF16: return fn(TypeTag<BFloat16>{});
    case DType::kF16: return fn(TypeTag<Half>{});
    case DType::kI32: return fn(TypeTag<int32_t>{});
    case DType::kI64: return fn(TypeTag<int64_t>{});
    case DType::kU8: return fn(TypeTag<uint8_t>{});
    case DType::kBool: return fn(TypeTag<bool>{});
  }
  return fn(TypeTag<float>{});
}

// Like dispatch_dtype but only for floating types; `op` names the caller in the error.
template <typename Fn>
decltype(auto) dispatch_floating(DType t, std::string_view op, Fn&& fn);
}  // namespace coppice

#include "tensor/dtype_inl.h"
