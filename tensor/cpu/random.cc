// uniform_, normal_, randint_: Philox draws (tensor/philox.h), element i of
// the row-major order keyed by (seed, offset, i), so every device and every
// thread split gives the same numbers.
//
// Interpretations of kernels.h, for the CUDA twin to match bit for bit:
// - seed and offset are i64 attributes holding the generator's u64 words
//   (reinterpreted, not range-checked).
// - uniform_: u = uniform_f32(word(seed, offset, i)) for f32/bf16/f16 and
//   uniform_f64(word(...)) for f64; the value is low + (high - low) * u
//   evaluated in f64 with the product and the sum rounded separately (no
//   FMA), then rounded once to the output type (f64 -> f32 -> 16-bit for
//   bf16/f16, i.e. through f32). When that rounding lands on `high` itself
//   (possible in f32, frequent in bf16), the element is `low` instead (as
//   PyTorch's CUDA uniform_), so values always lie in [low, high).
// - normal_: philox::normal(seed, offset, i) * std + mean in f64 (no FMA),
//   rounded to the output type as above.
// - randint_: low + (word % (high - low)) with word a u32 and the range a
//   u64, for integer outputs (i32, i64, u8); needs low < high, both within the
//   output type's range.
// A non-contiguous output is filled through a contiguous buffer, with i its
// row-major position.
#include <cstdint>
#include <limits>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"
#include "tensor/philox.h"

namespace coppice::cpu {
namespace {

constexpr int64_t kRandomGrain = 4096;

// Runs fill(contiguous) on `out`, or on a buffer then copied into it.
template <typename Fill>
void fill_contiguous(const Tensor& out, const Fill& fill) {
  if (out.is_contiguous()) {
    fill(out);
    return;
  }
  Tensor buf = Tensor::empty(out.shape(), out.options());
  fill(buf);
  dispatch(op::kCopy, {out, buf});
}

// Prevents the compiler from fusing a * b + c (the CUDA twin uses __dmul_rn / __dadd_rn).
inline double mul_add_unfused(double a, double b, double c) {
  volatile double p = a * b;
  return p + c;
}

// Rounds an f64 value to T the way every device does: through f32 for the 16-bit floats.
template <typename T>
T round_to(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return T(static_cast<float>(v));
  }
}

void uniform(const Tensor& target, uint64_t seed, uint64_t offset, double low, double high) {
  COPPICE_CHECK(low <= high, "uniform_: low (", low, ") must not exceed high (", high, ")");
  fill_contiguous(target, [&](const Tensor& out) {
    dispatch_floating(out.dtype(), op::kUniform, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      const T t_low = round_to<T>(low), t_high = round_to<T>(high);
      parallel_for(0, out.numel(), kRandomGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const uint32_t w = philox::word(seed, offset, static_cast<uint64_t>(i));
          const double u =
              std::is_same_v<T, double> ? philox::uniform_f64(w) : static_cast<double>(philox::uniform_f32(w));
          T v = round_to<T>(mul_add_unfused(high - low, u, low));
          if (static_cast<compute_t<T>>(v) == static_cast<compute_t<T>>(t_high) && low < high) v = t_low;
          p[i] = v;
        }
      });
    });
  });
}

void normal(const Tensor& target, uint64_t seed, uint64_t offset, double mean, double stddev) {
  COPPICE_CHECK(stddev >= 0, "normal_: std must be non-negative, got ", stddev);
  fill_contiguous(target, [&](const Tensor& out) {
    dispatch_floating(out.dtype(), op::kNormal, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      parallel_for(0, out.numel(), kRandomGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          p[i] = round_to<T>(mul_add_unfused(philox::normal(seed, offset, static_cast<uint64_t>(i)), stddev, mean));
        }
      });
    });
  });
}

void randint(const Tensor& target, uint64_t seed, uint64_t offset, int64_t low, int64_t high) {
  COPPICE_CHECK(is_integral(target.dtype()), "randint_: expected an integer tensor (i32, i64, u8), got ",
                dtype_name(target.dtype()));
  COPPICE_CHECK(low < high, "randint_: low (", low, ") must be less than high (", high, ")");
  fill_contiguous(target, [&](const Tensor& out) {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        COPPICE_CHECK(low >= static_cast<int64_t>(std::numeric_limits<T>::lowest()) &&
                          high - 1 <= static_cast<int64_t>(std::numeric_limits<T>::max()),
                      "randint_: [", low, ", ", high, ") does not fit in ", dtype_name(out.dtype()));
        const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
        T* p = out.data<T>();
        parallel_for(0, out.numel(), kRandomGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const uint64_t w = philox::word(seed, offset, static_cast<uint64_t>(i));
            p[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + w % range));
          }
        });
      }
    });
  });
}

uint64_t u64_attr(const Attrs& attrs, std::string_view name) { return static_cast<uint64_t>(attrs.get_int(name)); }

KernelRegistrar uniform_reg(op::kUniform, DeviceType::kCpu, {"dense"},
                            [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
                              COPPICE_CHECK(in.size() == 1, "uniform_: expected 1 input, got ", in.size());
                              uniform(in[0], u64_attr(a, "seed"), u64_attr(a, "offset"), a.get_double("low"),
                                      a.get_double("high"));
                              return {in[0]};
                            });
KernelRegistrar normal_reg(op::kNormal, DeviceType::kCpu, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
                             COPPICE_CHECK(in.size() == 1, "normal_: expected 1 input, got ", in.size());
                             normal(in[0], u64_attr(a, "seed"), u64_attr(a, "offset"), a.get_double("mean"),
                                    a.get_double("std"));
                             return {in[0]};
                           });
KernelRegistrar randint_reg(op::kRandint, DeviceType::kCpu, {"dense"},
                            [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
                              COPPICE_CHECK(in.size() == 1, "randint_: expected 1 input, got ", in.size());
                              randint(in[0], u64_attr(a, "seed"), u64_attr(a, "offset"), a.get_int("low"),
                                      a.get_int("high"));
                              return {in[0]};
                            });

}  // namespace
}  // namespace coppice::cpu
