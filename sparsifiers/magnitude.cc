// The magnitude built-ins (builtin.h): magnitude fraction and block magnitude.
#include <cmath>
#include <string>

#include "sparsifiers/builtin.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/ops.h"

namespace coppice {

int64_t kept_count(double sparsity, int64_t count) {
  const int64_t kept = count - static_cast<int64_t>(std::llround(sparsity * static_cast<double>(count)));
  return kept == 0 && sparsity < 1.0 && count > 0 ? 1 : kept;
}

MagnitudeFractionSparsifier::MagnitudeFractionSparsifier(double sparsity) : sparsity_(sparsity) {
  COPPICE_CHECK(sparsity >= 0.0 && sparsity <= 1.0, "magnitude: sparsity must be in [0, 1], got ", sparsity);
}

std::string MagnitudeFractionSparsifier::describe() const { return str_cat("magnitude(sparsity=", sparsity_, ")"); }

Tensor MagnitudeFractionSparsifier::keep_mask(const Tensor& x, const SparsifyContext&) const {
  const Tensor d = to_dense(x);
  return sparsify::topk_mask(d, kept_count(sparsity_, d.numel()), true, describe());
}

BlockMagnitudeSparsifier::BlockMagnitudeSparsifier(double sparsity, int64_t block_rows, int64_t block_cols,
                                                   BlockNorm norm)
    : sparsity_(sparsity), block_rows_(block_rows), block_cols_(block_cols), norm_(norm) {
  COPPICE_CHECK(sparsity >= 0.0 && sparsity <= 1.0, "block_magnitude: sparsity must be in [0, 1], got ", sparsity);
  COPPICE_CHECK(block_rows > 0 && block_cols > 0, "block_magnitude: block shape must be positive, got ", block_rows,
                "x", block_cols);
}

std::string BlockMagnitudeSparsifier::describe() const {
  return str_cat("block_magnitude(sparsity=", sparsity_, ", block_rows=", block_rows_, ", block_cols=", block_cols_,
                 ", norm=", norm_ == BlockNorm::kL2 ? "l2" : "l1", ")");
}

std::string BlockMagnitudeSparsifier::shape_mismatch(const Shape& shape) const {
  if (shape.size() != 2) return str_cat(describe(), ": needs a 2-D tensor, got shape ", shape_to_string(shape));
  if (shape[0] % block_rows_ != 0 || shape[1] % block_cols_ != 0) {
    return str_cat(describe(), ": the shape ", shape_to_string(shape), " is not a whole number of blocks");
  }
  return "";
}

Tensor BlockMagnitudeSparsifier::block_scores(const Tensor& x) const {
  const Tensor d = to_dense(x);
  const std::string mismatch = shape_mismatch(d.shape());
  COPPICE_CHECK(mismatch.empty(), mismatch);
  return sparsify::block_scores(d, block_rows_, block_cols_, norm_ == BlockNorm::kL1, describe());
}

Tensor BlockMagnitudeSparsifier::keep_mask(const Tensor& x, const SparsifyContext&) const {
  const Tensor scores = block_scores(x);
  const Tensor blocks = sparsify::topk_mask(scores, kept_count(sparsity_, scores.numel()), false, describe());
  return sparsify::expand_block_mask(blocks, block_rows_, block_cols_);
}

}  // namespace coppice
