// The unary elementwise primitives (kernels.h, <unary>), twins of
// tensor/cpu/unary.cc: x of any strides in, a contiguous y of x's shape and
// dtype out; a contiguous, 16-byte aligned bf16/f16 x in 16-byte packs
// (elementwise.cuh), with the same bits. Floating types compute in compute_t (f32 for bf16/f16); neg,
// abs, sign, relu and clamp also take integers and bool (neg not bool), with
// the CPU's interpretations: sign(NaN) = NaN, sign(+-0) = +-0, relu(NaN) = NaN,
// integer neg/abs wrap, integer clamp to [ceil(min), floor(max)] saturated,
// min > max gives max, NaN stays NaN.
#include <cmath>
#include <string>
#include <type_traits>

#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/dispatcher.h"
#include "tensor/kernels.h"

namespace coppice::cuda {
namespace {

struct NegOp {
  template <typename C>
  __device__ C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;  // unreachable: run_unary rejects bool first
    } else if constexpr (std::is_floating_point_v<C>) {
      return -v;
    } else {
      return static_cast<C>(math::as_unsigned(C(0)) - math::as_unsigned(v));
    }
  }
};

struct AbsOp {
  template <typename C>
  __device__ C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      return math::abs(v);
    } else if constexpr (std::is_signed_v<C>) {
      return v < 0 ? static_cast<C>(math::as_unsigned(C(0)) - math::as_unsigned(v)) : v;
    } else {
      return v;
    }
  }
};

struct SignOp {
  template <typename C>
  __device__ C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;
    } else if constexpr (std::is_floating_point_v<C>) {
      return v > C(0) ? C(1) : (v < C(0) ? C(-1) : v);
    } else if constexpr (std::is_unsigned_v<C>) {
      return static_cast<C>(v > C(0));
    } else {
      return static_cast<C>((v > C(0)) - (v < C(0)));
    }
  }
};

struct ReluOp {
  template <typename C>
  __device__ C operator()(C v) const {
    if constexpr (std::is_same_v<C, bool>) {
      return v;
    } else {
      return v <= C(0) ? C(0) : v;
    }
  }
};

// Bounds as given for floating types; ceil(min) and floor(max) for the others.
struct ClampOp {
  double lo, hi;
  template <typename C>
  __device__ C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      const C l = static_cast<C>(lo), h = static_cast<C>(hi);
      if (v < l) v = l;
      if (v > h) v = h;
      return v;
    } else {
      if (static_cast<double>(v) < lo) v = math::saturate<C>(lo);
      if (static_cast<double>(v) > hi) v = math::saturate<C>(hi);
      return v;
    }
  }
};

struct ExpOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return math::exp(v);
  }
};
struct LogOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return math::log(v);
  }
};
struct SqrtOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return math::sqrt(v);
  }
};
struct RsqrtOp {  // 1 / sqrt, both correctly rounded: the CPU computes the same
  template <typename C>
  __device__ C operator()(C v) const {
    return C(1) / math::sqrt(v);
  }
};
struct GeluOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return math::gelu(v);
  }
};
struct SigmoidOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return C(1) / (C(1) + math::exp(-v));
  }
};
struct TanhOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return math::tanh(v);
  }
};
struct ErfOp {
  template <typename C>
  __device__ C operator()(C v) const {
    return math::erf(v);
  }
};

template <typename T, typename Op>
struct UnaryFn {
  T* y;
  const T* x;
  Op op;
  __device__ void operator()(const int64_t* off) const { y[off[0]] = T(op(static_cast<compute_t<T>>(x[off[1]]))); }
};

template <typename T, typename Op>
Tensor launch(std::string_view op_name, const Tensor& x, Op op) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  // bf16/f16, contiguous and aligned: 16-byte packs (gelu in the GPT MLP).
  if (launch_packed<false, T>(op_name, y, x, Tensor(), op)) return y;
  launch_elementwise(op_name, x.device().index, x.shape(), {&y, &x},
                     UnaryFn<T, Op>{static_cast<T*>(y.data_ptr()), static_cast<const T*>(x.data_ptr()), op});
  return y;
}

template <typename Op>
Tensor unary_floating(std::string_view op_name, const Tensor& x, Op op = {}) {
  return dispatch_floating(x.dtype(), op_name,
                           [&](auto tag) { return launch<typename decltype(tag)::type>(op_name, x, op); });
}

template <typename Op>
Tensor unary_any(std::string_view op_name, const Tensor& x, Op op = {}) {
  return dispatch_dtype(x.dtype(), [&](auto tag) { return launch<typename decltype(tag)::type>(op_name, x, op); });
}

Tensor run_unary(std::string_view op, const Tensor& x, const Attrs& attrs) {
  check_cuda_tensor(x, op, "input");
  if (op == "neg") {
    COPPICE_CHECK(x.dtype() != DType::kBool, "neg: not defined for bool tensors");
    return unary_any<NegOp>(op, x);
  }
  if (op == "abs") return unary_any<AbsOp>(op, x);
  if (op == "sign") return unary_any<SignOp>(op, x);
  if (op == "relu") return unary_any<ReluOp>(op, x);
  if (op == "clamp") {
    double lo = attrs.get_double("min", -INFINITY), hi = attrs.get_double("max", INFINITY);
    if (!is_floating(x.dtype())) {
      lo = std::ceil(lo);
      hi = std::floor(hi);
    }
    return unary_any(op, x, ClampOp{lo, hi});
  }
  if (op == "exp") return unary_floating<ExpOp>(op, x);
  if (op == "log") return unary_floating<LogOp>(op, x);
  if (op == "sqrt") return unary_floating<SqrtOp>(op, x);
  if (op == "rsqrt") return unary_floating<RsqrtOp>(op, x);
  if (op == "gelu") return unary_floating<GeluOp>(op, x);
  if (op == "sigmoid") return unary_floating<SigmoidOp>(op, x);
  if (op == "tanh") return unary_floating<TanhOp>(op, x);
  if (op == "erf") return unary_floating<ErfOp>(op, x);
  fail(op, ": not a unary kernel");
}

bool register_all() {
  for (std::string_view name : kernels::kUnaryOps) {
    std::string op(name);
    Dispatcher::instance().register_kernel(
        op, DeviceType::kCuda, {"dense"},
        [op](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
          COPPICE_CHECK(in.size() == 1, op, ": expected 1 input, got ", in.size());
          return {run_unary(op, in[0], attrs)};
        });
  }
  return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace coppice::cuda
