// where(cond, a, b): a where cond is true, else b; all three broadcast; the
// output is contiguous, of a's dtype. Any dtype.
#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_dtype(cond, DType::kBool, op::kWhere, "cond");
  COPPICE_CHECK(a.dtype() == b.dtype(), "where: a and b must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), op::kWhere), op::kWhere);
  Tensor out = Tensor::empty(shape, a.options());
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* po = out.data<T>();
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    for_each_row(shape, {&out, &cond, &a, &b}, kGrain, [&](int64_t n, const int64_t* off, const int64_t* st) {
      T* o = po + off[0];
      const bool* c = pc + off[1];
      const T* x = pa + off[2];
      const T* y = pb + off[3];
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = c[j * st[1]] ? x[j * st[2]] : y[j * st[3]];
    });
  });
  return out;
}

KernelRegistrar where_reg(op::kWhere, DeviceType::kCpu, {"dense", "dense", "dense"},
                          [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                            COPPICE_CHECK(in.size() == 3, "where: expected 3 inputs, got ", in.size());
                            return {where(in[0], in[1], in[2])};
                          });

}  // namespace
}  // namespace coppice::cpu
