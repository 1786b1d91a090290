// The comparisons of tensor/binary_ops.h (eq ne lt le gt ge) and where,
// twins of tensor/cpu/binary.cc and tensor/cpu/where.cc. Comparisons take
// any dtype, compare in compute_t and give bool. The six comparisons share
// one kernel per dtype that switches on the op at run time (uniform across
// the grid, so it costs little and keeps the build small).
#include "tensor/binary_ops.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

using binary_ops::Compare;

template <typename T>
struct CompareFn {
  bool* out;
  const T* a;
  const T* b;
  Compare cmp;
  __device__ void operator()(const int64_t* off) const {
    using C = compute_t<T>;
    out[off[0]] = binary_ops::compare(cmp, static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]]));
  }
};

Tensor compare(std::string_view op, Compare cmp, const Tensor& a, const Tensor& b) {
  check_cuda_tensor(a, op, "a");
  check_cuda_tensor(b, op, "b");
  COPPICE_CHECK(a.dtype() == b.dtype(), op, ": operands must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, TensorOptions(DType::kBool, a.device()));
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(
        op, a.device().index, shape, {&out, &a, &b},
        CompareFn<T>{out.data<bool>(), static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), cmp});
  });
  return out;
}

template <typename T>
struct WhereFn {
  T* out;
  const bool* cond;
  const T* a;
  const T* b;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]]; }
};

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_cuda_tensor(cond, op::kWhere, "cond");
  check_cuda_tensor(a, op::kWhere, "a");
  check_cuda_tensor(b, op::kWhere, "b");
  COPPICE_CHECK(cond.dtype() == DType::kBool, "where: cond must be bool, got ", dtype_name(cond.dtype()));
  COPPICE_CHECK(a.dtype() == b.dtype(), "where: a and b must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), op::kWhere), op::kWhere);
  Tensor out = Tensor::empty(shape, a.options());
  // Copies bytes, so one kernel per element size serves every dtype.
  auto body = [&](auto tag) {
    using U = typename decltype(tag)::type;
    launch_elementwise(op::kWhere, a.device().index, shape, {&out, &cond, &a, &b},
                       WhereFn<U>{static_cast<U*>(out.data_ptr()), cond.data<bool>(),
                                  static_cast<const U*>(a.data_ptr()), static_cast<const U*>(b.data_ptr())});
  };
  by_element_size(a.dtype(), body);
  return out;
}

bool register_all() {
  binary_ops::for_each([](auto op) {
    using Op = decltype(op);
    if constexpr (Op::kCompare != Compare::kNone) {
      Dispatcher::instance().register_kernel(Op::kName, DeviceType::kCuda, {"dense", "dense"},
                                             [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                               COPPICE_CHECK(in.size() == 2, Op::kName, ": expected 2 inputs, got ",
                                                             in.size());
                                               return {compare(Op::kName, Op::kCompare, in[0], in[1])};
                                             });
    }
  });
  Dispatcher::instance().register_kernel(op::kWhere, DeviceType::kCuda, {"dense", "dense", "dense"},
                                         [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                           COPPICE_CHECK(in.size() == 3, "where: expected 3 inputs, got ", in.size());
                                           return {where(in[0], in[1], in[2])};
                                         });
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cuda
