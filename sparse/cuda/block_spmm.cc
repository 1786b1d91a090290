// The own SpMM kernels for BSR and n:m (block_kernel_spmm.h), launched from
// the SpMM planner's "block_kernels" route (spmm.cc); the kernels are
// block_spmm.cu's. bf16/f16 compute in f32 and round once, as on the CPU.
#include "sparse/cuda/block_spmm.h"

#include "sparse/bsr.h"
#include "sparse/cuda/block_kernel_spmm.h"
#include "sparse/nm.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {

Tensor block_kernel_spmm(const Tensor& a, const Tensor& x_in, std::string_view op) {
  COPPICE_CHECK(a.dim() == 2 && x_in.dim() == 2, op, ": operands must be 2-D, got shapes ", shape_to_string(a.shape()),
                " and ", shape_to_string(x_in.shape()));
  COPPICE_CHECK(a.device().is_cuda() && a.device() == x_in.device(), op,
                ": CUDA kernel needs both operands on one CUDA device, got ", a.device().to_string(), " and ",
                x_in.device().to_string());
  COPPICE_CHECK(a.dtype() == x_in.dtype(), op, ": operands must share one dtype, got ", dtype_name(a.dtype()), " and ",
                dtype_name(x_in.dtype()));
  const DType dtype = a.dtype();
  COPPICE_CHECK(is_floating(dtype), op, ": ", dtype_name(dtype), " operands are not supported (f32, f64, bf16, f16)");
  const int64_t rows = a.size(0), cols = a.size(1), n = x_in.size(1);
  COPPICE_CHECK(x_in.size(0) == cols, op, ": inner dimensions differ: sparse a is ", shape_to_string(a.shape()),
                ", dense b is ", shape_to_string(x_in.shape()));
  const DType acc = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  const TensorOptions opts(acc, a.device());
  if (rows == 0 || n == 0) return Tensor::empty({rows, n}, TensorOptions(dtype, a.device()));
  if (cols == 0 || nnz(a) == 0) return zeros({rows, n}, TensorOptions(dtype, a.device()));
  const Tensor x = x_in.to(acc).contiguous();
  const Tensor vals = values(a).to(acc).contiguous();
  Tensor y = Tensor::empty({rows, n}, opts);
  const int device = a.device().index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  const bool f64 = acc == DType::kF64;
  if (a.layout() == Layout::kBsr) {
    const BsrImpl& b = bsr_impl(a, op);
    const int32_t* crow = b.crow_indices().data<int32_t>();
    const int32_t* bcol = b.col_indices().data<int32_t>();
    if (f64) {
      bsr_spmm<double>(crow, bcol, vals.data<double>(), rows, b.block_rows(), b.block_cols(), x.data<double>(), n,
                       y.data<double>(), stream);
    } else {
      bsr_spmm<float>(crow, bcol, vals.data<float>(), rows, b.block_rows(), b.block_cols(), x.data<float>(), n,
                      y.data<float>(), stream);
    }
  } else {
    const NmImpl& s = nm_impl(a, op);
    const Tensor positions = s.indices().contiguous();
    const uint8_t* pos = positions.data<uint8_t>();
    if (f64) {
      nm_spmm<double>(vals.data<double>(), pos, rows, s.groups_per_row(), s.n(), s.m(), x.data<double>(), n,
                      y.data<double>(), stream);
    } else {
      nm_spmm<float>(vals.data<float>(), pos, rows, s.groups_per_row(), s.n(), s.m(), x.data<float>(), n,
                     y.data<float>(), stream);
    }
  }
  cuda::check_launch(op);
  return y.to(dtype);
}

}  // namespace coppice::sparse_cuda
