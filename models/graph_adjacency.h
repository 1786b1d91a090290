// The two normalizations of a graph's adjacency that the graph layers
// (models/graph_conv.h) multiply by, each made once per graph as a CSR so
// that every layer's neighbourhood sum is one SpMM.
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace coppice {

// GCN's symmetric normalization with self-loops (Kipf and Welling 2017):
// Â = D^-1/2 (A + I) D^-1/2, D the row sums of A + I. `adjacency` is a
// square CSR (any values; an explicit diagonal entry is replaced by the
// self-loop's 1); the result is a CSR of its dtype on the CPU, every
// row holding its diagonal; its values are of `dtype` (default: adjacency's). Throws coppice::Error naming the op and
// the argument for a tensor that is not a square CSR, or a negative degree.
Tensor gcn_adjacency(const Tensor& adjacency, std::optional<DType> dtype = std::nullopt);

// GraphSAGE's mean over the neighbours: A's rows divided by their sums (the
// diagonal dropped: a node's own features go through the self weight), so
// M H is the mean of each node's neighbours' rows; a node without
// neighbours has an empty row (its mean is 0). Same checks as gcn_adjacency.
Tensor mean_adjacency(const Tensor& adjacency, std::optional<DType> dtype = std::nullopt);

}  // namespace coppice
