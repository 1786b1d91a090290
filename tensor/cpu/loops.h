// Shared pieces of the CPU kernels: element-type traits, conversions, and the
// strided row loop that elementwise kernels run on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/parallel.h"
#include "tensor/dispatcher.h"
#include "tensor/dtype.h"
#include "tensor/scalar_math.h"
#include "tensor/strided_indexer.h"
#include "tensor/tensor.h"

namespace coppice::cpu {

// Elements per parallel chunk for cheap elementwise work.
constexpr int64_t kGrain = 32768;

template <typename T>
constexpr bool is_half_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;
template <typename T>
constexpr bool is_float_v = is_half_v<T> || std::is_floating_point_v<T>;

// The type arithmetic happens in: f32 for the 16-bit floats, the type itself otherwise.
template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<BFloat16> {
  using type = float;
};
template <>
struct Compute<Half> {
  using type = float;
};
template <typename T>
using compute_t = typename Compute<T>::type;

// Converts one element as copy_ does: unchanged to its own type; else through the source's compute type; to
// bool as "!= 0"; to the 16-bit floats through f32 (so f64 -> bf16 rounds
// twice); floating to integer truncates toward zero.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;  // bit for bit (keeps NaN payloads)
  using C = compute_t<From>;
  C c = static_cast<C>(v);
  if constexpr (std::is_same_v<To, bool>) {
    return c != C(0);
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(c));
  } else {
    return static_cast<To>(c);
  }
}

// Clamps a whole number held in a double into T's range.
using scalar_math::saturate;

// Walks `shape` in row-major order over dense operands that broadcast to it
// (the output first), in parallel chunks, calling row(n, offsets, strides):
// n consecutive elements, operand k's j-th at offsets[k] + j * strides[k]
// elements from its data_ptr(). When every operand is contiguous and of the
// output's shape, each chunk is one row with unit strides.
template <typename RowFn>
void for_each_row(const Shape& shape, const std::vector<const Tensor*>& operands, int64_t grain, const RowFn& row) {
  const int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  const int nops = static_cast<int>(operands.size());
  bool flat = true;
  for (const Tensor* t : operands) flat = flat && t->shape() == shape && t->is_contiguous();
  if (flat) {
    parallel_for(0, numel, grain, [&](int64_t b, int64_t e) {
      int64_t offs[kMaxIndexerOperands], strides[kMaxIndexerOperands];
      for (int k = 0; k < nops; ++k) {
        offs[k] = b;
        strides[k] = 1;
      }
      row(e - b, offs, strides);
    });
    return;
  }
  const StridedIndexer ix = make_indexer(shape, operands);
  const int64_t inner = ix.sizes[ix.ndim - 1];
  int64_t strides[kMaxIndexerOperands];
  for (int k = 0; k < nops; ++k) strides[k] = ix.strides[k][ix.ndim - 1];
  parallel_for(0, numel, grain, [&](int64_t b, int64_t e) {
    int64_t offs[kMaxIndexerOperands];
    for (int64_t i = b; i < e;) {
      ix.offsets(i, offs);
      int64_t n = std::min(inner - i % inner, e - i);
      row(n, offs, strides);
      i += n;
    }
  });
}

// out[i] = f(x[i]) over broadcast operands; Out and In are element types.
template <typename Out, typename In, typename F>
void map1(const Tensor& out, const Tensor& x, int64_t grain, const F& f) {
  Out* po = static_cast<Out*>(out.data_ptr());
  const In* px = static_cast<const In*>(x.data_ptr());
  for_each_row(out.shape(), {&out, &x}, grain, [&](int64_t n, const int64_t* off, const int64_t* st) {
    Out* o = po + off[0];
    const In* a = px + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = f(a[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = f(a[j * st[1]]);
    }
  });
}

// out[i] = f(a[i], b[i]) over broadcast operands.
template <typename Out, typename In, typename F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, int64_t grain, const F& f) {
  Out* po = static_cast<Out*>(out.data_ptr());
  const In* pa = static_cast<const In*>(a.data_ptr());
  const In* pb = static_cast<const In*>(b.data_ptr());
  for_each_row(out.shape(), {&out, &a, &b}, grain, [&](int64_t n, const int64_t* off, const int64_t* st) {
    Out* o = po + off[0];
    const In* x = pa + off[1];
    const In* y = pb + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = f(x[j], y[j]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const In yv = *y;
      for (int64_t j = 0; j < n; ++j) o[j] = f(x[j], yv);
    } else {
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = f(x[j * st[1]], y[j * st[2]]);
    }
  });
}

// Throws naming `op` unless `t` has dtype `want`.
inline void check_dtype(const Tensor& t, DType want, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.dtype() == want, op, ": ", what, " must be ", dtype_name(want), ", got ", dtype_name(t.dtype()));
}

// Throws naming `op` unless `t` has `ndim` dimensions.
inline void check_ndim(const Tensor& t, int64_t ndim, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.dim() == ndim, op, ": ", what, " must be ", ndim, "-D, got shape ", shape_to_string(t.shape()));
}

// A list attribute of exactly `n` entries.
inline const std::vector<int64_t>& get_ints_n(const Attrs& attrs, std::string_view name, size_t n,
                                              std::string_view op) {
  const std::vector<int64_t>& v = attrs.get_ints(name);
  COPPICE_CHECK(v.size() == n, op, ": attribute '", name, "' needs ", n, " values, got ", v.size());
  return v;
}

}  // namespace coppice::cpu
