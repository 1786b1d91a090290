// The GPT decoder (models/gpt.h): its parameters, tied and untied; a float64
// gradcheck through the whole model (the tied embedding receives the
// embedding's and the output's gradients); its blocks run as a residual
// stream against the blocks run in turn; the tanh GELU form against the
// model's ops run apart; block-sparse attention against the masked softmax it
// stands for; a tiny GPT that learns on the CPU; the zoo's options.
#include "models/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "models/sparse_attention.h"
#include "models/zoo.h"
#include "tests/models/test_util.h"

namespace coppice {
namespace {

using testing::error_of;
using testing::gradcheck_module;

const LayerOptions kF64{DType::kF64};

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, v] : m.named_parameters()) names.push_back(name);
  return names;
}

GPTOptions tiny(bool tied) {
  GPTOptions o;
  o.vocab_size = 5;
  o.context = 6;
  o.dim = 4;
  o.layers = 1;
  o.heads = 2;
  o.mlp_hidden = 8;
  o.tie_weights = tied;
  return o;
}

Variable tokens(const std::vector<int64_t>& ids, int64_t n) {
  return Variable(from_vector(ids, {n, static_cast<int64_t>(ids.size()) / n}));
}

// The logits `forward` returns and every parameter's gradient after
// backward(seed), from zeroed gradients.
std::vector<Tensor> logits_and_grads(GPT& model, const Tensor& seed, const std::function<Variable()>& forward) {
  model.zero_grad();
  Variable logits = forward();
  logits.backward(seed);
  std::vector<Tensor> out = {logits.value()};
  for (const auto& [name, p] : model.named_parameters()) out.push_back(p.grad().clone());
  return out;
}

void expect_equal_to_1e12(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(max_abs_diff(a[i], b[i]), 1e-12) << "result " << i;
}

TEST(GPT, ParametersTiedAndUntied) {
  Generator gen(1);
  GPT tied(tiny(true), kF64, gen);
  const std::vector<std::string> names = names_of(tied);
  EXPECT_EQ(names[0], "pos_embed");  // the model's own parameter, then its children's
  EXPECT_EQ(names[1], "tok_embed.weight");
  EXPECT_EQ(std::count(names.begin(), names.end(), "blocks.0.attn.qkv.weight"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "head.weight"), 0);
  EXPECT_EQ(names.back(), "norm.bias");
  GPT untied(tiny(false), kF64, gen);
  EXPECT_EQ(names_of(untied).back(), "head.bias");
  EXPECT_EQ(names_of(untied).size(), names.size() + 2);
  Variable logits = tied.forward(tokens({0, 1, 2, 3, 4, 0}, 2));
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 5}));
  EXPECT_NE(error_of([&] {
              tied.forward(tokens({0, 1, 2, 3, 4, 0, 1}, 1));
            }).find("1 <= T <= context (6)"),
            std::string::npos);
}

TEST(GPT, GradcheckTiedAndUntied) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    Generator gen(2);
    GPT model(tiny(tied), kF64, gen);
    EXPECT_GRADCHECK_OK(gradcheck_module(model, tokens({0, 3, 1, 4, 2, 2}, 2)));
  }
}

// gelu kTanh: every block's act is GELU(kTanh), and the logits and every
// gradient equal those of the model's submodules run apart (each block's
// attention, residual adds and its mlp Sequential, whose act computes
// gelu_tanh), in f64 to 1e-12; the same weights with the exact GELU give
// other logits. The tanh model gradchecks.
TEST(GPT, TanhGeluIsTheComposite) {
  GPTOptions o = tiny(true);
  o.layers = 2;
  o.gelu = GeluForm::kTanh;
  Generator gen(6);
  GPT model(o, kF64, gen);
  for (int i = 0; i < 2; ++i) {
    const std::string act = "blocks." + std::to_string(i) + ".mlp.act";
    EXPECT_EQ(dynamic_cast<GELU&>(model.submodule(act)).form(), GeluForm::kTanh) << act;
  }
  const Variable x = tokens({0, 3, 1, 4, 2, 2, 1, 0}, 2);
  const Tensor seed = [] {
    Generator g(7);
    return randn({2, 4, 5}, DType::kF64, g);
  }();
  const std::vector<Tensor> whole = logits_and_grads(model, seed, [&] { return model.forward(x); });
  const std::vector<Tensor> apart = logits_and_grads(model, seed, [&] {
    Variable h = add(model.submodule("tok_embed").forward(x), slice(model.parameter("pos_embed"), 0, 0, 4));
    for (int i = 0; i < 2; ++i) {
      Module& b = model.submodule("blocks." + std::to_string(i));
      h = add(h, b.submodule("attn").forward(b.submodule("ln1").forward(h)));
      h = add(h, b.submodule("mlp").forward(b.submodule("ln2").forward(h)));
    }
    return linear(model.submodule("norm").forward(h), model.parameter("tok_embed.weight"));
  });
  expect_equal_to_1e12(whole, apart);
  o.gelu = GeluForm::kErf;
  Generator same(6);
  GPT exact(o, kF64, same);
  EXPECT_GT(max_abs_diff(exact.forward(x).value(), whole[0]), 1e-6);
  o.layers = 1;
  o.gelu = GeluForm::kTanh;
  GPT one(o, kF64, gen);
  EXPECT_GRADCHECK_OK(gradcheck_module(one, tokens({0, 3, 1, 4, 2, 2}, 2)));
}

// The model runs its blocks as a residual stream (each block's closing add
// folded into the next LayerNorm, TransformerBlock::forward_stream): the
// logits and every gradient equal those of the blocks' Sequential run in
// turn, each block adding its own output, in f64 to 1e-12 (three blocks,
// with a mixture of experts too).
TEST(GPT, StreamedBlocksEqualTheBlocksRunInTurn) {
  for (int64_t experts : {0, 2}) {
    SCOPED_TRACE(experts ? "moe" : "mlp");
    GPTOptions o = tiny(true);
    o.layers = 3;
    o.moe_experts = experts;
    Generator gen(11);
    GPT model(o, kF64, gen);
    const Variable x = tokens({0, 3, 1, 4, 2, 2, 1, 0}, 2);
    const Tensor seed = [] {
      Generator g(12);
      return randn({2, 4, 5}, DType::kF64, g);
    }();
    const std::vector<Tensor> streamed = logits_and_grads(model, seed, [&] { return model.forward(x); });
    const std::vector<Tensor> in_turn = logits_and_grads(model, seed, [&] {
      Variable h = add(model.submodule("tok_embed").forward(x), slice(model.parameter("pos_embed"), 0, 0, 4));
      h = model.submodule("norm").forward(model.submodule("blocks").forward(h));
      return linear(h, model.parameter("tok_embed.weight"));
    });
    expect_equal_to_1e12(streamed, in_turn);
  }
}

TEST(GPT, TiedEmbeddingGetsBothGradients) {
  Generator gen(3);
  GPT model(tiny(true), kF64, gen);
  // Token 4 is never an input: its embedding row's gradient comes from the output alone.
  Variable logits = model.forward(tokens({0, 1, 2}, 1));
  sum(logits).backward();
  const std::vector<double> g = model.parameter("tok_embed.weight").grad().to_vector<double>();
  double row4 = 0;
  for (int c = 0; c < 4; ++c) row4 += std::abs(g[4 * 4 + c]);
  EXPECT_GT(row4, 0.0);
}

// Block-sparse attention (fused, skipping blocks) against softmax over the
// same element mask, in f64: 3 blocks of 2 tokens, local window 1 block and
// every second block.
TEST(GPT, BlockSparseAttentionIsTheMaskedSoftmax) {
  AttentionPattern p{AttentionPattern::Kind::kBlockSparse, 1, 2, true, 2};
  EXPECT_EQ(p.describe(), "block_sparse(block=2, window=1, stride=2, causal)");
  const std::vector<bool> keep = block_sparse_keep(p, 6);
  // Query block 0 sees itself; 1 itself (also the strided block 1); 2 itself and the strided block 1.
  EXPECT_EQ(keep, (std::vector<bool>{true, false, false, false, true, false, false, true, true}));
  Generator gen(4);
  Tensor q = randn({3, 6, 4}, DType::kF64, gen), k = randn({3, 6, 4}, DType::kF64, gen),
         v = randn({3, 6, 4}, DType::kF64, gen);
  AttentionMask mask{true, attention_block_pattern(keep, 2, Device::cpu())};
  Tensor fused = attention(Variable(q), Variable(k), Variable(v), 0.5, mask).value();
  Tensor scores = mul(bmm(q, k.transpose(1, 2)), 0.5);
  Tensor m = attention_mask(p, 6).unsqueeze(0).expand(scores.shape());
  Tensor want = bmm(softmax(where(m, scores, full({}, -std::numeric_limits<double>::infinity(), DType::kF64)), -1), v);
  EXPECT_TRUE(allclose(fused, want, 1e-12, 1e-12));

  MultiheadAttention attn(8, 2, p, 0.0, kF64, gen);
  Variable x(randn({2, 6, 8}, DType::kF64, gen), true);
  EXPECT_GRADCHECK_OK(gradcheck_module(attn, x));
}

// A tiny GPT learns a repeating sequence on the CPU: the loss falls to a
// fraction of its start within a hundred plain SGD steps.
TEST(GPT, TinyModelLearns) {
  GPTOptions o;
  o.vocab_size = 6;
  o.context = 12;
  o.dim = 16;
  o.layers = 2;
  o.heads = 2;
  o.mlp_hidden = 32;
  Generator gen(5);
  GPT model(o, {}, gen);
  std::vector<int64_t> seq;
  for (int i = 0; i < 4 * 13; ++i) seq.push_back((i * 7 + i / 3) % 6);
  std::vector<int64_t> in, target;
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t < 12; ++t) {
      in.push_back(seq[b * 13 + t]);
      target.push_back(seq[b * 13 + t + 1]);
    }
  }
  const Variable x = tokens(in, 4);
  const Tensor y = from_vector(target, {48});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Variable loss = cross_entropy(reshape(model.forward(x), {48, 6}), y);
    if (step == 0) first = testing::item(loss);
    last = testing::item(loss);
    loss.backward();
    testing::sgd_step(model, 0.3);
  }
  EXPECT_LT(last, 0.3 * first) << "loss " << first << " -> " << last;
}

// Routed attention (sparse/attention/routing.h): every causal block routed
// is dense causal attention; no routed block leaves the diagonal and the
// first key block, the masked softmax of that keep; gradchecks; the zoo's
// option.
TEST(GPT, RoutedAttention) {
  AttentionPattern routed{AttentionPattern::Kind::kRouted, 1, 2, true};
  routed.top_k = 8;  // at least every causal block
  EXPECT_EQ(routed.describe(), "routed(block=2, window=1, top_k=8, causal)");
  AttentionPattern dense{AttentionPattern::Kind::kDense, 0, 0, true};
  Generator g1(6), g2(6), gx(7);
  MultiheadAttention all(8, 2, routed, 0.0, kF64, g1), reference(8, 2, dense, 0.0, kF64, g2);
  const Tensor x = randn({2, 7, 8}, DType::kF64, gx);
  EXPECT_TRUE(allclose(all.forward(Variable(x)).value(), reference.forward(Variable(x)).value(), 1e-12, 1e-12));

  routed.top_k = 0;  // the diagonal and the first block: a fixed mask
  Generator g3(6);
  MultiheadAttention fixed(8, 2, routed, 0.0, kF64, g3);
  std::vector<bool> keep(16, false);
  for (int64_t i = 0; i < 4; ++i) keep[i * 4] = keep[i * 4 + i] = true;
  const Tensor mask = block_keep_mask(keep, 2, 7, true, Device::cpu());
  // The reference: the same projections, the masked softmax.
  const Tensor qkv = linear(x, fixed.parameter("qkv.weight").value(), fixed.parameter("qkv.bias").value())
                         .reshape({2, 7, 3, 2, 4})
                         .permute({2, 0, 3, 1, 4})
                         .reshape({3, 4, 7, 4});
  const Tensor q = qkv.select(0, 0), k = qkv.select(0, 1), v = qkv.select(0, 2);
  Tensor scores = mul(bmm(q, k.transpose(1, 2)), 0.5);
  scores = where(mask.unsqueeze(0).expand(scores.shape()), scores,
                 full({}, -std::numeric_limits<double>::infinity(), DType::kF64));
  const Tensor o = bmm(softmax(scores, -1), v).reshape({2, 2, 7, 4}).permute({0, 2, 1, 3}).reshape({2, 7, 8});
  const Tensor want = linear(o, fixed.parameter("proj.weight").value(), fixed.parameter("proj.bias").value());
  EXPECT_TRUE(allclose(fixed.forward(Variable(x)).value(), want, 1e-12, 1e-12));

  routed.top_k = 1;
  Generator g4(8);
  MultiheadAttention one(8, 2, routed, 0.0, kF64, g4);
  EXPECT_GRADCHECK_OK(gradcheck_module(one, Variable(randn({2, 7, 8}, DType::kF64, gx), true)));
  EXPECT_NE(error_of([] {
              attention_mask(AttentionPattern{AttentionPattern::Kind::kRouted, 1, 2, true}, 4);
            }).find("has no fixed mask"),
            std::string::npos);

  ModulePtr m = make_model({"gpt",
                            {{"vocab_size", int64_t{7}},
                             {"context", int64_t{8}},
                             {"dim", int64_t{8}},
                             {"layers", int64_t{1}},
                             {"heads", int64_t{2}},
                             {"attention", std::string("routed")},
                             {"block", int64_t{2}},
                             {"routed_top_k", int64_t{1}}}});
  EXPECT_EQ(dynamic_cast<GPT&>(*m).options().pattern.describe(), "routed(block=2, window=1, top_k=1, causal)");
  const std::string e = error_of([] {
    make_model({"gpt",
                {{"dim", int64_t{8}},
                 {"heads", int64_t{2}},
                 {"attention", std::string("routed")},
                 {"routed_top_k", int64_t{-1}}}});
  });
  EXPECT_NE(e.find("option 'routed_top_k': must be in [0, "), std::string::npos) << e;
}

// moe_experts: every block's MLP a mixture of experts (models/moe.h), its
// parameters named blocks.<i>.moe.*, a float64 gradcheck through the whole
// model in eval mode (no load-balancing loss), the loss in training mode, and
// a tiny MoE GPT that learns with it.
TEST(GPT, MixtureOfExpertsBlocks) {
  GPTOptions o = tiny(true);
  o.moe_experts = 3;
  o.moe_top_k = 2;
  Generator gen(4);
  GPT m(o, kF64, gen);
  const std::vector<std::string> names = names_of(m);
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.0.moe.w1"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "blocks.0.mlp.fc1.weight"), names.end());
  EXPECT_EQ(m.parameter("blocks.0.moe.w1").shape(), (Shape{3 * 8, 4}));
  m.eval();
  GradcheckResult r = gradcheck_module(m, tokens({1, 2, 3, 4, 0, 2}, 2));
  EXPECT_TRUE(r.passed) << r.message;
  m.train();
  m.forward(tokens({1, 2, 3, 4, 0, 2}, 2));
  EXPECT_EQ(m.auxiliary_losses().size(), 1u);

  GPTOptions big;
  big.vocab_size = 6;
  big.context = 12;
  big.dim = 16;
  big.layers = 2;
  big.heads = 2;
  big.mlp_hidden = 32;
  big.moe_experts = 4;
  Generator gen2(5);
  GPT model(big, {}, gen2);
  std::vector<int64_t> in, target;
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t < 12; ++t) {
      const int i = b * 13 + t;
      in.push_back((i * 7 + i / 3) % 6);
      target.push_back(((i + 1) * 7 + (i + 1) / 3) % 6);
    }
  }
  const Variable x = tokens(in, 4);
  const Tensor y = from_vector(target, {48});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Variable loss = cross_entropy(reshape(model.forward(x), {48, 6}), y);
    if (step == 0) first = testing::item(loss);
    last = testing::item(loss);
    Variable objective = loss;
    for (const Variable& aux : model.auxiliary_losses()) objective = add(objective, aux);
    objective.backward();
    testing::sgd_step(model, 0.3);
  }
  EXPECT_LT(last, 0.3 * first) << "loss " << first << " -> " << last;
}

TEST(GPT, ZooOptions) {
  ModulePtr m = make_model({"gpt",
                            {{"vocab_size", int64_t{7}},
                             {"context", int64_t{8}},
                             {"dim", int64_t{8}},
                             {"layers", int64_t{1}},
                             {"heads", int64_t{2}},
                             {"attention", std::string("block_sparse")},
                             {"block", int64_t{4}},
                             {"tie_weights", false}}});
  EXPECT_EQ(m->parameter("head.weight").shape(), (Shape{7, 8}));
  const ModelInput in = model_input({"gpt", {{"context", int64_t{8}}, {"vocab_size", int64_t{7}}}});
  EXPECT_EQ(in.kind, InputKind::kTokens);
  EXPECT_EQ(in.classes, 7);
  std::string e = error_of([] { make_model({"gpt", {{"dim", int64_t{10}}, {"heads", int64_t{4}}}}); });
  EXPECT_NE(e.find("option 'heads': must divide dim (10), got 4"), std::string::npos) << e;
  e = error_of([] { make_model({"gpt", {{"attention", std::string("local")}}}); });
  EXPECT_NE(e.find("known: dense, block_sparse"), std::string::npos) << e;
  e = error_of([] { make_model({"gpt", {{"tie_weights", int64_t{1}}}}); });
  EXPECT_NE(e.find("option 'tie_weights': must be true or false, got a integer"), std::string::npos) << e;
  e = error_of([] { make_model({"gpt", {{"stride", int64_t{-1}}}}); });
  EXPECT_NE(e.find("option 'stride': must be in [0, "), std::string::npos) << e;
  e = error_of([] { make_model({"gpt", {{"dim", int64_t{8}}, {"heads", int64_t{2}}, {"moe_experts", int64_t{-1}}}}); });
  EXPECT_NE(e.find("option 'moe_experts': must be in [0, 1024] (0: a dense MLP), got -1"), std::string::npos) << e;
  e = error_of([] {
    make_model(
        {"gpt", {{"dim", int64_t{8}}, {"heads", int64_t{2}}, {"moe_experts", int64_t{2}}, {"moe_top_k", int64_t{3}}}});
  });
  EXPECT_NE(e.find("option 'moe_top_k': must be at most moe_experts (2), got 3"), std::string::npos) << e;
}

// gelu: "erf" (the default) or "tanh", into GPTOptions and every block's act;
// any other value is a ModelOptionError naming the option, the value and the
// accepted ones.
TEST(GPT, ZooGeluOption) {
  const ModelConfig small{"gpt",
                          {{"vocab_size", int64_t{7}},
                           {"context", int64_t{8}},
                           {"dim", int64_t{8}},
                           {"layers", int64_t{2}},
                           {"heads", int64_t{2}}}};
  const std::vector<std::pair<std::string, GeluForm>> cases = {
      {"", GeluForm::kErf}, {"erf", GeluForm::kErf}, {"tanh", GeluForm::kTanh}};  // "": not given
  for (const auto& [value, form] : cases) {
    SCOPED_TRACE(value);
    ModelConfig c = small;
    if (!value.empty()) c.options["gelu"] = value;
    ModulePtr m = make_model(c);
    EXPECT_EQ(dynamic_cast<GPT&>(*m).options().gelu, form);
    for (const char* act : {"blocks.0.mlp.act", "blocks.1.mlp.act"}) {
      EXPECT_EQ(dynamic_cast<GELU&>(m->submodule(act)).form(), form) << act;
    }
  }
  const std::vector<std::string> known = model_option_names("gpt");
  EXPECT_NE(std::find(known.begin(), known.end(), "gelu"), known.end());
  ModelConfig bad = small;
  bad.options["gelu"] = std::string("exact");
  try {
    make_model(bad);
    ADD_FAILURE() << "gelu: exact was accepted";
  } catch (const ModelOptionError& e) {
    EXPECT_EQ(e.option(), "gelu");
    EXPECT_EQ(std::string(e.what()), "model 'gpt': option 'gelu': is 'exact'; known: erf, tanh");
  }
  bad.options["gelu"] = true;
  EXPECT_NE(error_of([&] { make_model(bad); }).find("option 'gelu': must be a string, got a bool"), std::string::npos);
  EXPECT_THROW(model_input(bad), ModelOptionError);
}

}  // namespace
}  // namespace coppice
