// fill_ and copy_: the two in-place primitives every other layer leans on.
#include <cstring>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

void fill(const Tensor& out, double value) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T>(value);
    T* base = static_cast<T*>(out.data_ptr());
    for_each_row(out.shape(), {&out}, kGrain, [&](int64_t n, const int64_t* off, const int64_t* st) {
      T* o = base + off[0];
      if (st[0] == 1) {
        std::fill_n(o, n, v);
      } else {
        for (int64_t j = 0; j < n; ++j) o[j * st[0]] = v;
      }
    });
  });
}

// True when the two views read and write exactly the same elements in the same order.
bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage().data() == b.storage().data() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

void copy(const Tensor& dst, Tensor src) {
  COPPICE_CHECK(broadcast_shapes(src.shape(), dst.shape(), op::kCopy) == dst.shape(), "copy_: source of shape ",
                shape_to_string(src.shape()), " does not broadcast to destination ", shape_to_string(dst.shape()));
  if (dst.numel() == 0) return;
  if (src.storage().data() == dst.storage().data()) {
    if (same_view(dst, src)) return;
    // The views may overlap: read the source out first.
    src = src.clone();
  }
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous()) {
    const size_t size = dtype_size(dst.dtype());
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    parallel_for(0, dst.numel(), 4 * kGrain, [&](int64_t b, int64_t e) {
      std::memcpy(d + b * size, s + b * size, static_cast<size_t>(e - b) * size);
    });
    return;
  }
  dispatch_dtype(dst.dtype(), [&](auto dtag) {
    using To = typename decltype(dtag)::type;
    dispatch_dtype(src.dtype(), [&](auto stag) {
      using From = typename decltype(stag)::type;
      map1<To, From>(dst, src, kGrain, [](From v) { return convert<To>(v); });
    });
  });
}

KernelRegistrar fill_reg(op::kFill, DeviceType::kCpu, {"dense"},
                         [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                           COPPICE_CHECK(in.size() == 1, "fill_: expected 1 input, got ", in.size());
                           fill(in[0], attrs.get_double("value"));
                           return {in[0]};
                         });

KernelRegistrar copy_reg(op::kCopy, DeviceType::kCpu, {"dense", "dense"},
                         [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                           COPPICE_CHECK(in.size() == 2, "copy_: expected 2 inputs, got ", in.size());
                           copy(in[0], in[1]);
                           return {in[0]};
                         });

}  // namespace
}  // namespace coppice::cpu
