#include "sparse/cuda/compressed_transpose.h"

#include <algorithm>
#include <mutex>

#include "sparse/cuda/compressed_index.h"
#include "sparse/cuda/cusparse_internal.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {

CompressedTranspose transpose_compressed_arrays(const Tensor& pointers, const Tensor& indices, int64_t rows,
                                                int64_t cols, std::string_view op) {
  const int64_t nnz = indices.numel();
  const Device device = pointers.device();
  const TensorOptions i32(DType::kI32, device);
  CompressedTranspose out;
  out.pointers = zeros({cols + 1}, i32);  // what csr2csc writes for no entries
  out.indices = empty({nnz}, i32);
  if (nnz == 0) {
    out.source = empty({0}, TensorOptions(DType::kI64, device));
    return out;
  }
  // The entries' own numbers ride along as the values: f64 holds them exactly
  // (csr2csc moves values, it does no arithmetic on them).
  cuda::DeviceGuard guard(device.index);
  const cudaStream_t stream = cuda::current_stream(device.index);
  Tensor numbers = empty({nnz}, TensorOptions(DType::kF64, device));
  iota(numbers.data<double>(), nnz, stream);
  Tensor moved = empty({nnz}, TensorOptions(DType::kF64, device));
  const Tensor p = pointers.to(DType::kI32).contiguous(), x = indices.to(DType::kI32).contiguous();
  const int* row_ptr = p.data<int32_t>();
  const int* col_ind = x.data<int32_t>();
  int* t_ptr = out.pointers.data<int32_t>();
  int* t_ind = out.indices.data<int32_t>();
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cusparseHandle_t handle = handle_for(device.index);
  size_t bytes = 0;
  check_cusparse(
      cusparseCsr2cscEx2_bufferSize(handle, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(nnz),
                                    numbers.data_ptr(), row_ptr, col_ind, moved.data_ptr(), t_ptr, t_ind, CUDA_R_64F,
                                    CUSPARSE_ACTION_NUMERIC, CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1, &bytes),
      op, "cusparseCsr2cscEx2_bufferSize");
  const Tensor workspace =
      empty({std::max<int64_t>(static_cast<int64_t>(bytes), 1)}, TensorOptions(DType::kU8, device));
  check_cusparse(cusparseCsr2cscEx2(handle, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(nnz),
                                    numbers.data_ptr(), row_ptr, col_ind, moved.data_ptr(), t_ptr, t_ind, CUDA_R_64F,
                                    CUSPARSE_ACTION_NUMERIC, CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1,
                                    workspace.data_ptr()),
                 op, "cusparseCsr2cscEx2");
  out.source = moved.to(DType::kI64);
  return out;
}

}  // namespace coppice::sparse_cuda
