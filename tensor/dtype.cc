#include "tensor/dtype.h"

namespace coppice {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  for (DType t :
       {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    if (name == dtype_name(t) || name == safetensors_dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

bool is_floating(DType t) { return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kF16; }

bool is_integral(DType t) { return t == DType::kI32 || t == DType::kI64 || t == DType::kU8; }

DType compute_dtype(DType t) { return (t == DType::kBF16 || t == DType::kF16) ? DType::kF32 : t; }

namespace {
int float_rank(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kF16: return 1;
    case DType::kF32: return 2;
    case DType::kF64: return 3;
    default: return 0;
  }
}
int int_rank(DType t) {
  switch (t) {
    case DType::kBool: return 0;
    case DType::kU8: return 1;
    case DType::kI32: return 2;
    case DType::kI64: return 3;
    default: return -1;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    if (float_rank(a) == 1 && float_rank(b) == 1) return DType::kF32;
    return float_rank(a) > float_rank(b) ? a : b;
  }
  return int_rank(a) > int_rank(b) ? a : b;
}

}  // namespace coppice
