// The own SpMM kernels for BSR and n:m (block_kernel_spmm.h), launched from
// the SpMM planner's "block_kernels" route (spmm.cc); the kernels are
// block_spmm.cu's. bf16/f16 compute in f32 and round once, as on the CPU.
#include "sparse/cuda/block_spmm.h"

#include "sparse/bsr.h"
#include "sparse/cuda/block_kernel_spmm.h"
#include "sparse/format_cells.h"
#include "sparse/formats.h"
#include "sparse/nm.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

// Each format's launch of its block_spmm.cu kernel: Launch::run<T>(a, vals,
// x, n, y, op, stream) with vals, x and y contiguous in T. One per format, so
// each format's product is its own kernel (the cells below).
struct BsrLaunch {
  template <typename T>
  static void run(const Tensor& a, const T* vals, const T* x, int64_t n, T* y, std::string_view op,
                  cudaStream_t stream) {
    const BsrImpl& b = bsr_impl(a, op);
    const int32_t* crow = b.crow_indices().data<int32_t>();
    const int32_t* bcol = b.col_indices().data<int32_t>();
    bsr_spmm<T>(crow, bcol, vals, a.size(0), b.block_rows(), b.block_cols(), x, n, y, stream);
  }
};

struct NmLaunch {
  template <typename T>
  static void run(const Tensor& a, const T* vals, const T* x, int64_t n, T* y, std::string_view op,
                  cudaStream_t stream) {
    const NmImpl& s = nm_impl(a, op);
    const Tensor positions = s.indices().contiguous();
    nm_spmm<T>(vals, positions.data<uint8_t>(), a.size(0), s.groups_per_row(), s.n(), s.m(), x, n, y, stream);
  }
};

template <typename Launch>
Tensor spmm(const Tensor& a, const Tensor& x_in, std::string_view op) {
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
  if (acc == DType::kF64) {
    Launch::run(a, vals.data<double>(), x.data<double>(), n, y.data<double>(), op, stream);
  } else {
    Launch::run(a, vals.data<float>(), x.data<float>(), n, y.data<float>(), op, stream);
  }
  cuda::check_launch(op);
  return y.to(dtype);
}

using SpmmCell = Tensor (*)(const Tensor&, const Tensor&, std::string_view);

// The formats these kernels take.
const FormatCells<SpmmCell>& spmm_cells() {
  static const auto* cells = new FormatCells<SpmmCell>({
      {format_name(Layout::kBsr), spmm<BsrLaunch>},
      {format_name(Layout::kNm), spmm<NmLaunch>},
  });
  return *cells;
}

}  // namespace

Tensor block_kernel_spmm(const Tensor& a, const Tensor& x_in, std::string_view op) {
  const SpmmCell* cell = spmm_cells().find(a);
  COPPICE_CHECK(cell != nullptr, op, ": internal: the block kernels take BSR or n:m, got ", a.format());
  return (*cell)(a, x_in, op);
}

}  // namespace coppice::sparse_cuda
