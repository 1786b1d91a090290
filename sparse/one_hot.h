// One-hot rows of integer class indices, as a sparse tensor: the gate of a
// mixture of experts, a bag of words, a graph's incidence. A dense one-hot
// matrix is almost all zeros; this one stores one entry per index.
#pragma once

#include <cstdint>
#include <string_view>

#include "sparse/formats.h"
#include "tensor/tensor.h"

namespace coppice {

// A tensor of shape indices.shape + [num_classes] holding 1 at each index's
// class and nothing else: for 1-D indices a CSR by default (one entry per
// row), for any other shape a COO; `format` may name any format of the
// table ("dense" included; a block format with its block in `options`),
// reached by to_format. `indices`: an integer tensor on any device (the
// result is on it); num_classes -1 means the largest index plus one.
// `dtype`: the values' type (floating). Errors name the first index out of
// [0, num_classes) and its position.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1, std::string_view format = "", DType dtype = DType::kF32,
               const FormatOptions& options = {});

}  // namespace coppice
