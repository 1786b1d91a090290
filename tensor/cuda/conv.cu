// im2col, col2im and max_pool2d (kernels.h) on contiguous NCHW tensors.
//
// im2col moves elements only, so it has one kernel per element size. col2im
// is the gather form of the scatter the CPU twin does: one thread per image
// element sums, in (ki, kj) order, every column entry that lands on it, so it
// needs no atomics and is deterministic. max_pool2d keeps the first position
// in the window (row-major) among equal values and propagates NaN (the first
// NaN wins); padding never wins.
#include <cstdint>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

// Geometry of one convolution-like window pass over [n, c, h, w].
struct Window {
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;
};

Window make_window(const Shape& x_shape, const Attrs& attrs, std::string_view op, bool has_dilation) {
  const auto& kernel = get_ints_n(attrs, "kernel", 2, op);
  const auto& stride = get_ints_n(attrs, "stride", 2, op);
  const auto& padding = get_ints_n(attrs, "padding", 2, op);
  std::vector<int64_t> dilation = {1, 1};
  if (has_dilation) dilation = get_ints_n(attrs, "dilation", 2, op);
  Window g{x_shape[0], x_shape[1], x_shape[2], x_shape[3],  kernel[0],   kernel[1], stride[0],
           stride[1],  padding[0], padding[1], dilation[0], dilation[1], 0,         0};
  COPPICE_CHECK(g.kh > 0 && g.kw > 0, op, ": kernel must be positive, got [", g.kh, ", ", g.kw, "]");
  COPPICE_CHECK(g.sh > 0 && g.sw > 0, op, ": stride must be positive, got [", g.sh, ", ", g.sw, "]");
  COPPICE_CHECK(g.ph >= 0 && g.pw >= 0, op, ": padding must be non-negative, got [", g.ph, ", ", g.pw, "]");
  COPPICE_CHECK(g.dh > 0 && g.dw > 0, op, ": dilation must be positive, got [", g.dh, ", ", g.dw, "]");
  const int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;
  COPPICE_CHECK(g.h + 2 * g.ph >= eh && g.w + 2 * g.pw >= ew, op, ": kernel [", g.kh, ", ", g.kw, "] (dilated to [", eh,
                ", ", ew, "]) does not fit the padded input ", shape_to_string(x_shape));
  g.oh = (g.h + 2 * g.ph - eh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

// cols [n, c*kh*kw, oh*ow]: one thread per column entry.
template <typename U>
__global__ void im2col_kernel(const U* x, U* cols, Window g, int64_t total) {
  COPPICE_KERNEL_LOOP(i, total) {
    int64_t t = i;
    const int64_t ox = t % g.ow;
    t /= g.ow;
    const int64_t oy = t % g.oh;
    t /= g.oh;
    const int64_t kj = t % g.kw;
    t /= g.kw;
    const int64_t ki = t % g.kh;
    t /= g.kh;
    const int64_t plane = t;  // n * c + channel
    const int64_t y = oy * g.sh - g.ph + ki * g.dh, xx = ox * g.sw - g.pw + kj * g.dw;
    cols[i] = (y >= 0 && y < g.h && xx >= 0 && xx < g.w) ? x[(plane * g.h + y) * g.w + xx] : U(0);
  }
}

// x [n, c, h, w]: one thread per image element, summing its column entries.
template <typename T>
__global__ void col2im_kernel(const T* cols, T* x, Window g, int64_t total) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(i, total) {
    int64_t t = i;
    const int64_t xx = t % g.w;
    t /= g.w;
    const int64_t y = t % g.h;
    t /= g.h;
    const int64_t plane = t;
    const T* base = cols + plane * g.kh * g.kw * g.oh * g.ow;
    C acc = C(0);
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t ty = y + g.ph - ki * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
      const int64_t oy = ty / g.sh;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t tx = xx + g.pw - kj * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
        const int64_t ox = tx / g.sw;
        acc += static_cast<C>(base[((ki * g.kw + kj) * g.oh + oy) * g.ow + ox]);
      }
    }
    x[i] = T(acc);
  }
}

template <typename T>
__global__ void max_pool_kernel(const T* x, T* values, int64_t* indices, Window g, int64_t total) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(i, total) {
    int64_t t = i;
    const int64_t ox = t % g.ow;
    t /= g.ow;
    const int64_t oy = t % g.oh;
    t /= g.oh;
    const T* plane = x + t * g.h * g.w;
    int64_t best_i = -1;
    C best = C(0);
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t y = oy * g.sh - g.ph + ki * g.dh;
      if (y < 0 || y >= g.h) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t xx = ox * g.sw - g.pw + kj * g.dw;
        if (xx < 0 || xx >= g.w) continue;
        const C v = static_cast<C>(plane[y * g.w + xx]);
        bool take = best_i < 0 || v > best;
        if constexpr (std::is_floating_point_v<C>) take = take || (math::isnan(v) && !math::isnan(best));
        if (take) {
          best = v;
          best_i = y * g.w + xx;
        }
      }
    }
    // A window wholly in the padding cannot happen: padding <= kernel / 2 and h, w > 0 are checked.
    values[i] = best_i >= 0 ? plane[best_i] : T(0);
    indices[i] = best_i;
  }
}

std::vector<Tensor> im2col(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kIm2col);
  check_cuda_tensor(in[0], op::kIm2col, "input");
  check_ndim(in[0], 4, op::kIm2col, "input");
  const Tensor x = in[0].contiguous();
  const Window g = make_window(x.shape(), attrs, op::kIm2col, true);
  Tensor cols = Tensor::empty({g.n, g.c * g.kh * g.kw, g.oh * g.ow}, x.options());
  const int64_t total = cols.numel();
  if (total == 0) return {cols};
  const int device = x.device().index;
  DeviceGuard guard(device);
  by_element_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    im2col_kernel<U><<<grid_for(total), kThreads, 0, current_stream(device)>>>(
        static_cast<const U*>(x.data_ptr()), static_cast<U*>(cols.data_ptr()), g, total);
  });
  check_launch(op::kIm2col);
  return {cols};
}

std::vector<Tensor> col2im(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kCol2im);
  check_cuda_tensor(in[0], op::kCol2im, "cols");
  check_ndim(in[0], 3, op::kCol2im, "cols");
  const Tensor cols = in[0].contiguous();
  const auto& size = get_ints_n(attrs, "size", 2, op::kCol2im);
  const auto& kernel = get_ints_n(attrs, "kernel", 2, op::kCol2im);
  const int64_t kk = kernel[0] * kernel[1];
  COPPICE_CHECK(kk > 0 && cols.size(1) % kk == 0, "col2im: cols dim 1 (", cols.size(1),
                ") is not a multiple of the kernel area ", kk);
  const Shape x_shape = {cols.size(0), cols.size(1) / kk, size[0], size[1]};
  const Window g = make_window(x_shape, attrs, op::kCol2im, true);
  COPPICE_CHECK(cols.size(2) == g.oh * g.ow, "col2im: cols ", shape_to_string(cols.shape()), " has ", cols.size(2),
                " positions, but an image of ", shape_to_string(x_shape), " gives ", g.oh, " x ", g.ow);
  Tensor x = Tensor::empty(x_shape, cols.options());
  const int64_t total = x.numel();
  if (total == 0) return {x};
  const int device = cols.device().index;
  DeviceGuard guard(device);
  dispatch_floating(cols.dtype(), op::kCol2im, [&](auto tag) {
    using T = typename decltype(tag)::type;
    col2im_kernel<T><<<grid_for(total), kThreads, 0, current_stream(device)>>>(static_cast<const T*>(cols.data_ptr()),
                                                                               static_cast<T*>(x.data_ptr()), g, total);
  });
  check_launch(op::kCol2im);
  return {x};
}

std::vector<Tensor> max_pool2d(const std::vector<Tensor>& in, const Attrs& attrs) {
  check_inputs(in, 1, op::kMaxPool2d);
  check_cuda_tensor(in[0], op::kMaxPool2d, "input");
  check_ndim(in[0], 4, op::kMaxPool2d, "input");
  const Tensor x = in[0].contiguous();
  const Window g = make_window(x.shape(), attrs, op::kMaxPool2d, false);
  COPPICE_CHECK(2 * g.ph <= g.kh && 2 * g.pw <= g.kw, "max_pool2d: padding [", g.ph, ", ", g.pw,
                "] must be at most half the kernel [", g.kh, ", ", g.kw, "]");
  COPPICE_CHECK(g.h > 0 && g.w > 0, "max_pool2d: empty image planes (input shape ", shape_to_string(x.shape()), ")");
  Tensor values = Tensor::empty({g.n, g.c, g.oh, g.ow}, x.options());
  Tensor indices = Tensor::empty({g.n, g.c, g.oh, g.ow}, TensorOptions(DType::kI64, x.device()));
  const int64_t total = values.numel();
  if (total == 0) return {values, indices};
  const int device = x.device().index;
  DeviceGuard guard(device);
  dispatch_floating(x.dtype(), op::kMaxPool2d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<T><<<grid_for(total), kThreads, 0, current_stream(device)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(values.data_ptr()), indices.data<int64_t>(), g, total);
  });
  check_launch(op::kMaxPool2d);
  return {values, indices};
}

const KernelRegistrar kIm2col(op::kIm2col, DeviceType::kCuda, {"dense"}, im2col);
const KernelRegistrar kCol2im(op::kCol2im, DeviceType::kCuda, {"dense"}, col2im);
const KernelRegistrar kMaxPool(op::kMaxPool2d, DeviceType::kCuda, {"dense"}, max_pool2d);

}  // namespace
}  // namespace coppice::cuda
