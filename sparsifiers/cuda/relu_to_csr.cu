// CUDA twin of the relu-into-CSR kernel (sparsifiers/fused_relu.h has the
// op; fused_relu.cc holds the CPU side). Keeps v > threshold by the rule of
// mask_keys.h (relu_keeps), so both devices store the same entries.
//
// The two passes over x (count, CUB scan, one nnz read back, write; a warp
// per row, 16-byte vector loads, entries in ascending columns) are the row
// compaction of sparse/cuda/row_compact.cuh, which dense_mask_to_csr shares;
// this file says only which entries survive.
#include <cstdint>
#include <vector>

#include "sparse/cuda/row_compact.cuh"
#include "sparsifiers/mask_keys.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

constexpr const char* kOp = op::kReluToCsr;

// Keeps v > threshold (relu_keeps); relu(v) = v where kept, so the stored
// values are the input's.
template <typename T>
struct ReluKeep {
  const T* x;
  int64_t cols;
  compute_t<T> bound;
  bool vectorized;

  __device__ uint32_t bits(int64_t r, int64_t c, row_compact::Chunk<T>* out) const {
    using C = compute_t<T>;
    constexpr int kSize = row_compact::Chunk<T>::kSize;
    row_compact::Chunk<T> chunk;
    row_compact::load_chunk(x + r * cols, c, cols, vectorized, chunk);
    uint32_t bits = 0;
#pragma unroll
    for (int j = 0; j < kSize; ++j) {
      if (c + j < cols) {
        bits |= static_cast<uint32_t>(sparsify_detail::relu_keeps(static_cast<C>(chunk.v[j]), bound)) << j;
      }
    }
    if (out != nullptr) *out = chunk;
    return bits;
  }
};

// Inputs {x}: dense, contiguous, 2-D, floating, fewer than 2^31 elements (the
// frontend checks). Outputs {crow_indices i32 [rows + 1], col_indices i32
// [nnz], values [nnz] in x's dtype}.
std::vector<Tensor> relu_to_csr(const std::vector<Tensor>& in, const Attrs& a) {
  check_inputs(in, 1, kOp);
  check_contiguous_cuda(in[0], kOp, "input");
  check_ndim(in[0], 2, kOp, "input");
  const Tensor& x = in[0];
  const double threshold = a.get_double("threshold");
  COPPICE_CHECK(threshold >= 0.0, kOp, ": the threshold must be >= 0, got ", threshold);
  COPPICE_CHECK(x.numel() <= INT32_MAX, kOp, ": the CUDA kernel takes fewer than 2^31 elements, got ", x.numel());
  const int64_t rows = x.size(0), cols = x.size(1);
  return dispatch_floating(x.dtype(), kOp, [&](auto tag) -> std::vector<Tensor> {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const ReluKeep<T> keep{xp, cols, sparsify_detail::relu_keep_bound<C>(threshold),
                           row_compact::vectorizable(xp, cols)};
    return row_compact::compact_rows<T>(keep, rows, cols, x.device(), x.options(), kOp);
  });
}

const KernelRegistrar kReluToCsr(kOp, DeviceType::kCuda, {"dense"}, relu_to_csr);

}  // namespace
}  // namespace coppice::cuda
