// Factories: new tensors filled with constants, ranges and random numbers.
//
// Everything goes through the fill_/copy_/uniform_/normal_/randint_ primitives,
// so a factory works on any device that registers them. Random factories take
// one draw from the generator (gen.advance()) whatever their size, so the same
// generator state gives the same numbers on every device.
#include <cmath>
#include <limits>

#include "tensor/checked_math.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// arange's element count is computed in doubles: past 2^53 it is no longer exact.
constexpr int64_t kMaxArangeElements = int64_t{1} << 53;

void check_shape(const Shape& shape, std::string_view op) {
  for (int64_t s : shape) { COPPICE_CHECK(s >= 0, op, ": negative size in shape ", shape_to_string(shape)); }
}

// The range of values a dtype holds exactly as an integer (for randint's bounds).
bool integer_range(DType t, double* lo, double* hi) {
  switch (t) {
    case DType::kU8:
      *lo = 0;
      *hi = 255;
      return true;
    case DType::kI32:
      *lo = std::numeric_limits<int32_t>::min();
      *hi = std::numeric_limits<int32_t>::max();
      return true;
    case DType::kI64:
      *lo = -9223372036854775808.0;
      *hi = 9223372036854775807.0;
      return true;
    default: return false;
  }
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  check_shape(shape, "empty");
  return Tensor::empty(shape, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  check_shape(shape, "zeros");
  Tensor out = Tensor::empty(shape, options);
  out.fill_(0.0);
  return out;
}

Tensor ones(const Shape& shape, TensorOptions options) {
  check_shape(shape, "ones");
  Tensor out = Tensor::empty(shape, options);
  out.fill_(1.0);
  return out;
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  check_shape(shape, "full");
  if (!is_floating(options.dtype)) {
    COPPICE_CHECK(std::isfinite(value), "full: value ", value, " cannot be stored in ", dtype_name(options.dtype));
    double lo = 0, hi = 0;
    if (integer_range(options.dtype, &lo, &hi)) {
      COPPICE_CHECK(std::trunc(value) >= lo && std::trunc(value) <= hi && fits_in<int64_t>(value), "full: value ",
                    value, " does not fit in ", dtype_name(options.dtype));
    }
  }
  Tensor out = Tensor::empty(shape, options);
  out.fill_(value);
  return out;
}

Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.options()); }

Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  COPPICE_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start, ", end ",
                end, " and step ", step, " must be finite");
  COPPICE_CHECK(step != 0.0, "arange: step must be non-zero");
  COPPICE_CHECK(options.dtype != DType::kBool, "arange: bool is not a valid dtype for a range");
  const double span = std::ceil((end - start) / step);  // may be inf for a tiny step
  COPPICE_CHECK(!(span > static_cast<double>(kMaxArangeElements)), "arange: [", start, ", ", end, ") in steps of ",
                step, " has ", span, " elements, more than ", kMaxArangeElements);
  const int64_t n = span > 0 ? static_cast<int64_t>(span) : 0;
  double lo = 0, hi = 0;
  if (n > 0 && integer_range(options.dtype, &lo, &hi)) {
    const double last = start + static_cast<double>(n - 1) * step;
    // hi of i64 rounds up to 2^63 in a double: fits_in excludes it.
    COPPICE_CHECK(
        std::min(start, last) >= lo && std::max(start, last) <= hi && fits_in<int64_t>(start) && fits_in<int64_t>(last),
        "arange: [", start, ", ", end, ") in steps of ", step, " does not fit in ", dtype_name(options.dtype));
  }
  Tensor host = Tensor::empty({n}, TensorOptions(options.dtype, Device::cpu()));
  // Integer ranges with integer bounds are computed in integers, so that
  // large i64 values are exact.
  bool exact_int = is_integral(options.dtype) && start == std::trunc(start) && step == std::trunc(step) &&
                   fits_in<int64_t>(start) && fits_in<int64_t>(step);
  dispatch_dtype(options.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(host.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_integral_v<T>) {
        if (exact_int) {
          // In uint64, which wraps instead of overflowing: i * step may pass
          // 2^63 while start + i * step, the exact result, fits.
          const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(start)) +
                             static_cast<uint64_t>(i) * static_cast<uint64_t>(static_cast<int64_t>(step));
          p[i] = static_cast<T>(static_cast<int64_t>(v));
          continue;
        }
      }
      double v = start + static_cast<double>(i) * step;
      if constexpr (std::is_same_v<T, double> || std::is_integral_v<T>) {
        p[i] = static_cast<T>(v);
      } else {
        p[i] = T(static_cast<float>(v));
      }
    }
  });
  return host.to(options.device);
}

Tensor arange(int64_t end, TensorOptions options) { return arange(0.0, static_cast<double>(end), 1.0, options); }

Tensor rand(const Shape& shape, TensorOptions options, Generator& gen) {
  check_shape(shape, "rand");
  COPPICE_CHECK(is_floating(options.dtype), "rand: dtype must be floating-point, got ", dtype_name(options.dtype));
  Tensor out = Tensor::empty(shape, options);
  Attrs attrs;
  attrs.set("seed", static_cast<int64_t>(gen.seed()))
      .set("offset", static_cast<int64_t>(gen.advance()))
      .set("low", 0.0)
      .set("high", 1.0);
  dispatch(op::kUniform, {out}, attrs);
  return out;
}

Tensor randn(const Shape& shape, TensorOptions options, Generator& gen) {
  check_shape(shape, "randn");
  COPPICE_CHECK(is_floating(options.dtype), "randn: dtype must be floating-point, got ", dtype_name(options.dtype));
  Tensor out = Tensor::empty(shape, options);
  Attrs attrs;
  attrs.set("seed", static_cast<int64_t>(gen.seed()))
      .set("offset", static_cast<int64_t>(gen.advance()))
      .set("mean", 0.0)
      .set("std", 1.0);
  dispatch(op::kNormal, {out}, attrs);
  return out;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator& gen) {
  check_shape(shape, "randint");
  double lo = 0, hi = 0;
  COPPICE_CHECK(integer_range(options.dtype, &lo, &hi), "randint: dtype must be an integer type (u8, i32, i64), got ",
                dtype_name(options.dtype));
  COPPICE_CHECK(low < high, "randint: low (", low, ") must be less than high (", high, ")");
  COPPICE_CHECK(static_cast<double>(low) >= lo && static_cast<double>(high) - 1 <= hi, "randint: [", low, ", ", high,
                ") does not fit in ", dtype_name(options.dtype));
  // The kernel draws one 32-bit word per element.
  COPPICE_CHECK(static_cast<uint64_t>(high) - static_cast<uint64_t>(low) <= (uint64_t{1} << 32), "randint: range [",
                low, ", ", high, ") is wider than 2^32");
  Tensor out = Tensor::empty(shape, options);
  Attrs attrs;
  attrs.set("seed", static_cast<int64_t>(gen.seed()))
      .set("offset", static_cast<int64_t>(gen.advance()))
      .set("low", low)
      .set("high", high);
  dispatch(op::kRandint, {out}, attrs);
  return out;
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions options, Generator& gen) {
  check_shape(shape, "bernoulli");
  COPPICE_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: probability p must be in [0, 1], got ", p);
  // Always draw f32 uniforms, so a mask from one generator state is the same
  // whatever dtype it is asked for in.
  Tensor u = rand(shape, TensorOptions(DType::kF32, options.device), gen);
  return lt(u, p).to(options.dtype);
}

}  // namespace coppice
