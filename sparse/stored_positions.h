// Where each stored value of a sparse tensor sits in its dense shape: the
// format-independent map that kernels without a format of their own use
// (the CPU's elementwise kernels, the CUDA kernels that work through CSR).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

// For every element of values(t) (row-major over its contiguous storage),
// the row-major flat position it stores in t's shape, or -1 where it stores
// nothing (Blocked-ELL padding, masked-out elements). Index parts are read on
// the CPU (copied there when t is on a device); an uncoalesced COO may repeat
// positions. A user's format answers through its row's stored_positions
// (sparse/formats.h); throws for dense and for a user's format without one.
std::vector<int64_t> stored_positions(const Tensor& t);

}  // namespace coppice
