// The streaming built-ins (builtin.h): keep-all, threshold, random fraction.
// Into "dense" they run one fused pass (mask_ops.h's *_values).
#include <string>

#include "sparsifiers/builtin.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace coppice {

Tensor KeepAllSparsifier::keep_mask(const Tensor& x, const SparsifyContext&) const {
  return ones(x.shape(), TensorOptions(DType::kBool, x.device()));
}

Tensor KeepAllSparsifier::apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const {
  if (format.name == "dense") return to_dense(x);
  return Sparsifier::apply(x, format, ctx);
}

ThresholdSparsifier::ThresholdSparsifier(double threshold) : threshold_(threshold) {
  COPPICE_CHECK(threshold >= 0.0, "threshold: threshold must be >= 0, got ", threshold);
}

std::string ThresholdSparsifier::describe() const { return str_cat("threshold(threshold=", threshold_, ")"); }

Tensor ThresholdSparsifier::keep_mask(const Tensor& x, const SparsifyContext&) const {
  return sparsify::threshold_mask(to_dense(x), threshold_, describe());
}

Tensor ThresholdSparsifier::apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const {
  if (format.name == "dense") return sparsify::threshold_values(to_dense(x), threshold_, describe());
  return Sparsifier::apply(x, format, ctx);
}

RandomFractionSparsifier::RandomFractionSparsifier(double sparsity, bool rescale)
    : sparsity_(sparsity), rescale_(rescale) {
  COPPICE_CHECK(sparsity >= 0.0 && sparsity <= 1.0, "random: sparsity must be in [0, 1], got ", sparsity);
  COPPICE_CHECK(!(rescale && sparsity == 1.0), "random: sparsity 1 cannot be rescaled (1 / (1 - sparsity))");
}

std::string RandomFractionSparsifier::describe() const {
  return str_cat("random(sparsity=", sparsity_, ", rescale=", rescale_ ? "true" : "false", ")");
}

double RandomFractionSparsifier::value_scale() const { return rescale_ ? 1.0 / (1.0 - sparsity_) : 1.0; }

namespace {
Generator draw_generator(const SparsifyContext& ctx) {
  return Generator::keyed(ctx.seed, ctx.purpose, ctx.step, ctx.rank);
}
}  // namespace

Tensor RandomFractionSparsifier::keep_mask(const Tensor& x, const SparsifyContext& ctx) const {
  Generator gen = draw_generator(ctx);
  const uint64_t offset = gen.advance();
  return sparsify::random_mask(to_dense(x), sparsity_, gen.seed(), offset, describe());
}

Tensor RandomFractionSparsifier::apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const {
  if (format.name != "dense") return Sparsifier::apply(x, format, ctx);
  Generator gen = draw_generator(ctx);
  const uint64_t offset = gen.advance();
  return sparsify::random_values(to_dense(x), sparsity_, gen.seed(), offset, value_scale(), describe());
}

}  // namespace coppice
