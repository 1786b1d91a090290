#include "sparse/cuda/csr_row_order.h"

#include <cstdint>
#include <string>

#include "sparse/csr.h"
#include "sparse/cuda/csr_spmm.h"
#include "sparse/cuda/pattern_cache.h"
#include "tensor/cuda/sort.h"
#include "tensor/cuda/stream.h"

namespace coppice::sparse_cuda {
namespace {

Tensor build_order(const Tensor& csr, std::string_view op) {
  const CompressedImpl& c = csr_impl(csr, op);
  const int64_t rows = csr.size(0), cols = csr.size(1);
  const TensorOptions i32(DType::kI32, csr.device());
  // Keys in i32 storage, read as u32 by the sort (cols - length >= 0).
  Tensor keys[2] = {Tensor::empty({rows}, i32), Tensor::empty({rows}, i32)};
  Tensor ids[2] = {Tensor::empty({rows}, i32), Tensor::empty({rows}, i32)};
  const int device = csr.device().index;
  cuda::DeviceGuard guard(device);
  csr_row_order_keys(c.pointers().data<int32_t>(), rows, cols, static_cast<uint32_t*>(keys[0].data_ptr()),
                     ids[0].data<int32_t>(), cuda::current_stream(device));
  cuda::SortBuffers<uint32_t> buffers;
  for (int i = 0; i < 2; ++i) {
    buffers.keys[i] = static_cast<uint32_t*>(keys[i].data_ptr());
    buffers.values[i] = ids[i].data<int32_t>();
  }
  cuda::radix_sort_pairs(buffers, static_cast<int>(rows), cuda::bits_for(static_cast<uint64_t>(cols)), csr.device());
  return ids[buffers.current_value];
}

}  // namespace

Tensor csr_row_order(const Tensor& csr, std::string_view op) {
  static auto* cache = new PatternCache<Tensor>();  // never destroyed: kernels may run during exit
  return cache->get(csr, [&] { return build_order(csr, op); });
}

}  // namespace coppice::sparse_cuda
