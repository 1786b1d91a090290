// The block pattern of block-sparse attention (sparse/attention/block_pattern.h):
// built from a host keep matrix, and checked against T with errors that name
// what is wrong.
#include "sparse/attention/block_pattern.h"

#include <gtest/gtest.h>

#include <vector>

#include "sparse/bsr.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

TEST(AttentionBlockPatternTest, StoresTheKeptBlocks) {
  // Blocks of 3 tokens: query block 0 sees key blocks 0 and 1, block 1 none, block 2 key block 2.
  const Tensor p =
      attention_block_pattern({true, true, false, false, false, false, false, false, true}, 3, Device::cpu());
  const BsrImpl& b = bsr_impl(p, "test");
  EXPECT_EQ(p.shape(), (Shape{9, 9}));
  EXPECT_EQ(b.block_rows(), 3);
  EXPECT_EQ(b.block_cols(), 3);
  EXPECT_EQ(b.crow_indices().to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 2, 3}));
  EXPECT_EQ(b.col_indices().to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2}));
}

TEST(AttentionBlockPatternTest, BadKeepMatricesAreRefused) {
  EXPECT_ERROR_NAMING(attention_block_pattern({true, true, true}, 2, Device::cpu()), "square");
  EXPECT_ERROR_NAMING(attention_block_pattern({}, 2, Device::cpu()), "non-empty");
  EXPECT_ERROR_NAMING(attention_block_pattern({true}, 0, Device::cpu()), "block must be positive");
}

TEST(AttentionBlockPatternTest, TheBlockSizeCoversT) {
  const Tensor p = attention_block_pattern(std::vector<bool>(9, true), 3, Device::cpu());  // [9, 9]
  EXPECT_EQ(checked_attention_block(p, 9, Device::cpu(), "op"), 3);
  EXPECT_EQ(checked_attention_block(p, 7, Device::cpu(), "op"), 3);  // the last block holds one token
  EXPECT_ERROR_NAMING(checked_attention_block(p, 6, Device::cpu(), "op"),
                      "op: a block pattern in blocks of 3 for T = 6 must be [6, 6], got [9, 9]");
  EXPECT_ERROR_NAMING(checked_attention_block(p, 10, Device::cpu(), "op"), "must be [12, 12]");
}

TEST(AttentionBlockPatternTest, OtherTensorsAreRefusedByName) {
  EXPECT_ERROR_NAMING(checked_attention_block(ones({4, 4}), 4, Device::cpu(), "op"),
                      "op: the block pattern must be a BSR tensor, got format 'dense'");
  // Blocks of 2 x 4 tokens: not square.
  const Tensor wide =
      sparse_bsr(from_vector<int32_t>({0, 1, 1}, {3}), from_vector<int32_t>({0}, {1}), zeros({1, 2, 4}), {4, 4});
  EXPECT_ERROR_NAMING(checked_attention_block(wide, 4, Device::cpu(), "op"), "blocks must be square, got 2x4");
}

}  // namespace
}  // namespace coppice
