// The built-in sparsifiers (docs/architecture.md, "Sparsifiers"); registry.h makes
// each available by name. Every one picks its entries through the ops of
// mask_ops.h, which give the same mask on the CPU and the GPU.
//
// Constructors validate their parameters and throw coppice::Error naming the
// sparsifier and the bad value. "Exactly k" sparsifiers keep
// k = count - round(sparsity * count) entries (round half away from zero) and
// break ties by the lower flat index; NaN counts as the largest magnitude.
#pragma once

#include <cstdint>
#include <string>

#include "sparsifiers/sparsifier.h"

namespace coppice {

// The entries an "exactly k" sparsifier keeps out of `count` at `sparsity`:
// count - round(sparsity * count), but at least one while sparsity < 1, so
// that a small layer (a few blocks) asked for a density is never emptied by
// rounding (4 blocks at 90 % keep 1, not 0).
int64_t kept_count(double sparsity, int64_t count);

// Keeps everything (streaming). Into "dense" it returns x itself.
class KeepAllSparsifier : public Sparsifier {
 public:
  std::string describe() const override { return "keep_all"; }
  SparsifierKind kind() const override { return SparsifierKind::kStreaming; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;
  Tensor apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const override;
};

// Keeps |x| > threshold (streaming; threshold >= 0; NaN is dropped).
class ThresholdSparsifier : public Sparsifier {
 public:
  explicit ThresholdSparsifier(double threshold);
  std::string describe() const override;
  SparsifierKind kind() const override { return SparsifierKind::kStreaming; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;
  Tensor apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const override;
  double threshold() const { return threshold_; }

 private:
  double threshold_;
};

// Drops each entry independently with probability `sparsity` in [0, 1]
// (streaming), drawing from Generator::keyed(ctx.seed, ctx.purpose, ctx.step,
// ctx.rank): the same context gives the same mask on every device and rank,
// another step another mask. With `rescale` (like dropout), kept values are
// multiplied by 1 / (1 - sparsity), which needs sparsity < 1.
class RandomFractionSparsifier : public Sparsifier {
 public:
  explicit RandomFractionSparsifier(double sparsity, bool rescale = false);
  std::string describe() const override;
  SparsifierKind kind() const override { return SparsifierKind::kStreaming; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;
  double value_scale() const override;
  Tensor apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const override;
  double sparsity() const { return sparsity_; }
  bool rescale() const { return rescale_; }

 private:
  double sparsity_;
  bool rescale_;
};

// Keeps exactly kept_count(sparsity, numel) entries of largest |x|
// (materializing; sparsity in [0, 1]).
class MagnitudeFractionSparsifier : public Sparsifier {
 public:
  explicit MagnitudeFractionSparsifier(double sparsity);
  std::string describe() const override;
  SparsifierKind kind() const override { return SparsifierKind::kMaterializing; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;
  double sparsity() const { return sparsity_; }

 private:
  double sparsity_;
};

enum class BlockNorm { kL2, kL1 };

// For a 2-D x cut into block_rows x block_cols blocks (which must divide its
// shape), keeps exactly kept_count(sparsity, blocks) whole blocks of largest
// L2 (or L1) norm, ties to the lower block in row-major order
// (materializing). Its output is exactly the blocks of a BSR tensor with that
// block shape.
class BlockMagnitudeSparsifier : public Sparsifier {
 public:
  BlockMagnitudeSparsifier(double sparsity, int64_t block_rows, int64_t block_cols, BlockNorm norm = BlockNorm::kL2);
  std::string describe() const override;
  SparsifierKind kind() const override { return SparsifierKind::kMaterializing; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;
  std::string shape_mismatch(const Shape& shape) const override;
  // Per block: the sum of squares (L2, ranked like the norm) or of |x| (L1), f64.
  Tensor block_scores(const Tensor& x) const;

 private:
  double sparsity_;
  int64_t block_rows_, block_cols_;
  BlockNorm norm_;
};

// In every group of m consecutive entries along `dim` (default: the last),
// keeps the n of largest |x|, ties to the lower index (blocking; 1 <= n <= m
// <= 256; m must divide that dim). Fits format "nm" when grouping along the
// last dim (dim = -1) with the same m and at least n slots; "nm" options left
// at 0 mean this sparsifier's n and m. Transposable: a 2-D tensor's mask is
// n:m along its columns too, on every m x m tile (the tile's best such
// pattern by kept |x|, sparse/nm_transposable.h), so that W^T is n:m as well
// (m <= 4, dim -1).
class NmSparsifier : public Sparsifier {
 public:
  NmSparsifier(int64_t n, int64_t m, int64_t dim = -1, bool transposable = false);
  std::string describe() const override;
  SparsifierKind kind() const override { return SparsifierKind::kBlocking; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;
  std::string format_mismatch(const OutputFormat& format) const override;
  std::string shape_mismatch(const Shape& shape) const override;
  Tensor apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const override;
  int64_t n() const { return n_; }
  int64_t m() const { return m_; }
  int64_t dim() const { return dim_; }
  bool transposable() const { return transposable_; }

 private:
  int64_t n_, m_, dim_;
  bool transposable_;
};

// Movement pruning (Sanh et al., 2020): scores S accumulate -weight * grad
// over steps (accumulate()); keep_mask(x) keeps exactly
// kept_count(sparsity, numel) entries of largest score (not of |score|),
// ties to the lower index (materializing). x must have the scores' shape;
// before the first accumulate() keep_mask throws. Scores are f64 for f64
// weights, else f32, on the weight's device.
class MovementSparsifier : public Sparsifier {
 public:
  explicit MovementSparsifier(double sparsity);
  std::string describe() const override;
  SparsifierKind kind() const override { return SparsifierKind::kMaterializing; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override;

  // S += -weight * grad (any formats, the same shape and device).
  void accumulate(const Tensor& weight, const Tensor& grad);
  // Forgets the scores (the next keep_mask needs an accumulate first).
  void reset();
  const Tensor& scores() const { return scores_; }  // undefined before accumulate
  int64_t steps() const { return steps_; }          // accumulate calls since reset

 private:
  double sparsity_;
  Tensor scores_;
  int64_t steps_ = 0;
};

}  // namespace coppice
