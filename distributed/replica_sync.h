// Keeping data-parallel replicas identical (docs/architecture.md, layer 6):
// broadcasting a tensor of any format from one rank, checksumming sparse
// patterns across ranks, and reducing a few scalars (metrics).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "tensor/tensor.h"

namespace coppice {

// Every rank gets `root`'s tensor. A dense tensor is broadcast in place and
// returned as the same handle. A sparse one (any format) whose pattern
// already equals the root's (checked by checksum) gets its values broadcast
// in place and is returned as the same handle; otherwise the root's parts are
// broadcast and a new tensor of the root's format is returned (the caller
// installs it). Shapes, dtypes and formats must agree across ranks; a
// mismatch throws coppice::Error naming `what`, the rank and both sides.
Tensor broadcast_any(Communicator& comm, const Tensor& tensor, int root, const std::string& what);

// A 64-bit hash of how a tensor stores its pattern: format, shape, attributes
// and the bytes of its index parts (values are not included). Dense tensors:
// the shape alone. Cheap (no positions are computed), so equal only for the
// same format: optim/mask_change.h's pattern_checksum compares positions
// across formats instead.
uint64_t pattern_fingerprint(const Tensor& tensor);

// Checks that every rank holds the same patterns for `tensors` (the same
// names, in the same order, on every rank): one all_gather of the checksums.
// Throws coppice::Error naming the first tensor that differs and the ranks
// whose checksums disagree with rank 0's, prefixed with `context` (for
// example "mask update at step 300").
void check_patterns_agree(Communicator& comm, const std::map<std::string, Tensor>& tensors, const std::string& context);

// Sums (or averages, or maxes) a few doubles over all ranks; one collective,
// on a CPU tensor (a backend that needs device tensors needs another path).
std::vector<double> all_reduce_scalars(Communicator& comm, const std::vector<double>& values,
                                       ReduceOp op = ReduceOp::kSum);

}  // namespace coppice
