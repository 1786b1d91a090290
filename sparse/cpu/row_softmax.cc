// CPU kernels of csr_row_softmax and csr_row_softmax_backward (sparse/ops.h
// has the table), the twins of sparse/cuda/csr_row_softmax.cu. Moved here
// from models/sparse_attention.cc with their numerics unchanged: the max
// propagates NaN, sums run in f64, and bf16/f16 compute in f32 and round once
// (each result goes f64 -> compute type -> stored type, as the old path's
// conversion of an f32 result did).
#include <cmath>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cpu {
namespace {

// f64 for f64, f32 for f32, bf16 and f16.
template <typename T>
using compute_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Every row's range lies in [0, nnz] and does not run backwards: the CUDA
// twin trusts the pointers, the CPU can afford to look.
void check_pointers(const int32_t* ptr, int64_t rows, int64_t nnz, std::string_view op) {
  COPPICE_CHECK(ptr[0] == 0 && ptr[rows] == nnz, op, ": row pointers run from ", ptr[0], " to ", ptr[rows],
                ", expected 0 to nnz = ", nnz);
  for (int64_t r = 0; r < rows; ++r) { COPPICE_CHECK(ptr[r] <= ptr[r + 1], op, ": row pointers decrease at row ", r); }
}

void check_cpu(const std::vector<Tensor>& in, size_t n, std::string_view op) {
  COPPICE_CHECK(in.size() == n, op, ": expected ", n, " inputs, got ", in.size());
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.device().is_cpu(), op, ": CPU kernel got an operand on ", t.device().to_string());
    COPPICE_CHECK(t.is_contiguous(), op, ": operands must be contiguous");
  }
}

template <typename T>
void row_softmax(const int32_t* ptr, int64_t rows, const T* x, T* y) {
  using C = compute_of<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t b = ptr[r], e = ptr[r + 1];
    C m = -std::numeric_limits<C>::infinity();
    for (int32_t i = b; i < e; ++i) {
      const C v = static_cast<C>(x[i]);
      m = std::isnan(v) || v > m ? v : m;  // NaN sticks: NaN > m and m > NaN are both false
    }
    double s = 0.0;
    for (int32_t i = b; i < e; ++i) s += static_cast<double>(std::exp(static_cast<C>(x[i]) - m));
    // exp again rather than a buffer: the same value, and no nnz-sized
    // compute-type scratch for bf16/f16 outputs.
    for (int32_t i = b; i < e; ++i) {
      const double p = static_cast<double>(std::exp(static_cast<C>(x[i]) - m)) / s;
      y[i] = static_cast<T>(static_cast<C>(p));
    }
  }
}

template <typename T>
void row_softmax_backward(const int32_t* ptr, int64_t rows, const T* y, const T* g, T* gx) {
  using C = compute_of<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t b = ptr[r], e = ptr[r + 1];
    double dot = 0.0;
    for (int32_t i = b; i < e; ++i) {
      dot += static_cast<double>(static_cast<C>(g[i])) * static_cast<double>(static_cast<C>(y[i]));
    }
    for (int32_t i = b; i < e; ++i) {
      const double yi = static_cast<C>(y[i]), gi = static_cast<C>(g[i]);
      gx[i] = static_cast<T>(static_cast<C>(yi * (gi - dot)));
    }
  }
}

std::vector<Tensor> csr_row_softmax_cpu(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kCsrRowSoftmax;
  check_cpu(in, 2, op);
  const Tensor& crow = in[0];
  const Tensor& x = in[1];
  const int64_t rows = crow.numel() - 1;
  check_pointers(crow.data<int32_t>(), rows, x.numel(), op);
  Tensor y = Tensor::empty(x.shape(), x.options());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_softmax<T>(crow.data<int32_t>(), rows, x.data<T>(), y.data<T>());
  });
  return {y};
}

std::vector<Tensor> csr_row_softmax_backward_cpu(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kCsrRowSoftmaxBackward;
  check_cpu(in, 3, op);
  const Tensor& crow = in[0];
  const Tensor& y = in[1];
  const Tensor& g = in[2];
  const int64_t rows = crow.numel() - 1;
  check_pointers(crow.data<int32_t>(), rows, y.numel(), op);
  Tensor gx = Tensor::empty(y.shape(), y.options());
  dispatch_floating(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_softmax_backward<T>(crow.data<int32_t>(), rows, y.data<T>(), g.data<T>(), gx.data<T>());
  });
  return {gx};
}

const KernelRegistrar kRowSoftmax(op::kCsrRowSoftmax, DeviceType::kCpu, {"dense", "dense"}, csr_row_softmax_cpu);
const KernelRegistrar kRowSoftmaxBackward(op::kCsrRowSoftmaxBackward, DeviceType::kCpu, {"dense", "dense", "dense"},
                                          csr_row_softmax_backward_cpu);

}  // namespace
}  // namespace coppice::sparse_cpu
