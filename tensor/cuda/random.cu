// uniform_, normal_ and randint_ (kernels.h), twins of tensor/cpu/random.cc:
// element i (row-major) takes the Philox word(s) keyed by (seed, offset, i),
// so the GPU produces the CPU's numbers: uniform and randint bit for bit,
// normal to the last bit of the f64 sin/cos/log (CUDA's are within an ulp of
// glibc's). The arithmetic follows the CPU exactly: f64, product and sum
// rounded separately (__dmul_rn/__dadd_rn, never fused), then one rounding to
// the output type (through f32 for bf16/f16); a uniform value that rounds up
// to `high` becomes `low`. A non-contiguous output is filled through a
// contiguous buffer.
#include <cstdint>
#include <limits>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/op_table.h"
#include "tensor/philox.h"

namespace coppice::cuda {
namespace {

// Rounds an f64 value to T as every device does: through f32 for the 16-bit floats.
template <typename T>
__device__ __host__ inline T round_to(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return T(static_cast<float>(v));
  }
}

template <typename T>
__global__ void uniform_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double low, double high, T t_low,
                               T t_high) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(i, n) {
    const uint32_t w = philox::word(seed, offset, static_cast<uint64_t>(i));
    const double u = std::is_same_v<T, double> ? philox::uniform_f64(w) : static_cast<double>(philox::uniform_f32(w));
    T v = round_to<T>(__dadd_rn(__dmul_rn(high - low, u), low));
    if (static_cast<C>(v) == static_cast<C>(t_high) && low < high) v = t_low;
    out[i] = v;
  }
}

template <typename T>
__global__ void normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double stddev) {
  COPPICE_KERNEL_LOOP(i, n) {
    out[i] = round_to<T>(__dadd_rn(__dmul_rn(philox::normal(seed, offset, static_cast<uint64_t>(i)), stddev), mean));
  }
}

template <typename T>
__global__ void randint_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low, uint64_t range) {
  COPPICE_KERNEL_LOOP(i, n) {
    const uint64_t w = philox::word(seed, offset, static_cast<uint64_t>(i));
    out[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + w % range));
  }
}

// Runs fill(contiguous tensor) on `out`, or on a buffer then copied into it.
template <typename Fill>
void fill_contiguous(const Tensor& out, const Fill& fill) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  if (out.is_contiguous()) {
    fill(out);
    return;
  }
  Tensor buf = Tensor::empty(out.shape(), out.options());
  fill(buf);
  dispatch(op::kCopy, {out, buf});
}

uint64_t u64_attr(const Attrs& attrs, std::string_view name) { return static_cast<uint64_t>(attrs.get_int(name)); }

std::vector<Tensor> uniform(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kUniform);
  check_cuda_tensor(in[0], op::kUniform, "output");
  const uint64_t seed = u64_attr(attrs, "seed"), offset = u64_attr(attrs, "offset");
  const double low = attrs.get_double("low"), high = attrs.get_double("high");
  COPPICE_CHECK(low <= high, "uniform_: low (", low, ") must not exceed high (", high, ")");
  fill_contiguous(in[0], [&](const Tensor& out) {
    dispatch_floating(out.dtype(), op::kUniform, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int device = out.device().index;
      uniform_kernel<T><<<grid_for(out.numel()), kThreads, 0, current_stream(device)>>>(
          static_cast<T*>(out.data_ptr()), out.numel(), seed, offset, low, high, round_to<T>(low), round_to<T>(high));
    });
    check_launch(op::kUniform);
  });
  return {in[0]};
}

std::vector<Tensor> normal(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kNormal);
  check_cuda_tensor(in[0], op::kNormal, "output");
  const uint64_t seed = u64_attr(attrs, "seed"), offset = u64_attr(attrs, "offset");
  const double mean = attrs.get_double("mean"), stddev = attrs.get_double("std");
  COPPICE_CHECK(stddev >= 0, "normal_: std must be non-negative, got ", stddev);
  fill_contiguous(in[0], [&](const Tensor& out) {
    dispatch_floating(out.dtype(), op::kNormal, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int device = out.device().index;
      normal_kernel<T><<<grid_for(out.numel()), kThreads, 0, current_stream(device)>>>(
          static_cast<T*>(out.data_ptr()), out.numel(), seed, offset, mean, stddev);
    });
    check_launch(op::kNormal);
  });
  return {in[0]};
}

std::vector<Tensor> randint(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kRandint);
  const Tensor& target = in[0];
  check_cuda_tensor(target, op::kRandint, "output");
  const uint64_t seed = u64_attr(attrs, "seed"), offset = u64_attr(attrs, "offset");
  const int64_t low = attrs.get_int("low"), high = attrs.get_int("high");
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
        const int device = out.device().index;
        randint_kernel<T><<<grid_for(out.numel()), kThreads, 0, current_stream(device)>>>(
            static_cast<T*>(out.data_ptr()), out.numel(), seed, offset, low, range);
        check_launch(op::kRandint);
      }
    });
  });
  return {target};
}

const KernelRegistrar kUniform(op::kUniform, DeviceType::kCuda, {"dense"}, uniform);
const KernelRegistrar kNormal(op::kNormal, DeviceType::kCuda, {"dense"}, normal);
const KernelRegistrar kRandint(op::kRandint, DeviceType::kCuda, {"dense"}, randint);

}  // namespace
}  // namespace coppice::cuda
