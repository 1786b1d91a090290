// The walks the attention kernels take (sparse/attention/block_walks.h): the
// BSR's own arrays by query block, their transpose by key block, formed once
// per pattern.
#include "sparse/attention/block_walks.h"

#include <gtest/gtest.h>

#include <vector>

#include "sparse/attention/attention.h"
#include "sparse/attention/block_pattern.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

std::vector<int32_t> host(const Tensor& t) { return t.to_vector<int32_t>(); }

TEST(AttentionBlockWalksTest, ByQueryBlockAndByKeyBlock) {
  // Query block 0 sees key blocks 0 and 2; 1 sees 2; 2 sees 0 and 1.
  const Tensor p =
      attention_block_pattern({true, false, true, false, false, true, true, true, false}, 2, Device::cpu());
  const auto w = attention_block_walks(p);
  EXPECT_EQ(host(w->row_ptr), (std::vector<int32_t>{0, 2, 3, 5}));
  EXPECT_EQ(host(w->col_idx), (std::vector<int32_t>{0, 2, 2, 0, 1}));
  EXPECT_EQ(host(w->col_ptr), (std::vector<int32_t>{0, 2, 3, 5}));
  EXPECT_EQ(host(w->row_idx), (std::vector<int32_t>{0, 2, 2, 0, 1}));
  // The query-block walk's entries, blocks (0, 0), (0, 2), (1, 2), (2, 0)
  // and (2, 1), are the key-block walk's 0, 3, 4, 1 and 2.
  EXPECT_EQ(host(w->col_entry), (std::vector<int32_t>{0, 3, 4, 1, 2}));
  ASSERT_EQ(w->in_order().size(), static_cast<size_t>(kAttentionWalks));
  for (const Tensor& t : w->in_order()) EXPECT_EQ(t.dtype(), DType::kI32);
}

TEST(AttentionBlockWalksTest, NoStoredBlocks) {
  const auto w = attention_block_walks(attention_block_pattern({false, false, false, false}, 4, Device::cpu()));
  EXPECT_EQ(host(w->row_ptr), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(host(w->col_ptr), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(w->col_idx.numel(), 0);
  EXPECT_EQ(w->row_idx.numel(), 0);
  EXPECT_EQ(w->col_entry.numel(), 0);
}

// Formed once per pattern: a second call, or a tensor of the same pattern
// with other values, gets the same walks; another pattern gets its own.
TEST(AttentionBlockWalksTest, FormedOncePerPattern) {
  const Tensor p = attention_block_pattern({true, true, false, true}, 2, Device::cpu());
  const auto first = attention_block_walks(p);
  EXPECT_EQ(attention_block_walks(p).get(), first.get());
  EXPECT_EQ(attention_block_walks(with_values(p, zeros({3, 2, 2}, DType::kBF16))).get(), first.get());
  const Tensor other = attention_block_pattern({true, true, false, true}, 2, Device::cpu());
  EXPECT_NE(attention_block_walks(other).get(), first.get());
}

}  // namespace
}  // namespace coppice
