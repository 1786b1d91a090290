#include "tensor/strided_indexer.h"

#include "tensor/tensor.h"

namespace coppice {

StridedIndexer make_indexer(const Shape& shape, const std::vector<const Tensor*>& operands) {
  COPPICE_CHECK(operands.size() <= kMaxIndexerOperands, "indexer: too many operands (", operands.size(), ")");
  const int64_t n = static_cast<int64_t>(shape.size());
  const size_t nops = operands.size();
  // Broadcast strides, one row per operand, for the full shape.
  std::vector<Shape> strides(nops, Shape(n, 0));
  for (size_t k = 0; k < nops; ++k) {
    const Tensor& t = *operands[k];
    int64_t lead = n - t.dim();
    COPPICE_CHECK(lead >= 0, "indexer: operand of shape ", shape_to_string(t.shape()), " has more dimensions than ",
                  shape_to_string(shape));
    for (int64_t d = 0; d < t.dim(); ++d) {
      int64_t size = t.shape()[d];
      COPPICE_CHECK(size == shape[lead + d] || size == 1, "indexer: operand of shape ", shape_to_string(t.shape()),
                    " does not broadcast to ", shape_to_string(shape));
      strides[k][lead + d] = (size == 1 && shape[lead + d] != 1) ? 0 : t.strides()[d];
    }
  }
  // Drop size-1 dimensions, then merge dimension d into d+1 when every operand
  // steps through d exactly as through a block of d+1.
  Shape sizes;
  std::vector<Shape> merged(nops);
  for (int64_t d = 0; d < n; ++d) {
    if (shape[d] == 1) continue;
    bool can_merge = !sizes.empty();
    for (size_t k = 0; k < nops && can_merge; ++k) { can_merge = merged[k].back() == strides[k][d] * shape[d]; }
    if (can_merge) {
      sizes.back() *= shape[d];
      for (size_t k = 0; k < nops; ++k) merged[k].back() = strides[k][d];
    } else {
      sizes.push_back(shape[d]);
      for (size_t k = 0; k < nops; ++k) merged[k].push_back(strides[k][d]);
    }
  }
  COPPICE_CHECK(sizes.size() <= static_cast<size_t>(kMaxIndexerDims), "indexer: shape ", shape_to_string(shape),
                " needs more than ", kMaxIndexerDims, " dimensions after merging");
  StridedIndexer ix;
  ix.noperands = static_cast<int>(nops);
  ix.ndim = static_cast<int>(sizes.size());
  if (ix.ndim == 0) {  // a single element
    ix.ndim = 1;
    ix.sizes[0] = 1;
    return ix;
  }
  for (int d = 0; d < ix.ndim; ++d) {
    ix.sizes[d] = sizes[d];
    for (size_t k = 0; k < nops; ++k) ix.strides[k][d] = merged[k][d];
  }
  return ix;
}

}  // namespace coppice
