// The gradient signal that a growth policy such as RigL ranks a layer's
// candidates by, typed by what it holds. Two things travel here, and their
// shapes alone cannot tell them apart (a 1x1 block grid has the weight's
// shape), so each says which it is:
//   dense gradient  the weight's gradient at every position, pruned ones
//                   included: the weight's shape, dense or in any format whose
//                   unstored entries read as 0 (the gradient's streamed top
//                   candidates as COO);
//   block scores    for a block-format weight (one whose row in the format
//                   table has a block shape), the sum of squares of that
//                   gradient over each block: f64, the block grid's shape
//                   [rows / block_rows, cols / block_cols]. The dense-gradient
//                   view (models/dense_gradient_view.h) forms them from the
//                   gradient's factors, without a dense gradient.
// The view produces signals, the sparsity schedule hands them on by layer,
// and the mask updater checks each against its layer before any policy runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tensor/tensor.h"

namespace coppice {

class GrowthSignal {
 public:
  enum class Kind : uint8_t {
    kNone,           // the step did not ask for one
    kDenseGradient,  // the weight's shape
    kBlockScores,    // the block grid's shape, with the block size
  };

  GrowthSignal() = default;
  // Throws when `gradient` is undefined.
  static GrowthSignal dense_gradient(Tensor gradient);
  // Throws when `scores` is undefined or not 2-D, or a block side is below 1.
  static GrowthSignal block_scores(Tensor scores, int64_t block_rows, int64_t block_cols);

  Kind kind() const { return kind_; }
  bool defined() const { return kind_ != Kind::kNone; }
  bool is_dense_gradient() const { return kind_ == Kind::kDenseGradient; }
  bool is_block_scores() const { return kind_ == Kind::kBlockScores; }
  // The tensor it carries (undefined for none).
  const Tensor& tensor() const { return tensor_; }
  // The block size of block scores (0 otherwise).
  int64_t block_rows() const { return block_rows_; }
  int64_t block_cols() const { return block_cols_; }

  // What it is, for messages: "a dense gradient of shape [4, 6]", "block
  // scores of 2x3 blocks, grid [2, 2]" or "none".
  std::string describe() const;

 private:
  Kind kind_ = Kind::kNone;
  Tensor tensor_;
  int64_t block_rows_ = 0, block_cols_ = 0;
};

// "none", "dense gradient" or "block scores".
const char* growth_signal_kind_name(GrowthSignal::Kind kind);

// The scores a layer of `shape` that grows in blocks of block_rows x
// block_cols (1 x 1: entry by entry) ranks by: block scores of that block
// size over its grid, or, for a layer that grows entry by entry, the dense
// gradient of its shape (1x1 block scores, each entry's squared gradient,
// rank as it does). Throws "<op>: expected ..., got <signal.describe()>"
// otherwise; op names the layer.
const Tensor& expect_growth_scores(const GrowthSignal& signal, const Shape& shape, int64_t block_rows,
                                   int64_t block_cols, std::string_view op);

}  // namespace coppice
