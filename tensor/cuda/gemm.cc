// gemm (kernels.h) through cuBLAS: batched, strided, row-major.
//
// cuBLAS is column-major, and a row-major [m, n] matrix read column-major is
// its transpose. So C = op(A) op(B) (row-major) is computed as
// C^T = op(B)^T op(A)^T (column-major): the operands swap places and keep
// their transpose flags, with leading dimensions taken from the stored
// shapes. A batch of 1 broadcasts through a batch stride of 0.
//
// f32 runs in plain f32 (no TF32, to stay close to the CPU twin) unless
// allow_tf32() (tensor/precision.h) says otherwise; f64 in f64;
// bf16/f16 through cublasGemmStridedBatchedEx with f32 compute. One cuBLAS
// handle per device, created on first use and bound to the device's stream
// (stream.h).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <climits>
#include <mutex>
#include <string>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/lazy/library.h"
#include "tensor/cuda/side_stream.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/precision.h"

namespace coppice::cuda {
namespace {

constexpr int kMaxDevices = 64;

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  // libcublas.so.13 is found at run time (lazy/library.h): missing, it says so.
  if (status == CUBLAS_STATUS_NOT_INITIALIZED) {
    const std::string missing = cuda_library_load_error(CudaLibrary::kCublas);
    if (!missing.empty()) fail("gemm: ", missing, " (in ", what, ")");
  }
  fail("gemm: cuBLAS error ", cublasGetStatusName(status), ": ", cublasGetStatusString(status), " (in ", what, ")");
}

struct Handle {
  std::mutex mu;  // cuBLAS handles are not meant to be shared by threads mid-call
  cublasHandle_t handle = nullptr;
};

// Two handles a device: one for its side stream (side_stream.h), one for
// every other. A handle's default workspace is its own, and work queued on
// the side stream may run at the same time as the other stream's
// (run_beside), so the two must not share one.
Handle& handle_for(int device, cudaStream_t stream) {
  COPPICE_CHECK(device >= 0 && device < kMaxDevices, "gemm: device index ", device, " out of range");
  static auto* handles = new std::array<std::array<Handle, 2>, kMaxDevices>();  // never destroyed
  static std::mutex create_mu;
  Handle& h = (*handles)[device][is_side_stream(device, stream) ? 1 : 0];
  std::lock_guard<std::mutex> lock(create_mu);
  if (h.handle == nullptr) {
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    check_cublas(cublasSetMathMode(handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                 "cublasSetMathMode");
    h.handle = handle;
  }
  return h;
}

int checked_int(int64_t v, const char* what) {
  COPPICE_CHECK(v <= INT_MAX, "gemm: ", what, " = ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

// A third input, when given, is where c goes ([batch, m, n], contiguous:
// checked by the frontend, ops_linalg.cc).
std::vector<Tensor> gemm(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  check_dense(in[0], op::kGemm, "a");
  check_dense(in[1], op::kGemm, "b");
  COPPICE_CHECK(in[0].device().is_cuda() && in[0].device() == in[1].device(),
                "gemm: a and b must be on one CUDA device");
  const Tensor a = in[0].contiguous(), b = in[1].contiguous();
  COPPICE_CHECK(a.dim() == 3 && b.dim() == 3, "gemm: a and b must be 3-D, got shapes ", shape_to_string(a.shape()),
                " and ", shape_to_string(b.shape()));
  COPPICE_CHECK(a.dtype() == b.dtype(), "gemm: a and b must have one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  const bool trans_a = attrs.get_bool("trans_a", false), trans_b = attrs.get_bool("trans_b", false);
  const int64_t ba = a.size(0), bb = b.size(0);
  const int64_t m = trans_a ? a.size(2) : a.size(1), k = trans_a ? a.size(1) : a.size(2);
  const int64_t kb = trans_b ? b.size(2) : b.size(1), n = trans_b ? b.size(1) : b.size(2);
  COPPICE_CHECK(k == kb, "gemm: inner dimensions differ: a ", shape_to_string(a.shape()),
                (trans_a ? " (transposed)" : ""), " and b ", shape_to_string(b.shape()),
                (trans_b ? " (transposed)" : ""));
  COPPICE_CHECK(ba == bb || ba == 1 || bb == 1, "gemm: batch sizes ", ba, " and ", bb, " do not broadcast");
  const int64_t batch = (ba == 1) ? bb : ba;
  const DType dtype = a.dtype();
  COPPICE_CHECK(is_floating(dtype), "gemm: ", dtype_name(dtype),
                " operands are not supported (floating types only: f32, f64, bf16, f16)");
  Tensor c = in.size() == 3 ? in[2] : Tensor::empty({batch, m, n}, a.options());
  if (c.numel() == 0) return {c};
  const int device = a.device().index;
  DeviceGuard guard(device);
  if (k == 0) {
    COPPICE_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.numel() * dtype_size(dtype), current_stream(device)),
                       op::kGemm);
    return {c};
  }
  const int im = checked_int(m, "m"), in_ = checked_int(n, "n"), ik = checked_int(k, "k");
  const int ibatch = checked_int(batch, "batch");
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = trans_a ? im : ik;  // row length of a as stored
  const int ldb = trans_b ? ik : in_;
  const long long stride_a = ba == 1 ? 0 : m * k, stride_b = bb == 1 ? 0 : k * n, stride_c = m * n;
  const cudaStream_t stream = current_stream(device);
  Handle& h = handle_for(device, stream);
  std::lock_guard<std::mutex> lock(h.mu);
  // Every call: the stream is the graph-capture stream while capturing (stream.h).
  check_cublas(cublasSetStream(h.handle, stream), "cublasSetStream");
  switch (dtype) {
    case DType::kF32: {
      const float alpha = 1.0f, beta = 0.0f;
      if (allow_tf32()) {  // tensor/precision.h
        check_cublas(cublasGemmStridedBatchedEx(h.handle, op_b, op_a, in_, im, ik, &alpha, b.data_ptr(), CUDA_R_32F,
                                                ldb, stride_b, a.data_ptr(), CUDA_R_32F, lda, stride_a, &beta,
                                                c.data_ptr(), CUDA_R_32F, in_, stride_c, ibatch,
                                                CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmStridedBatchedEx (TF32)");
        break;
      }
      check_cublas(
          cublasSgemmStridedBatched(h.handle, op_b, op_a, in_, im, ik, &alpha, b.data<float>(), ldb, stride_b,
                                    a.data<float>(), lda, stride_a, &beta, c.data<float>(), in_, stride_c, ibatch),
          "cublasSgemmStridedBatched");
      break;
    }
    case DType::kF64: {
      const double alpha = 1.0, beta = 0.0;
      check_cublas(
          cublasDgemmStridedBatched(h.handle, op_b, op_a, in_, im, ik, &alpha, b.data<double>(), ldb, stride_b,
                                    a.data<double>(), lda, stride_a, &beta, c.data<double>(), in_, stride_c, ibatch),
          "cublasDgemmStridedBatched");
      break;
    }
    default: {
      const cudaDataType_t type = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
      const float alpha = 1.0f, beta = 0.0f;
      check_cublas(cublasGemmStridedBatchedEx(h.handle, op_b, op_a, in_, im, ik, &alpha, b.data_ptr(), type, ldb,
                                              stride_b, a.data_ptr(), type, lda, stride_a, &beta, c.data_ptr(), type,
                                              in_, stride_c, ibatch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx");
      break;
    }
  }
  return {c};
}

const KernelRegistrar kGemm(op::kGemm, DeviceType::kCuda, {"dense", "dense"}, gemm);
const KernelRegistrar kGemmOut(op::kGemm, DeviceType::kCuda, {"dense", "dense", "dense"}, gemm);

}  // namespace
}  // namespace coppice::cuda
