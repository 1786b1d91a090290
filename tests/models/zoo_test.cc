// The zoo: each model runs forward and backward on a tiny batch, and its loss
// drops over 30 plain SGD steps (p.values -= lr * grad, no optim/) on
// synthetic data; the sparse variants (CSR MLP, sparse-attention ViT and LM)
// train the same way. The MLP's fused hidden layers equal the composite. The
// transformers' gelu option.
#include "models/zoo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "autograd/autograd.h"
#include "models/attention.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/generator.h"
#include "tests/models/test_util.h"

namespace coppice {
namespace {

using testing::sgd_step;

// Losses of `steps` SGD steps on one fixed batch.
std::vector<double> train(Module& m, const Variable& x, const Tensor& target, double lr, int steps = 30) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    Variable logits = m.forward(x);
    if (logits.dim() == 3) logits = reshape(logits, {-1, logits.size(2)});
    Variable loss = cross_entropy(logits, target.reshape({-1}));
    losses.push_back(loss.item());
    loss.backward();
    for (const auto& [name, p] : m.named_parameters()) {
      EXPECT_TRUE(p.grad().defined()) << name << " got no gradient";
    }
    sgd_step(m, lr);
  }
  return losses;
}

void expect_drops(const std::vector<double>& losses, double factor) {
  ASSERT_FALSE(losses.empty());
  std::cout << "loss " << losses.front() << " -> " << losses.back() << "\n";
  EXPECT_TRUE(std::isfinite(losses.back()));
  EXPECT_LT(losses.back(), factor * losses.front()) << "first " << losses.front() << ", last " << losses.back();
}

Tensor images(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return randn({n, 1, 28, 28}, DType::kF32, gen);
}
Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  Generator gen(seed);
  return randint(0, classes, {n}, DType::kI64, gen);
}

TEST(Zoo, MlpLenet300100) {
  auto mlp = make_model({"mlp", {{"seed", int64_t{1}}}});
  Variable x(images(16, 2));
  EXPECT_EQ(mlp->forward(x).shape(), (Shape{16, 10}));
  expect_drops(train(*mlp, x, labels(16, 10, 3), 0.5), 0.5);
}

TEST(Zoo, MlpWithCsrWeights) {
  auto mlp = make_model({"mlp", {{"seed", int64_t{4}}}});
  SparsityBuilder b;
  b.regex("fc[12]\\.weight").format("csr").density(0.1);
  mlp->apply_sparsity(b.schedule());
  const uint64_t version = pattern_version(mlp->parameter("fc1.weight").value());
  Variable x(images(16, 5));
  expect_drops(train(*mlp, x, labels(16, 10, 6), 0.5), 0.5);
  EXPECT_EQ(mlp->parameter("fc1.weight").value().format(), "csr");
  EXPECT_EQ(pattern_version(mlp->parameter("fc1.weight").value()), version);  // trained in its pattern
}

// The hidden layers run Linear::forward_relu: the model computes exactly
// relu(linear(...)) layer by layer, values and gradients; an output rule on a
// layer still sees its pre-activation (forward_relu does not fuse there).
TEST(Zoo, MlpHiddenLayersAreReluOfLinear) {
  Generator gen(11);
  MLP mlp({16, 32, 8, 4}, LayerOptions{DType::kF64}, gen);
  const Tensor xv = randn({5, 16}, DType::kF64, gen);
  auto composite = [&] {
    Variable h(xv);
    for (const char* name : {"fc1", "fc2"}) h = relu(mlp.submodule(name).forward(h));
    return mlp.submodule("fc3").forward(h);
  };
  auto values_and_grads = [&](Variable y) {
    mlp.zero_grad();
    sum(y).backward();
    std::vector<std::vector<double>> out{y.value().to_vector<double>()};
    for (const auto& [name, p] : mlp.named_parameters()) out.push_back(to_dense(p.grad()).to_vector<double>());
    return out;
  };
  EXPECT_EQ(values_and_grads(mlp.forward(Variable(xv))), values_and_grads(composite()));

  SparsityBuilder b;
  b.regex("fc1\\.weight").format("bsr", FormatOptions::block(2)).density(0.5);
  b.output("fc2").forward({"magnitude", {{"sparsity", "0.5"}}}, "csr");
  mlp.apply_sparsity(b.schedule());
  EXPECT_EQ(nnz(mlp.submodule("fc2").forward(Variable(randn({5, 32}, DType::kF64, gen))).value()), 5 * 8 / 2);
  EXPECT_EQ(values_and_grads(mlp.forward(Variable(xv))), values_and_grads(composite()));
}

TEST(Zoo, Lenet5) {
  auto net = make_model({"lenet5", {{"seed", int64_t{7}}}});
  Variable x(images(8, 8));
  EXPECT_EQ(net->forward(x).shape(), (Shape{8, 10}));
  expect_drops(train(*net, x, labels(8, 10, 9), 0.2), 0.7);
}

// The wider CNN: its layers' shapes, the matrix layout's BSR weights
// (32x32 blocks), training, and a depth that pools the image away refused.
TEST(Zoo, ConvNetDenseAndWithBsrConvolutions) {
  auto net = make_model({"cnn", {{"seed", int64_t{8}}, {"channels", std::string("8,32,64")}, {"hidden", int64_t{32}}}});
  EXPECT_EQ(net->parameter("conv2.weight").shape(), (Shape{32, 8, 3, 3}));
  EXPECT_EQ(net->parameter("fc1.weight").shape(), (Shape{32, 64 * 3 * 3}));
  Variable x(images(8, 16));
  EXPECT_EQ(net->forward(x).shape(), (Shape{8, 10}));
  expect_drops(train(*net, x, labels(8, 10, 17), 0.1), 0.7);

  auto sparse = make_model({"cnn",
                            {{"seed", int64_t{8}},
                             {"channels", std::string("8,32,64")},
                             {"hidden", int64_t{32}},
                             {"conv_weight", std::string("matrix")}}});
  EXPECT_EQ(sparse->parameter("conv3.weight").shape(), (Shape{64, 32 * 9}));
  SparsityBuilder b;
  b.regex("conv3\\.weight").format("bsr", FormatOptions::block(32)).density(0.5);
  sparse->apply_sparsity(b.schedule());
  EXPECT_EQ(sparse->parameter("conv3.weight").value().format(), "bsr");
  expect_drops(train(*sparse, x, labels(8, 10, 17), 0.1), 0.7);

  EXPECT_THROW(make_model({"cnn", {{"channels", std::string("8,8,8,8,8")}}}), ModelOptionError);
  EXPECT_THROW(make_model({"cnn", {{"channels", std::string("8,x")}}}), ModelOptionError);
}

TEST(Zoo, VisionTransformer) {
  auto vit = make_model({"vit", {{"seed", int64_t{10}}}});  // 7x7 patches, 16 tokens + class token, dim 64
  EXPECT_EQ(vit->parameter("pos_embed").shape(), (Shape{1, 17, 64}));
  Variable x(images(8, 11));
  EXPECT_EQ(vit->forward(x).shape(), (Shape{8, 10}));
  expect_drops(train(*vit, x, labels(8, 10, 12), 0.05), 0.7);
}

TEST(Zoo, VisionTransformerSparseAttentionMeanPool) {
  auto vit = make_model({"vit",
                         {{"seed", int64_t{13}},
                          {"pool", std::string("mean")},
                          {"attention", std::string("block")},
                          {"block", int64_t{4}},
                          {"dim", int64_t{32}}}});
  EXPECT_EQ(vit->parameter("pos_embed").shape(), (Shape{1, 16, 32}));
  Variable x(images(4, 14));
  expect_drops(train(*vit, x, labels(4, 10, 15), 0.05), 0.7);
}

// With a class token and a sparse pattern the class token is global (it
// attends to and is attended by every token); mean pooling and dense
// attention leave the pattern as it is.
TEST(Zoo, VisionTransformerClassTokenIsGlobal) {
  auto pattern_of = [](Module& vit, const char* block) {
    return dynamic_cast<MultiheadAttention&>(vit.submodule(str_cat("blocks.", block, ".attn"))).pattern();
  };
  auto vit = make_model(
      {"vit",
       {{"seed", int64_t{16}}, {"attention", std::string("block")}, {"block", int64_t{4}}, {"dim", int64_t{32}}}});
  for (const char* b : {"0", "1"}) {
    const AttentionPattern p = pattern_of(*vit, b);
    EXPECT_EQ(p.kind, AttentionPattern::Kind::kBlock);
    EXPECT_EQ(p.global_tokens, 1);
    EXPECT_EQ(p.describe(), "block(block=4, global=1)");
  }
  Variable x(images(4, 17));
  expect_drops(train(*vit, x, labels(4, 10, 18), 0.05), 0.7);
  auto local = make_model({"vit", {{"attention", std::string("local")}, {"pool", std::string("cls")}}});
  EXPECT_EQ(pattern_of(*local, "0").global_tokens, 1);
  auto mean_pool = make_model({"vit", {{"attention", std::string("block")}, {"pool", std::string("mean")}}});
  EXPECT_EQ(pattern_of(*mean_pool, "0").global_tokens, 0);
  EXPECT_EQ(pattern_of(*make_model({"vit", {}}), "0").global_tokens, 0);  // dense: nothing to add
}

Tensor tokens(int64_t n, int64_t t, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  return randint(0, vocab, {n, t}, DType::kI64, gen);
}

TEST(Zoo, CharLm) {
  for (const char* attention : {"dense", "local"}) {
    auto lm = make_model({"char_lm",
                          {{"vocab_size", int64_t{16}},
                           {"context", int64_t{12}},
                           {"dim", int64_t{32}},
                           {"layers", int64_t{2}},
                           {"heads", int64_t{4}},
                           {"attention", std::string(attention)},
                           {"window", int64_t{4}},
                           {"seed", int64_t{16}}}});
    Tensor seq = tokens(4, 13, 16, 17);
    Variable x(seq.narrow(1, 0, 12));
    Tensor target = seq.narrow(1, 1, 12).contiguous();
    EXPECT_EQ(lm->forward(x).shape(), (Shape{4, 12, 16})) << attention;
    expect_drops(train(*lm, x, target, 0.1), 0.8);
  }
}

// The transformers' gelu option ("erf", the default, or "tanh") reaches every
// block's activation; other values are refused naming the option, the value
// and the accepted ones. The gpt's is tested in gpt_test.
TEST(Zoo, TransformersTakeTheGeluForm) {
  for (const char* name : {"vit", "char_lm"}) {
    SCOPED_TRACE(name);
    for (const char* value : {"erf", "tanh"}) {
      auto m = make_model({name, {{"dim", int64_t{16}}, {"heads", int64_t{2}}, {"gelu", std::string(value)}}});
      const GeluForm want = std::string(value) == "tanh" ? GeluForm::kTanh : GeluForm::kErf;
      for (const char* act : {"blocks.0.mlp.act", "blocks.1.mlp.act"}) {
        EXPECT_EQ(dynamic_cast<GELU&>(m->submodule(act)).form(), want) << value << " " << act;
      }
    }
    auto plain = make_model({name, {{"dim", int64_t{16}}, {"heads", int64_t{2}}}});
    EXPECT_EQ(dynamic_cast<GELU&>(plain->submodule("blocks.0.mlp.act")).form(), GeluForm::kErf);
    try {
      make_model({name, {{"gelu", std::string("none")}}});
      ADD_FAILURE() << "gelu: none was accepted";
    } catch (const ModelOptionError& e) {
      EXPECT_EQ(std::string(e.what()), str_cat("model '", name, "': option 'gelu': is 'none'; known: erf, tanh"));
    }
  }
}

// What each model reads and predicts, with the zoo's defaults and with
// options, and that building a model draws nothing from the thread's default
// stream (the trainer builds it during validation, before seeding that
// stream).
TEST(Zoo, ModelInputs) {
  const ModelInput mlp = model_input({"mlp", {}});
  EXPECT_EQ(mlp.kind, InputKind::kFeatures);
  EXPECT_EQ(mlp.example, (Shape{784}));
  EXPECT_EQ(mlp.classes, 10);
  EXPECT_EQ(mlp.input_from.option, "sizes");
  EXPECT_EQ(mlp.classes_from.part, "the last size");
  const ModelInput small = model_input({"mlp", {{"sizes", std::string("20,16,3")}}});
  EXPECT_EQ(small.example, (Shape{20}));
  EXPECT_EQ(small.classes, 3);

  const ModelInput lenet = model_input({"lenet5", {{"num_classes", int64_t{7}}}});
  EXPECT_EQ(lenet.kind, InputKind::kImage);
  EXPECT_EQ(lenet.example, (Shape{1, 28, 28}));
  EXPECT_EQ(lenet.classes, 7);
  EXPECT_EQ(lenet.input_from.option, "");

  const ModelInput vit = model_input({"vit", {{"image_size", int64_t{32}}, {"channels", int64_t{3}}}});
  EXPECT_EQ(vit.kind, InputKind::kImage);
  EXPECT_EQ(vit.example, (Shape{3, 32, 32}));
  EXPECT_EQ(vit.classes, 10);
  EXPECT_EQ(vit.input_from.option, "image_size");

  const ModelInput lm = model_input({"char_lm", {{"context", int64_t{12}}}});
  EXPECT_EQ(lm.kind, InputKind::kTokens);
  EXPECT_EQ(lm.example, (Shape{12}));
  EXPECT_EQ(lm.classes, 65);
  EXPECT_EQ(lm.classes_from.option, "vocab_size");

  EXPECT_THROW(model_input({"mlp", {{"sizes", std::string("7")}}}), ModelOptionError);
  EXPECT_THROW(model_input({"resnet", {}}), Error);

  for (const std::string& name : model_names()) {
    manual_seed(5);
    const uint64_t offset = default_generator().offset();
    make_model({name, {{"seed", int64_t{3}}}});
    EXPECT_EQ(default_generator().offset(), offset) << name << " drew from the default stream";
  }
}

}  // namespace
}  // namespace coppice
