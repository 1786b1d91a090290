// The block pattern of block-sparse attention: a BSR matrix of the token
// grid, [blocks * block, blocks * block] with square blocks of `block` tokens
// (blocks = ceil(T / block)), whose stored blocks are the (query block, key
// block) pairs attended. Only the pattern is read, never the values, so the
// format's own machinery (pattern versions, conversions, printing) serves
// attention as it serves weights.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

// The pattern of a host matrix `keep` (blocks x blocks, row-major; keep[i *
// blocks + j] true: query block i sees key block j) in blocks of `block`
// tokens, on `device`; its values are bf16 ones (the smallest floating dtype
// a BSR takes: they are never read). Throws for a size that is not a square,
// or block <= 0.
Tensor attention_block_pattern(const std::vector<bool>& keep, int64_t block, Device device);

// The block size of `pattern`, checked against T tokens on `device`: a BSR of
// square blocks, [b * ceil(T / b)] on both sides, on `device`. Throws naming
// `op` and what is wrong.
int64_t checked_attention_block(const Tensor& pattern, int64_t t, Device device, std::string_view op);

}  // namespace coppice
