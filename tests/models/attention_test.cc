// Attention: the patterns, the differentiable SDDMM scores and sparse row
// softmax (float64 gradchecks), multi-head attention dense (plain and causal)
// and with sparse local / block patterns (gradchecks, and agreement with
// dense attention under the same mask), and the pre-norm transformer block
// (with either GELU form).
#include "models/attention.h"

#include <gtest/gtest.h>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "models/sparse_attention.h"
#include "sparse/convert.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "tests/models/test_util.h"

namespace coppice {
namespace {

using testing::error_of;
using testing::gradcheck_module;

const LayerOptions kF64{DType::kF64};

Tensor randn64(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, DType::kF64, gen);
}

AttentionPattern local(int64_t window, bool causal) { return {AttentionPattern::Kind::kLocal, window, 0, causal}; }
AttentionPattern block(int64_t b, bool causal) { return {AttentionPattern::Kind::kBlock, 0, b, causal}; }

TEST(AttentionPattern, Masks) {
  Tensor m = attention_mask(local(2, true), 4);
  EXPECT_EQ(m.to(DType::kF64).to_vector<double>(),
            (std::vector<double>{1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1}));
  Tensor l = attention_mask(local(2, false), 3);
  EXPECT_EQ(l.to(DType::kF64).to_vector<double>(), (std::vector<double>{1, 1, 0, 1, 1, 1, 0, 1, 1}));
  Tensor b = attention_mask(block(2, false), 4);
  EXPECT_EQ(b.to(DType::kF64).to_vector<double>(),
            (std::vector<double>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1}));
  Tensor p = attention_pattern(local(2, true), 4, DType::kF64);
  EXPECT_EQ(p.format(), "csr");
  EXPECT_EQ(nnz(p), 7);
  EXPECT_TRUE(allclose(to_dense(with_values(p, ones({7}, DType::kF64))), m.to(DType::kF64)));
  EXPECT_NE(error_of([] { attention_pattern(local(0, true), 4); }).find("window > 0"), std::string::npos);
  EXPECT_NE(error_of([] { attention_kind_from_name("strided"); }).find("known: dense, local, block"),
            std::string::npos);
  EXPECT_EQ(local(3, true).describe(), "local(window=3, causal)");
}

// Global tokens: row 0 and column 0 all attended on top of the block
// diagonal (with causal, still only keys j <= i), the same as CSR and as a
// mask; block_sparse and negative counts are refused.
TEST(AttentionPattern, GlobalTokens) {
  AttentionPattern p = block(2, false);
  p.global_tokens = 1;
  EXPECT_EQ(p.describe(), "block(block=2, global=1)");
  const std::vector<double> global_block{1, 1, 1, 1, 1,  //
                                         1, 1, 0, 0, 0,  //
                                         1, 0, 1, 1, 0,  //
                                         1, 0, 1, 1, 0,  //
                                         1, 0, 0, 0, 1};
  EXPECT_EQ(attention_mask(p, 5).to(DType::kF64).to_vector<double>(), global_block);
  AttentionPattern c = block(2, true);
  c.global_tokens = 1;
  EXPECT_EQ(c.describe(), "block(block=2, causal, global=1)");
  const std::vector<double> global_block_causal{1, 0, 0, 0, 0,  //
                                                1, 1, 0, 0, 0,  //
                                                1, 0, 1, 0, 0,  //
                                                1, 0, 1, 1, 0,  //
                                                1, 0, 0, 0, 1};
  EXPECT_EQ(attention_mask(c, 5).to(DType::kF64).to_vector<double>(), global_block_causal);
  AttentionPattern l = local(1, false);
  l.global_tokens = 2;
  EXPECT_EQ(l.describe(), "local(window=1, global=2)");
  EXPECT_EQ(attention_mask(l, 4).to(DType::kF64).to_vector<double>(),
            (std::vector<double>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1}));
  for (const AttentionPattern& q : {p, c, l}) {
    for (int64_t t : {1, 5, 9}) {
      Tensor csr = attention_pattern(q, t, DType::kF64);
      Tensor mask = attention_mask(q, t).to(DType::kF64);
      EXPECT_EQ(nnz(csr), static_cast<int64_t>(sum(mask).item())) << q.describe() << " T " << t;
      EXPECT_TRUE(allclose(to_dense(with_values(csr, ones({nnz(csr)}, DType::kF64))), mask)) << q.describe();
    }
  }
  EXPECT_EQ(block(2, true).describe(), "block(block=2, causal)");  // unchanged without global tokens
  EXPECT_EQ(AttentionPattern{}.describe(), "dense()");
  AttentionPattern negative = block(2, false);
  negative.global_tokens = -1;
  EXPECT_NE(error_of([&] { attention_mask(negative, 4); }).find("global_tokens must be >= 0, got -1"),
            std::string::npos);
  AttentionPattern bs{AttentionPattern::Kind::kBlockSparse, 1, 2, true, 2};
  bs.global_tokens = 1;
  const std::string e = error_of([&] { block_sparse_keep(bs, 6); });
  EXPECT_NE(e.find("block_sparse does not take global_tokens"), std::string::npos) << e;
}

// Multi-head attention (CSR path) on a block pattern with a global token:
// gradchecks, token 0's output depends on every token, and the last token's
// only on its block and token 0.
TEST(MultiheadAttention, GlobalTokenSeesEveryToken) {
  AttentionPattern p = block(2, false);
  p.global_tokens = 1;
  Generator gen(21);
  MultiheadAttention attn(8, 2, p, 0.0, kF64, gen);
  const Tensor x = randn64({1, 6, 8}, 22);
  EXPECT_GRADCHECK_OK(gradcheck_module(attn, Variable(x, true)));
  auto depends_on = [&](int64_t token) {
    Variable xv(x, true);
    sum(select(select(attn.forward(xv), 0, 0), 0, token)).backward();
    std::vector<bool> on;
    for (int64_t j = 0; j < 6; ++j) on.push_back(sum(abs(xv.grad().select(1, j))).item() > 0.0);
    return on;
  };
  EXPECT_EQ(depends_on(0), (std::vector<bool>{true, true, true, true, true, true}));
  EXPECT_EQ(depends_on(5), (std::vector<bool>{true, false, false, false, true, true}));
}

TEST(AttentionPattern, BlockDiagonalCopies) {
  Tensor p = attention_pattern(local(2, true), 3, DType::kF64);
  Tensor big = block_diagonal_pattern(p, 3);
  EXPECT_EQ(big.shape(), (Shape{9, 9}));
  EXPECT_EQ(nnz(big), 3 * nnz(p));
  Tensor mask = to_dense(with_values(big, ones({nnz(big)}, DType::kF64)));
  Tensor small = attention_mask(local(2, true), 3).to(DType::kF64);
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_TRUE(allclose(mask.narrow(0, 3 * b, 3).narrow(1, 3 * b, 3), small));
    if (b > 0) { EXPECT_EQ(sum(mask.narrow(0, 3 * b, 3).narrow(1, 0, 3 * b)).item(), 0.0); }
  }
  EXPECT_TRUE(block_diagonal_pattern(p, 1).is_same(p));
}

TEST(SparseRowSoftmax, ValuesAndGradcheck) {
  Tensor pattern = attention_pattern(local(3, false), 5, DType::kF64);
  Tensor x = with_values(pattern, randn64({nnz(pattern)}, 1));
  Variable y = sparse_row_softmax(Variable(x));
  EXPECT_EQ(y.value().format(), "csr");
  EXPECT_EQ(pattern_version(y.value()), pattern_version(x));
  // Against a dense softmax with the unstored entries at -inf.
  Tensor dense = where(attention_mask(local(3, false), 5), to_dense(x),
                       full({5, 5}, -std::numeric_limits<double>::infinity(), DType::kF64));
  EXPECT_TRUE(allclose(to_dense(y.value()), softmax(dense, 1), 1e-12, 1e-12));
  EXPECT_GRADCHECK_OK(
      gradcheck([](const std::vector<Variable>& in) { return sparse_row_softmax(in[0]); }, {Variable(x, true)}));
  // A row without entries stays empty.
  Tensor gap = sparse_csr(from_vector<int32_t>({0, 2, 2, 3}), from_vector<int32_t>({0, 2, 1}),
                          from_vector<double>({1.0, 2.0, 3.0}), {3, 3});
  EXPECT_TRUE(allclose(values(sparse_row_softmax(Variable(gap)).value()),
                       from_vector<double>({1 / (1 + std::exp(1.0)), std::exp(1.0) / (1 + std::exp(1.0)), 1.0})));
  EXPECT_GRADCHECK_OK(
      gradcheck([](const std::vector<Variable>& in) { return sparse_row_softmax(in[0]); }, {Variable(gap, true)}));
  EXPECT_NE(error_of([] { sparse_row_softmax(Variable(randn({2, 2}))); }).find("CSR"), std::string::npos);
}

TEST(SampledScores, MatchesDenseAndGradcheck) {
  Tensor pattern = attention_pattern(block(2, true), 6, DType::kF64);
  Variable q(randn64({6, 3}, 2), true), k(randn64({6, 3}, 3), true);
  Variable s = sampled_scores(q, k, pattern);
  EXPECT_EQ(pattern_version(s.value()), pattern_version(pattern));
  Tensor dense = matmul(q.value(), k.value().t());
  EXPECT_TRUE(
      allclose(to_dense(s.value()), where(attention_mask(block(2, true), 6), dense, zeros_like(dense)), 1e-12, 1e-12));
  EXPECT_GRADCHECK_OK(
      gradcheck([pattern](const std::vector<Variable>& in) { return sampled_scores(in[0], in[1], pattern); }, {q, k}));
  // The whole sparse attention chain.
  Variable v(randn64({6, 3}, 4), true);
  EXPECT_GRADCHECK_OK(gradcheck(
      [pattern](const std::vector<Variable>& in) {
        return matmul(sparse_row_softmax(sampled_scores(in[0], in[1], pattern)), in[2]);
      },
      {q, k, v}));
}

TEST(MultiheadAttention, DenseShapesAndGradcheck) {
  Generator gen(5);
  MultiheadAttention attn(8, 2, {}, 0.0, kF64, gen);
  Variable x(randn64({2, 3, 8}, 6), true);
  EXPECT_EQ(attn.forward(x).shape(), (Shape{2, 3, 8}));
  EXPECT_GRADCHECK_OK(gradcheck_module(attn, x));
  std::vector<std::string> names;
  for (const auto& [n, p] : attn.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  EXPECT_NE(error_of([] { MultiheadAttention bad(10, 3); }).find("multiple of heads"), std::string::npos);
}

TEST(MultiheadAttention, CausalDoesNotLookAhead) {
  Generator gen(7);
  MultiheadAttention attn(8, 2, {AttentionPattern::Kind::kDense, 0, 0, true}, 0.0, kF64, gen);
  Tensor x = randn64({1, 4, 8}, 8);
  Tensor y = attn.forward(Variable(x)).value();
  Tensor x2 = x.clone();
  x2.select(1, 3).fill_(5.0);  // changing the last token changes only the last output
  Tensor y2 = attn.forward(Variable(x2)).value();
  EXPECT_TRUE(allclose(y.narrow(1, 0, 3), y2.narrow(1, 0, 3), 1e-12, 1e-12));
  EXPECT_FALSE(allclose(y.narrow(1, 3, 1), y2.narrow(1, 3, 1)));
  EXPECT_GRADCHECK_OK(gradcheck_module(attn, Variable(randn64({2, 3, 8}, 9), true)));
}

// Sparse attention equals dense attention under the pattern's mask: for a
// pattern that covers every pair (dense) and, through a causal window that
// covers the whole sequence, dense causal attention.
TEST(MultiheadAttention, SparseMatchesDenseAndGradcheck) {
  for (const AttentionPattern& sparse : {local(2, true), local(2, false), block(2, false), block(2, true)}) {
    Generator g1(11);
    MultiheadAttention sp(8, 2, sparse, 0.0, kF64, g1);
    Variable x(randn64({2, 5, 8}, 12), true);
    EXPECT_EQ(sp.forward(x).shape(), (Shape{2, 5, 8}));
    EXPECT_GRADCHECK_OK(gradcheck_module(sp, x));
  }
  Generator g1(13), g2(13);
  MultiheadAttention sp(8, 2, local(6, true), 0.0, kF64, g1);
  MultiheadAttention dense(8, 2, {AttentionPattern::Kind::kDense, 0, 0, true}, 0.0, kF64, g2);
  Tensor x = randn64({2, 6, 8}, 14);
  EXPECT_TRUE(allclose(sp.forward(Variable(x)).value(), dense.forward(Variable(x)).value(), 1e-10, 1e-10));
}

TEST(MultiheadAttention, DropoutOnSparseAndDenseWeights) {
  for (const AttentionPattern& pattern : {local(2, true), AttentionPattern{}}) {
    Generator gen(17);
    MultiheadAttention attn(8, 2, pattern, 0.5, kF64, gen);
    Variable x(randn64({2, 4, 8}, 18), true);
    Tensor a = attn.forward(x).value(), b = attn.forward(x).value();
    EXPECT_FALSE(allclose(a, b)) << pattern.describe();  // fresh masks in training
    sum(attn.forward(x)).backward();
    EXPECT_TRUE(x.grad().defined());
    attn.eval();
    EXPECT_TRUE(allclose(attn.forward(x).value(), attn.forward(x).value()));
  }
}

// Runs `block` fused (its forward) and unfused (its submodules apart: ln1,
// attn, the residual add, ln2, the mlp Sequential, the second add) on one
// input, with non-trivial norms, and expects the output and every gradient
// to agree to 1e-12; returns the fused output.
Tensor expect_fused_equals_unfused(TransformerBlock& block) {
  for (const auto& [name, p] : block.named_parameters()) {  // non-trivial norms
    if (name.rfind("ln", 0) == 0) block.set_parameter(name, Variable(randn64(p.shape(), name.size() + 40), true));
  }
  const Tensor xv = randn64({2, 5, 8}, 18), seed = randn64({2, 5, 8}, 19);
  auto run = [&](bool fused) {
    block.zero_grad();
    Variable x(xv, true);
    Variable out;
    if (fused) {
      out = block.forward(x);
    } else {
      Variable a = block.submodule("attn").forward(block.submodule("ln1").forward(x));
      Variable h = add(x, a);
      out = add(h, block.submodule("mlp").forward(block.submodule("ln2").forward(h)));
    }
    out.backward(seed);
    std::vector<Tensor> results = {out.value(), x.grad()};
    for (const auto& [name, p] : block.named_parameters()) results.push_back(p.grad().clone());
    return results;
  };
  const std::vector<Tensor> fused = run(true), plain = run(false);
  EXPECT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size() && i < plain.size(); ++i) {
    EXPECT_TRUE(fused[i].defined() && plain[i].defined()) << i;
    if (fused[i].defined() && plain[i].defined()) {
      EXPECT_LE(max_abs_diff(fused[i], plain[i]), 1e-12) << "result " << i;
    }
  }
  return fused[0];
}

TEST(TransformerBlock, ShapeAndGradcheck) {
  Generator gen(15);
  TransformerBlock block({8, 2, 16, {}, 0.0}, kF64, gen);
  Variable x(randn64({2, 3, 8}, 16), true);
  EXPECT_EQ(block.forward(x).shape(), (Shape{2, 3, 8}));
  std::vector<std::string> names;
  for (const auto& [n, p] : block.named_parameters()) names.push_back(n);
  EXPECT_EQ(names.front(), "ln1.weight");
  EXPECT_EQ(names.back(), "mlp.fc2.bias");
  EXPECT_EQ(names.size(), 12u);
  EXPECT_GRADCHECK_OK(gradcheck_module(block, x));
  TransformerBlock sparse({8, 2, 16, local(2, true), 0.0}, kF64, gen);
  EXPECT_GRADCHECK_OK(gradcheck_module(sparse, x));
  TransformerBlock tanh_gelu({8, 2, 16, {}, 0.0, GeluForm::kTanh}, kF64, gen);
  EXPECT_GRADCHECK_OK(gradcheck_module(tanh_gelu, x));
}

// The block fuses its residual add into ln2 (LayerNorm::forward_add) and its
// MLP into one node (Linear::forward_gelu_mlp): with either GELU form its
// output and every gradient are those of the unfused ops, run here through
// its own submodules (the mlp's act a GELU of the block's form), in f64 to
// 1e-12. The same weights give other values with the other form.
TEST(TransformerBlock, FusedResidualNormEqualsUnfused) {
  std::vector<Tensor> outputs;
  for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    SCOPED_TRACE(form == GeluForm::kTanh ? "tanh" : "erf");
    Generator gen(17);
    TransformerBlock block({8, 2, 16, {}, 0.0, form}, kF64, gen);
    EXPECT_EQ(dynamic_cast<GELU&>(block.submodule("mlp.act")).form(), form);
    outputs.push_back(expect_fused_equals_unfused(block));
  }
  EXPECT_GT(max_abs_diff(outputs[0], outputs[1]), 1e-6);
}

}  // namespace
}  // namespace coppice
