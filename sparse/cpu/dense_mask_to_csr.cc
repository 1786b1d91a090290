// CPU kernel of dense_mask_to_csr (sparse/ops.h has the table), the twin of
// sparse/cuda/dense_mask_to_csr.cu. One pass in row-major order: each kept
// entry is appended as it is found and each row's end becomes its pointer, so
// the entries, their order and their values (copied bit for bit) are those of
// the COO path it replaces in sparse_from_mask (coo_from_mask, then
// coo_to_csr).
#include <cstdint>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cpu {
namespace {

constexpr const char* kOp = op::kDenseMaskToCsr;

template <typename T>
std::vector<Tensor> mask_to_csr(const Tensor& x, const Tensor& mask) {
  const T* p = x.data<T>();
  const uint8_t* m = static_cast<const uint8_t*>(mask.data_ptr());
  const int64_t rows = x.size(0), cols = x.size(1);
  std::vector<int32_t> crow(static_cast<size_t>(rows) + 1, 0);
  std::vector<int32_t> col;
  std::vector<T> val;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (m[r * cols + c] != 0) {
        col.push_back(static_cast<int32_t>(c));
        val.push_back(p[r * cols + c]);
      }
    }
    crow[static_cast<size_t>(r) + 1] = static_cast<int32_t>(col.size());
  }
  const int64_t nnz = static_cast<int64_t>(col.size());
  return {from_vector(crow, {rows + 1}), from_vector(col, {nnz}), from_vector(val, {nnz})};
}

// Inputs {values, mask}: dense, contiguous, 2-D, the same shape, values
// floating, mask bool, fewer than 2^31 elements (the frontend checks the rest).
std::vector<Tensor> dense_mask_to_csr_cpu(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 2, kOp, ": expected 2 inputs, got ", in.size());
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.device().is_cpu(), kOp, ": CPU kernel got an operand on ", t.device().to_string());
    COPPICE_CHECK(t.is_contiguous(), kOp, ": operands must be contiguous");
  }
  COPPICE_CHECK(in[0].dim() == 2 && in[1].shape() == in[0].shape() && in[1].dtype() == DType::kBool, kOp,
                ": needs 2-D values and a bool mask of the same shape, got ", shape_to_string(in[0].shape()), " and ",
                dtype_name(in[1].dtype()), " ", shape_to_string(in[1].shape()));
  COPPICE_CHECK(in[0].numel() <= INT32_MAX, kOp, ": takes fewer than 2^31 elements, got ", in[0].numel());
  return dispatch_floating(in[0].dtype(), kOp,
                           [&](auto tag) { return mask_to_csr<typename decltype(tag)::type>(in[0], in[1]); });
}

const KernelRegistrar kDenseMaskToCsrCpu(kOp, DeviceType::kCpu, {"dense", "dense"}, dense_mask_to_csr_cpu);

}  // namespace
}  // namespace coppice::sparse_cpu
