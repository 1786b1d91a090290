// Data-dependent attention patterns: which key blocks each query block
// attends, chosen at run time from the queries and keys themselves (the
// scheduling-language proposal's routed attention; the Routing
// Transformer's idea with a fixed budget of blocks), never from the [T, T]
// score matrix.
//
// Each block of `block` tokens is pooled (the mean of its queries, of its
// keys), and query block i scores key block j by the sum over the batch and
// heads of <pooled q_i, pooled k_j>: one [nb, nb] product, nb = ceil(T /
// block). Query block i keeps the key blocks within `window` of it (the
// diagonal with window 1), key block 0 (every query sees the start), and the
// `top_k` best-scoring others; with `causal` only key blocks j <= i. The keep
// goes to attention_block_pattern (block_pattern.h) and the fused kernels,
// which skip every other block. One pattern serves the whole batch and every
// head (the kernels take one block pattern per call); the scores are read
// to the host, so a step that routes cannot be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

struct RoutingOptions {
  int64_t block = 64;
  int64_t window = 1;  // local blocks: |i - j| < window
  int64_t top_k = 2;   // routed key blocks per query block, besides the local and the first
  bool causal = true;
};

// The pooled block scores [nb, nb] (f32, on the host) of q and k [B, T, H, d]
// (any strides; a packed qkv's q and k are its views).
Tensor routing_scores(const Tensor& q, const Tensor& k, int64_t block);

// The kept blocks, row-major [nb, nb], for q and k [B, T, H, d]. Throws
// naming the option that is out of range or the operands that do not match.
std::vector<bool> routed_keep(const Tensor& q, const Tensor& k, const RoutingOptions& options);

}  // namespace coppice
