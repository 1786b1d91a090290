// gemm: batched matrix products through OpenBLAS (kernels.h).
//
// a [ba, m, k] ([ba, k, m] when trans_a) times b [bb, k, n] ([bb, n, k] when
// trans_b) gives c [batch, m, n]; ba == bb, or one of them is 1 and
// broadcasts. f32 and f64 call cblas_sgemm / cblas_dgemm one batch at a time
// from this thread (OpenBLAS threads each call itself). bf16 and f16 are
// converted to f32, multiplied, and rounded back once. Integer and bool
// operands throw.
#include <cblas.h>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

// y = op(mat) x: mat [rows, cols] row-major with row stride ld; x and y
// contiguous vectors.
template <typename T>
void gemv(bool trans, int64_t rows, int64_t cols, const T* mat, int64_t ld, const T* x, T* y) {
  const CBLAS_TRANSPOSE op = trans ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemv(CblasRowMajor, op, static_cast<blasint>(rows), static_cast<blasint>(cols), 1.0f, mat,
                static_cast<blasint>(ld), x, 1, 0.0f, y, 1);
  } else {
    cblas_dgemv(CblasRowMajor, op, static_cast<blasint>(rows), static_cast<blasint>(cols), 1.0, mat,
                static_cast<blasint>(ld), x, 1, 0.0, y, 1);
  }
}

template <typename T>
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc) {
  // A product with one row (or one column) is a matrix-vector product:
  // OpenBLAS's gemm runs it at a third to a fifth of gemv's speed (one
  // [1, 1024] x [1024, 1024]^T on one core: 144 us, against 26 us). y is
  // contiguous: c has one row, or one column of stride ldc = 1, and so is
  // the vector operand, whichever its transposition (a [k, 1] has lda 1).
  if (m == 1 && n > 0 && k > 0) {  // c [1, n] = a op(b) = op(b)^T a^T
    gemv<T>(!tb, tb ? n : k, tb ? k : n, b, ldb, a, c);
    return;
  }
  if (n == 1 && m > 0 && k > 0) {  // c [m, 1] = op(a) b
    gemv<T>(ta, ta ? k : m, ta ? m : k, a, lda, b, c);
    return;
  }
  const CBLAS_TRANSPOSE op_a = ta ? CblasTrans : CblasNoTrans, op_b = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k),
                1.0f, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, op_a, op_b, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k),
                1.0, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0, c, static_cast<blasint>(ldc));
  }
}

// c = op(a) op(b) for contiguous f32 or f64 operands already checked.
template <typename T>
void gemm_typed(const Tensor& a, const Tensor& b, const Tensor& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  const int64_t ba = a.size(0), bb = b.size(0), batch = c.size(0);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  const int64_t lda = std::max<int64_t>(1, ta ? m : k), ldb = std::max<int64_t>(1, tb ? k : n);
  const int64_t ldc = std::max<int64_t>(1, n);
  if (bb == 1 && ba > 1 && !ta) {
    // One product: the batches of a stack up as rows.
    blas<T>(false, tb, ba * m, n, k, pa, lda, pb, ldb, pc, ldc);
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    blas<T>(ta, tb, m, n, k, pa + (ba == 1 ? 0 : i) * m * k, lda, pb + (bb == 1 ? 0 : i) * k * n, ldb, pc + i * m * n,
            ldc);
  }
}

Tensor to_f32(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), TensorOptions(DType::kF32, t.device()));
  dispatch(op::kCopy, {out, t});
  return out;
}

// A contiguous buffer for a 3-D operand: the operand itself, or, when it is
// a transposed view of a contiguous tensor, that tensor with the transpose
// flag flipped (no copy); otherwise a contiguous copy.
void blas_operand(const Tensor& t, Tensor* out, bool* trans) {
  if (t.is_contiguous()) {
    *out = t;
    return;
  }
  Tensor tt = t.transpose(1, 2);
  if (tt.is_contiguous()) {
    *out = tt;
    *trans = !*trans;
    return;
  }
  *out = t.contiguous();
}

// `out`: undefined, or where c goes ([batch, m, n], contiguous: checked by
// the frontend, ops_linalg.cc).
Tensor gemm(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, const Tensor& out) {
  check_ndim(a_in, 3, op::kGemm, "a");
  check_ndim(b_in, 3, op::kGemm, "b");
  COPPICE_CHECK(a_in.dtype() == b_in.dtype(), "gemm: a and b must have one dtype, got ", dtype_name(a_in.dtype()),
                " and ", dtype_name(b_in.dtype()));
  const DType dtype = a_in.dtype();
  COPPICE_CHECK(is_floating(dtype), "gemm: ", dtype_name(dtype),
                " operands are not supported (floating types only: f32, f64, bf16, f16)");
  const int64_t ba = a_in.size(0), bb = b_in.size(0);
  const int64_t m = ta ? a_in.size(2) : a_in.size(1), ka = ta ? a_in.size(1) : a_in.size(2);
  const int64_t kb = tb ? b_in.size(2) : b_in.size(1), n = tb ? b_in.size(1) : b_in.size(2);
  COPPICE_CHECK(ka == kb, "gemm: inner dimensions differ: a ", shape_to_string(a_in.shape()), ta ? " (transposed)" : "",
                " and b ", shape_to_string(b_in.shape()), tb ? " (transposed)" : "");
  Tensor a, b;
  blas_operand(a_in, &a, &ta);
  blas_operand(b_in, &b, &tb);
  COPPICE_CHECK(ba == bb || ba == 1 || bb == 1, "gemm: batch sizes ", ba, " and ", bb, " do not broadcast");
  const int64_t batch = (ba == 0 || bb == 0) ? 0 : std::max(ba, bb);
  constexpr int64_t kBlasMax = std::numeric_limits<blasint>::max();
  COPPICE_CHECK(std::max<int64_t>(ba, 1) * m <= kBlasMax && n <= kBlasMax && ka <= kBlasMax, "gemm: sizes (m=", m,
                ", n=", n, ", k=", ka, ") exceed what OpenBLAS indexes");
  Tensor c = out.defined() ? out : Tensor::empty({batch, m, n}, a.options());
  if (c.numel() == 0) return c;
  if (ka == 0) {
    dispatch_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::fill_n(c.data<T>(), c.numel(), T(0.0f));
    });
    return c;
  }
  if (dtype == DType::kF32) {
    gemm_typed<float>(a, b, c, ta, tb, m, n, ka);
  } else if (dtype == DType::kF64) {
    gemm_typed<double>(a, b, c, ta, tb, m, n, ka);
  } else {
    Tensor c32 = Tensor::empty(c.shape(), TensorOptions(DType::kF32, c.device()));
    gemm_typed<float>(to_f32(a), to_f32(b), c32, ta, tb, m, n, ka);
    dispatch(op::kCopy, {c, c32});
  }
  return c;
}

std::vector<Tensor> gemm_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  return {gemm(in[0], in[1], attrs.get_bool("trans_a", false), attrs.get_bool("trans_b", false),
               in.size() == 3 ? in[2] : Tensor())};
}

KernelRegistrar gemm_reg(op::kGemm, DeviceType::kCpu, {"dense", "dense"}, gemm_kernel);
KernelRegistrar gemm_out_reg(op::kGemm, DeviceType::kCpu, {"dense", "dense", "dense"}, gemm_kernel);

}  // namespace
}  // namespace coppice::cpu
