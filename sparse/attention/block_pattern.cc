#include "sparse/attention/block_pattern.h"

#include "sparse/bsr.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {

Tensor attention_block_pattern(const std::vector<bool>& keep, int64_t block, Device device) {
  constexpr std::string_view op = "attention_block_pattern";
  COPPICE_CHECK(block > 0, op, ": block must be positive, got ", block);
  int64_t n = 0;
  while (n * n < static_cast<int64_t>(keep.size())) ++n;
  COPPICE_CHECK(n * n == static_cast<int64_t>(keep.size()) && n > 0, op,
                ": keep must be a non-empty square matrix, got ", keep.size(), " entries");
  std::vector<int32_t> crow{0}, col;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (keep[static_cast<size_t>(i * n + j)]) col.push_back(static_cast<int32_t>(j));
    }
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  const auto nblocks = static_cast<int64_t>(col.size());
  const Tensor crow_t = from_vector(crow, {n + 1}, TensorOptions(DType::kI32)).to(device);
  const Tensor col_t = from_vector(col, {nblocks}, TensorOptions(DType::kI32)).to(device);
  const Tensor values = ones({nblocks, block, block}, TensorOptions(DType::kBF16, device));
  return sparse_bsr(crow_t, col_t, values, {n * block, n * block});
}

int64_t checked_attention_block(const Tensor& pattern, int64_t t, Device device, std::string_view op) {
  const auto* b = pattern.impl_as<BsrImpl>();
  COPPICE_CHECK(b != nullptr, op, ": the block pattern must be a BSR tensor, got format '", pattern.format(),
                "' (attention_block_pattern builds one)");
  const int64_t block = b->block_rows();
  COPPICE_CHECK(block == b->block_cols(), op, ": the block pattern's blocks must be square, got ", block, "x",
                b->block_cols());
  const int64_t side = (t + block - 1) / block * block;
  COPPICE_CHECK(pattern.shape() == Shape({side, side}), op, ": a block pattern in blocks of ", block, " for T = ", t,
                " must be [", side, ", ", side, "], got ", shape_to_string(pattern.shape()));
  COPPICE_CHECK(pattern.device() == device, op, ": the block pattern must be on ", device.to_string(), ", got ",
                pattern.device().to_string());
  return block;
}

}  // namespace coppice
