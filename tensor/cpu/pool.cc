// max_pool2d: x [n, c, h, w] -> values [n, c, oh, ow] and i64 indices, the
// flat position y*w + x of each maximum within its h*w plane.
//
// oh = (h + 2*ph - kh) / sh + 1 (and ow alike). Padding counts as -inf: only
// positions inside the image are candidates, so a returned index always
// points into the plane. Padding may be at most half the kernel (as in
// PyTorch), which keeps every window partly inside the image. Ties go to the
// first position in row-major window order; NaN beats any number.
// Floating types only.
#include <cmath>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

std::vector<Tensor> max_pool2d(const Tensor& input, const Attrs& attrs) {
  check_ndim(input, 4, op::kMaxPool2d, "input");
  Tensor x = input.contiguous();
  const auto& k = get_ints_n(attrs, "kernel", 2, op::kMaxPool2d);
  const auto& s = get_ints_n(attrs, "stride", 2, op::kMaxPool2d);
  const auto& p = get_ints_n(attrs, "padding", 2, op::kMaxPool2d);
  const int64_t kh = k[0], kw = k[1], sh = s[0], sw = s[1], ph = p[0], pw = p[1];
  COPPICE_CHECK(kh > 0 && kw > 0 && sh > 0 && sw > 0, "max_pool2d: kernel and stride must be positive (kernel [", kh,
                ", ", kw, "], stride [", sh, ", ", sw, "])");
  COPPICE_CHECK(ph >= 0 && pw >= 0 && 2 * ph <= kh && 2 * pw <= kw, "max_pool2d: padding [", ph, ", ", pw,
                "] must be non-negative and at most half the kernel [", kh, ", ", kw, "]");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  COPPICE_CHECK(h + 2 * ph >= kh && w + 2 * pw >= kw, "max_pool2d: kernel [", kh, ", ", kw,
                "] is larger than the padded input [", h + 2 * ph, ", ", w + 2 * pw, "]");
  COPPICE_CHECK(h > 0 && w > 0, "max_pool2d: empty image planes (input shape ", shape_to_string(x.shape()), ")");
  const int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
  Tensor values = Tensor::empty({n, c, oh, ow}, x.options());
  Tensor indices = Tensor::empty({n, c, oh, ow}, TensorOptions(DType::kI64, x.device()));
  dispatch_floating(x.dtype(), op::kMaxPool2d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    parallel_for(0, n * c, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, oh * ow * kh * kw)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t plane = b; plane < e; ++plane) {
                     const T* src = px + plane * h * w;
                     T* vals = pv + plane * oh * ow;
                     int64_t* idx = pi + plane * oh * ow;
                     for (int64_t oy = 0; oy < oh; ++oy) {
                       const int64_t y0 = std::max<int64_t>(oy * sh - ph, 0);
                       const int64_t y1 = std::min(oy * sh - ph + kh, h);
                       for (int64_t ox = 0; ox < ow; ++ox) {
                         const int64_t x0 = std::max<int64_t>(ox * sw - pw, 0);
                         const int64_t x1 = std::min(ox * sw - pw + kw, w);
                         int64_t at = y0 * w + x0;
                         C best = static_cast<C>(src[at]);
                         for (int64_t y = y0; y < y1 && !std::isnan(best); ++y) {
                           for (int64_t xx = x0; xx < x1; ++xx) {
                             const C v = static_cast<C>(src[y * w + xx]);
                             if (v > best || std::isnan(v)) {
                               best = v;
                               at = y * w + xx;
                               if (std::isnan(v)) break;
                             }
                           }
                         }
                         vals[oy * ow + ox] = src[at];
                         idx[oy * ow + ox] = at;
                       }
                     }
                   }
                 });
  });
  return {values, indices};
}

KernelRegistrar pool_reg(op::kMaxPool2d, DeviceType::kCpu, {"dense"},
                         [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                           COPPICE_CHECK(in.size() == 1, "max_pool2d: expected 1 input, got ", in.size());
                           return max_pool2d(in[0], attrs);
                         });

}  // namespace
}  // namespace coppice::cpu
