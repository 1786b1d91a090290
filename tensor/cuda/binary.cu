// The arithmetic binary primitives (kernels.h, <binary>), twins of
// tensor/cpu/binary.cc: a and b of one dtype and any strides broadcast; the
// output is contiguous, of a's dtype. Floating types compute in compute_t
// (f32 for bf16/f16). add, sub, mul, maximum and minimum also take integers
// (wrapping on overflow) and bool (add = or, mul = and, maximum = or,
// minimum = and; sub throws); div and pow take floating types only.
// maximum/minimum propagate NaN. The comparisons live in compare.cu.
// Same-shape contiguous, 16-byte aligned bf16/f16 operands go in 16-byte
// packs (elementwise.cuh), with the same bits.
#include <string>
#include <type_traits>

#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

struct AddOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(math::as_unsigned(a) + math::as_unsigned(b));
    } else {
      return a + b;
    }
  }
};

struct SubOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a != b;  // unreachable: bool sub is rejected first
    } else if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(math::as_unsigned(a) - math::as_unsigned(b));
    } else {
      return a - b;
    }
  }
};

struct MulOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(math::as_unsigned(a) * math::as_unsigned(b));
    } else {
      return a * b;
    }
  }
};

struct DivOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a / b;
  }
};

struct PowOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return math::pow(a, b);
  }
};

struct MaxOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a > b || math::isnan(a)) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

struct ReluBackwardOp {
  template <typename C>
  __device__ C operator()(C g, C y) const {
    return y > C(0) ? g : C(0);
  }
};

struct GeluBackwardOp {
  template <typename C>
  __device__ C operator()(C g, C x) const {
    return math::gelu_grad(g, x);
  }
};

struct MinOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return (a < b || math::isnan(a)) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

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

template <typename Op, bool kFloatingOnly = false>
Tensor run(std::string_view op, const Tensor& a, const Tensor& b) {
  check_cuda_tensor(a, op, "a");
  check_cuda_tensor(b, op, "b");
  COPPICE_CHECK(a.dtype() == b.dtype(), op, ": operands must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, a.options());
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    // bf16/f16 of one shape, contiguous and aligned, or one of them a row
    // broadcast over the other: 16-byte packs (the residual adds,
    // gelu_backward, the bias adds of linears whose products do not add it).
    if (launch_packed<true, T>(op, out, a, b, Op{})) return;
    launch_elementwise(op, a.device().index, shape, {&out, &a, &b},
                       BinaryFn<T, Op>{static_cast<T*>(out.data_ptr()), static_cast<const T*>(a.data_ptr()),
                                       static_cast<const T*>(b.data_ptr()), Op{}});
  };
  if constexpr (kFloatingOnly) {
    dispatch_floating(a.dtype(), op, body);
  } else {
    dispatch_dtype(a.dtype(), body);
  }
  return out;
}

Tensor run_binary(std::string_view op, const Tensor& a, const Tensor& b) {
  if (op == "add") return run<AddOp>(op, a, b);
  if (op == "sub") {
    COPPICE_CHECK(a.dtype() != DType::kBool, "sub: not defined for bool tensors");
    return run<SubOp>(op, a, b);
  }
  if (op == "mul") return run<MulOp>(op, a, b);
  if (op == "div") return run<DivOp, true>(op, a, b);
  if (op == "pow") return run<PowOp, true>(op, a, b);
  if (op == "maximum") return run<MaxOp>(op, a, b);
  if (op == "minimum") return run<MinOp>(op, a, b);
  if (op == "relu_backward") return run<ReluBackwardOp, true>(op, a, b);
  if (op == "gelu_backward") return run<GeluBackwardOp, true>(op, a, b);
  fail(op, ": not a binary arithmetic kernel");
}

bool register_all() {
  for (std::string_view name :
       {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "relu_backward", "gelu_backward"}) {
    std::string op(name);
    Dispatcher::instance().register_kernel(op, DeviceType::kCuda, {"dense", "dense"},
                                           [op](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                             COPPICE_CHECK(in.size() == 2, op, ": expected 2 inputs, got ", in.size());
                                             return {run_binary(op, in[0], in[1])};
                                           });
  }
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cuda
