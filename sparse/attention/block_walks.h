// The index arrays the attention kernels walk, derived from a block pattern
// (block_pattern.h): by query block, the BSR's own block-row pointers and
// block columns (the forward's and dq's walk), and by key block, their
// transpose (dk's and dv's walk), and where each entry of the first lies in
// the second (so that both backward walks name a kept block alike: the
// wgmma kernels' ds tiles are laid out by it). i32, on the pattern's device.
#pragma once

#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

struct AttentionBlockWalks {
  Tensor row_ptr;  // [blocks + 1]
  Tensor col_idx;  // [nnz], increasing within each query block
  Tensor col_ptr;  // [blocks + 1]
  Tensor row_idx;  // [nnz], increasing within each key block
  // [nnz]: for entry e of the query-block walk (col_idx[e]), the same
  // block's entry in the key-block walk (its index into row_idx).
  Tensor col_entry;

  // The arrays in the order the kernels take them as inputs (attention.h's
  // kAttentionWalks of them).
  std::vector<Tensor> in_order() const { return {row_ptr, col_idx, col_ptr, row_idx, col_entry}; }
};

// The walks of a BSR `pattern` (already checked: checked_attention_block).
// The transpose is formed once per pattern version and device, on the host
// (a device pattern's indices are read back that once), and kept while a
// tensor of that pattern lives, so that later calls (a captured CUDA graph's
// included) read nothing back.
std::shared_ptr<const AttentionBlockWalks> attention_block_walks(const Tensor& pattern);

}  // namespace coppice
