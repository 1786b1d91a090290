// Growth signals (growth_signal.h).
#include "optim/growth_signal.h"

#include <utility>

#include "tensor/error.h"

namespace coppice {

GrowthSignal GrowthSignal::dense_gradient(Tensor gradient) {
  COPPICE_CHECK(gradient.defined(), "GrowthSignal::dense_gradient: the gradient is undefined");
  GrowthSignal s;
  s.kind_ = Kind::kDenseGradient;
  s.tensor_ = std::move(gradient);
  return s;
}

GrowthSignal GrowthSignal::block_scores(Tensor scores, int64_t block_rows, int64_t block_cols) {
  COPPICE_CHECK(scores.defined(), "GrowthSignal::block_scores: the scores are undefined");
  COPPICE_CHECK(scores.dim() == 2, "GrowthSignal::block_scores: the scores must be the 2-D block grid, got ",
                shape_to_string(scores.shape()));
  COPPICE_CHECK(block_rows >= 1 && block_cols >= 1, "GrowthSignal::block_scores: the block must be at least 1x1, got ",
                block_rows, "x", block_cols);
  GrowthSignal s;
  s.kind_ = Kind::kBlockScores;
  s.tensor_ = std::move(scores);
  s.block_rows_ = block_rows;
  s.block_cols_ = block_cols;
  return s;
}

std::string GrowthSignal::describe() const {
  switch (kind_) {
    case Kind::kDenseGradient: return str_cat("a dense gradient of shape ", shape_to_string(tensor_.shape()));
    case Kind::kBlockScores:
      return str_cat("block scores of ", block_rows_, "x", block_cols_, " blocks, grid ",
                     shape_to_string(tensor_.shape()));
    default: return "none";
  }
}

const char* growth_signal_kind_name(GrowthSignal::Kind kind) {
  switch (kind) {
    case GrowthSignal::Kind::kDenseGradient: return "dense gradient";
    case GrowthSignal::Kind::kBlockScores: return "block scores";
    default: return "none";
  }
}

const Tensor& expect_growth_scores(const GrowthSignal& signal, const Shape& shape, int64_t block_rows,
                                   int64_t block_cols, std::string_view op) {
  const bool blocked = block_rows > 1 || block_cols > 1;
  COPPICE_CHECK(shape.size() == 2 || !blocked, op, ": a layer that grows in blocks must be 2-D, got ",
                shape_to_string(shape));
  const Shape grid = blocked ? Shape{shape[0] / block_rows, shape[1] / block_cols} : shape;
  const bool fits =
      signal.is_block_scores()
          ? signal.block_rows() == block_rows && signal.block_cols() == block_cols && signal.tensor().shape() == grid
          : signal.is_dense_gradient() && !blocked && signal.tensor().shape() == shape;
  if (!fits) {
    const std::string expected =
        blocked ? str_cat("block scores of ", block_rows, "x", block_cols, " blocks, grid ", shape_to_string(grid))
                : str_cat("the dense gradient of shape ", shape_to_string(shape));
    fail(op, ": expected ", expected, ", got ", signal.describe());
  }
  return signal.tensor();
}

}  // namespace coppice
