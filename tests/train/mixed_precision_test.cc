// train/mixed_precision.h: casting a model (dense and sparse parameters keep
// their formats and patterns), inputs, logits and scaled gradients.
#include "train/mixed_precision.h"

#include <gtest/gtest.h>

#include "autograd/autograd.h"
#include "sparse/sparse_impl.h"
#include "tests/train/train_test_util.h"

namespace coppice {
namespace {

TEST(MixedPrecision, CastParametersKeepsFormatsAndPatterns) {
  auto model = testing_train::make_mlp({12, 8, 3}, 1);
  testing_train::sparsify_weights(*model, 0.3, 2);
  const NamedParameters before = model->named_parameters();
  EXPECT_EQ(model_dtype(*model), DType::kF32);
  cast_parameters(*model, DType::kBF16);
  EXPECT_EQ(model_dtype(*model), DType::kBF16);
  for (const auto& [name, old] : before) {
    const Variable& p = model->parameter(name);
    EXPECT_EQ(p.dtype(), DType::kBF16) << name;
    EXPECT_EQ(p.value().format(), old.value().format()) << name;
    EXPECT_EQ(p.requires_grad(), old.requires_grad()) << name;
    EXPECT_EQ(p.name(), name);
    if (old.value().is_sparse()) { EXPECT_EQ(pattern_version(p.value()), pattern_version(old.value())) << name; }
    EXPECT_TRUE(allclose(to_dense(p.value()).to(DType::kF32), to_dense(old.value()), 1e-2, 1e-2)) << name;
  }
  // The model runs in bf16; its f32 logits carry gradients back to bf16 leaves.
  const Variable logits = logits_for_loss((*model)(Variable(cast_inputs(ones({4, 12}), model_dtype(*model)))));
  EXPECT_EQ(logits.dtype(), DType::kF32);
  sum(logits).backward();
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().dtype(), DType::kBF16) << name;
  }
}

TEST(MixedPrecision, InputsAndGradients) {
  EXPECT_EQ(cast_inputs(ones({2}), DType::kF16).dtype(), DType::kF16);
  const Tensor tokens = from_vector<int64_t>({1, 2});
  EXPECT_EQ(cast_inputs(tokens, DType::kBF16).dtype(), DType::kI64);  // token ids stay integers
  const Tensor g = full({3}, 1024.0, DType::kF16);
  const Tensor u = unscale_gradient(g, 1024.0);
  EXPECT_EQ(u.dtype(), DType::kF32);
  EXPECT_EQ(u.to_vector<float>()[0], 1.0f);
  EXPECT_TRUE(unscale_gradient(g, 1.0).is_same(g));
}

}  // namespace
}  // namespace coppice
