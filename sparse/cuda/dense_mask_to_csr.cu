// CUDA twin of dense_mask_to_csr (sparse/ops.h has the table;
// sparse/cpu/dense_mask_to_csr.cc is the CPU side): the entries of a dense
// 2-D tensor where a bool mask holds, as CSR parts, built on the device by the
// row compaction of row_compact.cuh. The count pass reads only the mask; the
// write pass reads the values too and copies them bit for bit.
#include <cstdint>
#include <vector>

#include "sparse/cuda/row_compact.cuh"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

constexpr const char* kOp = op::kDenseMaskToCsr;

template <typename T>
struct MaskKeep {
  const T* x;
  const uint8_t* mask;  // bool storage, one byte per entry
  int64_t cols;
  bool vectorized;

  __device__ uint32_t bits(int64_t r, int64_t c, row_compact::Chunk<T>* chunk) const {
    constexpr int kSize = row_compact::Chunk<T>::kSize;
    const uint8_t* m = mask + r * cols;
    uint32_t out = 0;
#pragma unroll
    for (int j = 0; j < kSize; ++j) {
      if (c + j < cols && m[c + j] != 0) out |= 1u << j;
    }
    if (chunk != nullptr && out != 0) row_compact::load_chunk(x + r * cols, c, cols, vectorized, *chunk);
    return out;
  }
};

// Inputs {values, mask}: dense, contiguous, 2-D, the same shape, values
// floating, mask bool, fewer than 2^31 elements (the frontend checks).
// Outputs {crow_indices i32 [rows + 1], col_indices i32 [nnz], values [nnz]}.
std::vector<Tensor> dense_mask_to_csr(const std::vector<Tensor>& in, const Attrs&) {
  check_inputs(in, 2, kOp);
  check_contiguous_cuda(in[0], kOp, "values");
  check_contiguous_cuda(in[1], kOp, "mask");
  check_ndim(in[0], 2, kOp, "values");
  check_dtype(in[1], DType::kBool, kOp, "mask");
  const Tensor& x = in[0];
  const Tensor& mask = in[1];
  COPPICE_CHECK(mask.shape() == x.shape(), kOp, ": mask of shape ", shape_to_string(mask.shape()),
                " for values of shape ", shape_to_string(x.shape()));
  COPPICE_CHECK(mask.device() == x.device(), kOp, ": mask on ", mask.device().to_string(), ", values on ",
                x.device().to_string());
  COPPICE_CHECK(x.numel() <= INT32_MAX, kOp, ": the CUDA kernel takes fewer than 2^31 elements, got ", x.numel());
  const int64_t rows = x.size(0), cols = x.size(1);
  return dispatch_floating(x.dtype(), kOp, [&](auto tag) -> std::vector<Tensor> {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const MaskKeep<T> keep{xp, static_cast<const uint8_t*>(mask.data_ptr()), cols, row_compact::vectorizable(xp, cols)};
    return row_compact::compact_rows<T>(keep, rows, cols, x.device(), x.options(), kOp);
  });
}

const KernelRegistrar kDenseMaskToCsr(kOp, DeviceType::kCuda, {"dense", "dense"}, dense_mask_to_csr);

}  // namespace
}  // namespace coppice::cuda
