// im2col and col2im: the unfolding behind conv2d and its backward pass.
//
// cols [n, c*kh*kw, oh*ow], row (ci*kh + i)*kw + j, column y*ow + x, holds
// x[n, ci, y*sh - ph + i*dh, x*sw - pw + j*dw], zero where that falls in the
// padding; oh = (h + 2*ph - dh*(kh-1) - 1) / sh + 1 (and ow alike). col2im
// sums every column entry back into its pixel (padding entries are dropped).
// im2col takes any dtype (it only moves values); col2im takes floating types
// and sums in the compute type.
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

struct Geometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t h, w, oh, ow;
};

Geometry geometry(const Attrs& attrs, int64_t h, int64_t w, std::string_view op) {
  const auto& k = get_ints_n(attrs, "kernel", 2, op);
  const auto& s = get_ints_n(attrs, "stride", 2, op);
  const auto& p = get_ints_n(attrs, "padding", 2, op);
  const auto& d = get_ints_n(attrs, "dilation", 2, op);
  Geometry g{k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], h, w, 0, 0};
  COPPICE_CHECK(g.kh > 0 && g.kw > 0 && g.sh > 0 && g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0, op,
                ": kernel, stride and dilation must be positive and padding non-negative (kernel [", g.kh, ", ", g.kw,
                "], stride [", g.sh, ", ", g.sw, "], padding [", g.ph, ", ", g.pw, "], dilation [", g.dh, ", ", g.dw,
                "])");
  const int64_t span_h = h + 2 * g.ph - g.dh * (g.kh - 1) - 1, span_w = w + 2 * g.pw - g.dw * (g.kw - 1) - 1;
  COPPICE_CHECK(span_h >= 0 && span_w >= 0, op, ": the dilated kernel [", g.dh * (g.kh - 1) + 1, ", ",
                g.dw * (g.kw - 1) + 1, "] is larger than the padded input [", h + 2 * g.ph, ", ", w + 2 * g.pw, "]");
  g.oh = span_h / g.sh + 1;
  g.ow = span_w / g.sw + 1;
  return g;
}

Tensor im2col(const Tensor& input, const Attrs& attrs) {
  check_ndim(input, 4, op::kIm2col, "input");
  Tensor x = input.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  const Geometry g = geometry(attrs, x.size(2), x.size(3), op::kIm2col);
  const int64_t kk = g.kh * g.kw, cols_per_row = g.oh * g.ow;
  Tensor cols = Tensor::empty({n, c * kk, cols_per_row}, x.options());
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* pc = cols.data<T>();
    const T zero = convert<T>(0.0);
    // One task per (image, channel) plane: it fills kh*kw rows of cols.
    parallel_for(0, n * c, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, kk * cols_per_row)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t plane = b; plane < e; ++plane) {
                     const T* src = px + plane * g.h * g.w;
                     T* dst = pc + plane * kk * cols_per_row;
                     for (int64_t i = 0; i < g.kh; ++i) {
                       for (int64_t j = 0; j < g.kw; ++j) {
                         T* row = dst + (i * g.kw + j) * cols_per_row;
                         for (int64_t oy = 0; oy < g.oh; ++oy) {
                           const int64_t y = oy * g.sh - g.ph + i * g.dh;
                           T* out = row + oy * g.ow;
                           if (y < 0 || y >= g.h) {
                             std::fill_n(out, g.ow, zero);
                             continue;
                           }
                           const T* line = src + y * g.w;
                           for (int64_t ox = 0; ox < g.ow; ++ox) {
                             const int64_t xx = ox * g.sw - g.pw + j * g.dw;
                             out[ox] = (xx < 0 || xx >= g.w) ? zero : line[xx];
                           }
                         }
                       }
                     }
                   }
                 });
  });
  return cols;
}

Tensor col2im(const Tensor& input, const Attrs& attrs) {
  check_ndim(input, 3, op::kCol2im, "cols");
  Tensor cols = input.contiguous();
  const auto& size = get_ints_n(attrs, "size", 2, op::kCol2im);
  COPPICE_CHECK(size[0] >= 0 && size[1] >= 0, "col2im: negative image size [", size[0], ", ", size[1], "]");
  const Geometry g = geometry(attrs, size[0], size[1], op::kCol2im);
  const int64_t kk = g.kh * g.kw, cols_per_row = g.oh * g.ow;
  const int64_t n = cols.size(0);
  COPPICE_CHECK(cols.size(1) % kk == 0 && cols.size(2) == cols_per_row, "col2im: cols of shape ",
                shape_to_string(cols.shape()), " do not match kernel [", g.kh, ", ", g.kw, "] and output [", g.oh, ", ",
                g.ow, "] for image size [", g.h, ", ", g.w, "]");
  const int64_t c = cols.size(1) / kk;
  Tensor x = Tensor::empty({n, c, g.h, g.w}, cols.options());
  dispatch_floating(cols.dtype(), op::kCol2im, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pc = cols.data<T>();
    T* px = x.data<T>();
    // Each (image, channel) plane gathers only from its own kh*kw rows, so
    // planes run in parallel without races, and in a fixed order within.
    parallel_for(0, n * c, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, kk * cols_per_row)),
                 [&](int64_t b, int64_t e) {
                   std::vector<C> acc(static_cast<size_t>(g.h * g.w));
                   for (int64_t plane = b; plane < e; ++plane) {
                     std::fill(acc.begin(), acc.end(), C(0));
                     const T* src = pc + plane * kk * cols_per_row;
                     for (int64_t i = 0; i < g.kh; ++i) {
                       for (int64_t j = 0; j < g.kw; ++j) {
                         const T* row = src + (i * g.kw + j) * cols_per_row;
                         for (int64_t oy = 0; oy < g.oh; ++oy) {
                           const int64_t y = oy * g.sh - g.ph + i * g.dh;
                           if (y < 0 || y >= g.h) continue;
                           C* line = acc.data() + y * g.w;
                           const T* in = row + oy * g.ow;
                           for (int64_t ox = 0; ox < g.ow; ++ox) {
                             const int64_t xx = ox * g.sw - g.pw + j * g.dw;
                             if (xx >= 0 && xx < g.w) line[xx] += static_cast<C>(in[ox]);
                           }
                         }
                       }
                     }
                     T* dst = px + plane * g.h * g.w;
                     for (int64_t p = 0; p < g.h * g.w; ++p) dst[p] = T(acc[p]);
                   }
                 });
  });
  return x;
}

KernelRegistrar im2col_reg(op::kIm2col, DeviceType::kCpu, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                             COPPICE_CHECK(in.size() == 1, "im2col: expected 1 input, got ", in.size());
                             return {im2col(in[0], attrs)};
                           });
KernelRegistrar col2im_reg(op::kCol2im, DeviceType::kCpu, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                             COPPICE_CHECK(in.size() == 1, "col2im: expected 1 input, got ", in.size());
                             return {col2im(in[0], attrs)};
                           });

}  // namespace
}  // namespace coppice::cpu
