// The CUDA kernels of the arithmetic binary ops (tensor/binary_ops.h),
// twins of tensor/cpu/binary.cc: the same functor per op; a and b of one
// dtype and any strides broadcast; the output is contiguous, of a's dtype.
// The comparisons live in compare.cu. Same-shape contiguous, 16-byte aligned
// bf16/f16 operands go in 16-byte packs (elementwise.cuh), with the same bits.
#include "tensor/binary_ops.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

using binary_ops::Compare;
using binary_ops::Domain;

template <typename T, typename Op>
struct BinaryFn {
  T* out;
  const T* a;
  const T* b;
  Op op;
  __device__ void operator()(const int64_t* off) const {
    using C = compute_t<T>;
    out[off[0]] = T(op(static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]])));
  }
};

template <typename Op>
Tensor apply(const Tensor& a, const Tensor& b) {
  constexpr std::string_view name = Op::kName;
  check_cuda_tensor(a, name, "a");
  check_cuda_tensor(b, name, "b");
  COPPICE_CHECK(a.dtype() == b.dtype(), name, ": operands must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  COPPICE_CHECK(!(Op::kDomain == Domain::kAnyButBool && a.dtype() == DType::kBool), name,
                ": not defined for bool tensors");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.options());
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    // bf16/f16 of one shape, contiguous and aligned, or one of them a block
    // of the other's last dimensions broadcast over it: 16-byte packs (the
    // residual adds, gelu_backward, the bias adds of linears whose products
    // do not add it, a GPT's position table added to its token embeddings).
    if (launch_packed<true, T>(name, out, a, b, Op{})) return;
    launch_elementwise(name, a.device().index, shape, {&out, &a, &b},
                       BinaryFn<T, Op>{static_cast<T*>(out.data_ptr()), static_cast<const T*>(a.data_ptr()),
                                       static_cast<const T*>(b.data_ptr()), Op{}});
  };
  if constexpr (Op::kDomain == Domain::kFloating) {
    dispatch_floating(a.dtype(), name, body);
  } else {
    dispatch_dtype(a.dtype(), body);
  }
  return out;
}

bool register_all() {
  binary_ops::for_each([](auto op) {
    using Op = decltype(op);
    if constexpr (Op::kCompare == Compare::kNone) {  // the comparisons: compare.cu
      Dispatcher::instance().register_kernel(Op::kName, DeviceType::kCuda, {"dense", "dense"},
                                             [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                               COPPICE_CHECK(in.size() == 2, Op::kName, ": expected 2 inputs, got ",
                                                             in.size());
                                               return {apply<Op>(in[0], in[1])};
                                             });
    }
  });
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cuda
