// Element offsets of broadcast, strided operands, shared by the CPU and CUDA
// elementwise kernels.
//
// An indexer walks the elements of an output shape in row-major order and,
// for each, gives the element offset (relative to data_ptr()) of every
// operand: broadcast dimensions get stride 0, and adjacent dimensions that are
// contiguous in every operand are merged so that the common case costs one
// multiply per operand.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/half.h"  // COPPICE_HOST_DEVICE
#include "tensor/shape.h"

namespace coppice {

class Tensor;

constexpr int kMaxIndexerDims = 8;
constexpr int kMaxIndexerOperands = 4;

struct StridedIndexer {
  int ndim = 0;
  int noperands = 0;
  int64_t sizes[kMaxIndexerDims] = {};
  int64_t strides[kMaxIndexerOperands][kMaxIndexerDims] = {};

  // Offsets of every operand for output element `linear`.
  COPPICE_HOST_DEVICE void offsets(int64_t linear, int64_t* out) const {
    for (int k = 0; k < noperands; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < noperands; ++k) out[k] += i * strides[k][d];
    }
  }
};

// An indexer over `shape` for dense operands that broadcast to it (output
// first, by convention). Throws if an operand does not broadcast or the shape,
// after merging, has more than kMaxIndexerDims dimensions.
StridedIndexer make_indexer(const Shape& shape, const std::vector<const Tensor*>& operands);

}  // namespace coppice
