#include "autograd/functions/nn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using testing::uniform64;
using V = std::vector<Variable>;

TEST(NnTest, Softmax) {
  Variable x = param(randn64({3, 4}));
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(str_cat("dim ", dim));
    EXPECT_GRADCHECK([dim](const V& v) { return softmax(v[0], dim); }, {x});
    EXPECT_GRADCHECK([dim](const V& v) { return log_softmax(v[0], dim); }, {x});
  }
  Variable x3 = param(randn64({2, 3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return softmax(v[0], 1); }, {x3});
  EXPECT_GRADCHECK([](const V& v) { return log_softmax(v[0], 1); }, {x3});
}

TEST(NnTest, CrossEntropy) {
  Variable logits = param(randn64({5, 4}), "logits");
  Tensor target = from_vector<int64_t>({0, 3, 1, 1, 2});
  Tensor with_ignored = from_vector<int64_t>({0, -100, 1, -100, 2});
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    for (double smoothing : {0.0, 0.1}) {
      for (const Tensor& t : {target, with_ignored}) {
        SCOPED_TRACE(str_cat("reduction ", static_cast<int>(r), ", smoothing ", smoothing, ", target ", t));
        CrossEntropyOptions o;
        o.reduction = r;
        o.label_smoothing = smoothing;
        EXPECT_GRADCHECK([t, o](const V& v) { return cross_entropy(v[0], t, o); }, {logits});
      }
    }
  }
}

TEST(NnTest, CrossEntropyIgnoreIndexThatIsAClass) {
  Variable logits = param(randn64({4, 3}));
  Tensor target = from_vector<int64_t>({0, 2, 1, 2});
  CrossEntropyOptions o;
  o.ignore_index = 2;
  EXPECT_GRADCHECK([target, o](const V& v) { return cross_entropy(v[0], target, o); }, {logits});
  cross_entropy(logits, target, o).backward();
  // Rows whose target is ignored get no gradient.
  EXPECT_EQ(max_abs_diff(logits.grad().select(0, 1), zeros({3}, DType::kF64)), 0.0);
  EXPECT_EQ(max_abs_diff(logits.grad().select(0, 3), zeros({3}, DType::kF64)), 0.0);
}

// The elementwise losses: every reduction, gradients to input and target.
TEST(NnTest, ElementwiseLosses) {
  Variable x = param(randn64({3, 4}), "input");
  Variable y = param(randn64({3, 4}), "target");
  Variable p = param(uniform64({3, 4}, 0.0, 1.0), "probabilities");
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    SCOPED_TRACE(str_cat("reduction ", static_cast<int>(r)));
    EXPECT_GRADCHECK([r](const V& v) { return mse_loss(v[0], v[1], r); }, {x, y});
    EXPECT_GRADCHECK([r](const V& v) { return l1_loss(v[0], v[1], r); }, {x, y});
    EXPECT_GRADCHECK([r](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], r); }, {x, p});
    // A constant target, and logits far out on both sides.
    EXPECT_GRADCHECK([r](const V& v) { return mse_loss(v[0], v[1], r); }, {x, constant(y.value())});
    Variable wide = param(mul(randn64({2, 5}), 30.0));
    Variable hard = constant(from_vector<double>({0, 1, 1, 0, 1, 0, 0, 1, 0.5, 1}, {2, 5}));
    EXPECT_GRADCHECK([r](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], r); }, {wide, hard});
  }
}

TEST(NnTest, ElementwiseLossValues) {
  const std::vector<double> xs = {-3.0, -0.5, 0.0, 0.25, 2.0, 40.0, -40.0, 15.0};
  const std::vector<double> ys = {1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 1.0};
  Variable x = param(from_vector<double>(xs, {2, 4}));
  Variable y = constant(from_vector<double>(ys, {2, 4}));
  const std::vector<double> mse = mse_loss(x, y, Reduction::kNone).value().to_vector<double>();
  const std::vector<double> l1 = l1_loss(x, y, Reduction::kNone).value().to_vector<double>();
  const std::vector<double> bce = binary_cross_entropy_with_logits(x, y, Reduction::kNone).value().to_vector<double>();
  double mse_sum = 0, bce_sum = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_DOUBLE_EQ(mse[i], (xs[i] - ys[i]) * (xs[i] - ys[i])) << i;
    EXPECT_DOUBLE_EQ(l1[i], std::abs(xs[i] - ys[i])) << i;
    const double stable = std::max(xs[i], 0.0) - xs[i] * ys[i] + std::log1p(std::exp(-std::abs(xs[i])));
    EXPECT_DOUBLE_EQ(bce[i], stable) << i;
    mse_sum += mse[i];
    bce_sum += bce[i];
  }
  // The small losses keep their digits: x = 40 against y = 1 is e^-40, not 0.
  EXPECT_GT(bce[5], 0.0);
  EXPECT_DOUBLE_EQ(mse_loss(x, y, Reduction::kSum).item(), mse_sum);
  EXPECT_DOUBLE_EQ(binary_cross_entropy_with_logits(x, y).item(), bce_sum / 8);
  EXPECT_EQ(mse_loss(x, y, Reduction::kNone).shape(), Shape({2, 4}));
  EXPECT_EQ(mse_loss(x, y).dim(), 0);
  // f32 logits of +-100 stay finite, and so do their gradients.
  Variable big = param(from_vector<float>({100.0f, -100.0f, 0.0f}));
  Variable target = constant(from_vector<float>({0.0f, 1.0f, 1.0f}));
  Variable loss = binary_cross_entropy_with_logits(big, target, Reduction::kSum);
  EXPECT_FLOAT_EQ(loss.item(), 200.0f + std::log(2.0f));
  loss.backward();
  const std::vector<float> g = big.grad().to_vector<float>();
  EXPECT_FLOAT_EQ(g[0], 1.0f);
  EXPECT_FLOAT_EQ(g[1], -1.0f);
  // At x = 0 exactly (a zero-initialized layer), sigmoid(0) - y.
  EXPECT_FLOAT_EQ(g[2], -0.5f);
}

// Mismatched operands: the message names the function and the argument.
TEST(NnTest, ElementwiseLossesRejectMismatches) {
  auto expect_message = [](const std::function<void()>& f, const std::string& text) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming: " << text;
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what(); }
  };
  Variable x = param(randn64({3, 4}));
  Variable wrong_shape = constant(randn64({4, 3}));
  Variable wrong_dtype = constant(randn64({3, 4}).to(DType::kF32));
  Variable ints = constant(zeros({3, 4}, DType::kI64));
  expect_message([&] { mse_loss(x, wrong_shape); }, "mse_loss: target has shape [4, 3] but input has shape [3, 4]");
  expect_message([&] { l1_loss(x, wrong_dtype); }, "l1_loss: target has dtype f32 but input has dtype f64");
  expect_message([&] { binary_cross_entropy_with_logits(x, wrong_shape); },
                 "binary_cross_entropy_with_logits: target has shape [4, 3] but logits has shape [3, 4]");
  expect_message([&] { mse_loss(ints, ints); }, "mse_loss: input must be floating-point, got i64");
  expect_message([&] { mse_loss(x, Variable()); }, "mse_loss: target is undefined");
}

TEST(NnTest, LayerNorm) {
  Variable x = param(randn64({2, 3, 4}), "x");
  Variable w = param(randn64({4}), "weight"), b = param(randn64({4}), "bias");
  EXPECT_GRADCHECK([](const V& v) { return layer_norm(v[0], {4}, v[1], v[2]); }, {x, w, b});
  EXPECT_GRADCHECK([](const V& v) { return layer_norm(v[0], {4}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return layer_norm(v[0], {4}, v[1]); }, {x, w});
  Variable w2 = param(randn64({3, 4})), b2 = param(randn64({3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return layer_norm(v[0], {3, 4}, v[1], v[2], 1e-3); }, {x, w2, b2});
  Variable xc = constant(randn64({2, 3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return layer_norm(v[0], {4}, v[1], v[2]); }, {xc, w, b});
}

// add_layer_norm: h and y of one node. Each output alone, both together
// (through separate consumers, so both gradient slots are filled), with and
// without the affine parameters; one addend a constant.
TEST(NnTest, AddLayerNorm) {
  Variable x = param(randn64({2, 3, 4}), "x"), r = param(randn64({2, 3, 4}), "r");
  Variable w = param(randn64({4}), "weight"), b = param(randn64({4}), "bias");
  auto both = [](const AddLayerNormVariables& o) { return add(mul(o.h, 0.7), mul(o.y, o.y)); };
  EXPECT_GRADCHECK([&](const V& v) { return both(add_layer_norm(v[0], v[1], {4}, v[2], v[3])); }, {x, r, w, b});
  EXPECT_GRADCHECK([&](const V& v) { return both(add_layer_norm(v[0], v[1], {4})); }, {x, r});
  EXPECT_GRADCHECK([&](const V& v) { return both(add_layer_norm(v[0], v[1], {4}, v[2])); }, {x, r, w});
  EXPECT_GRADCHECK([](const V& v) { return add_layer_norm(v[0], v[1], {4}, v[2], v[3]).y; }, {x, r, w, b});
  EXPECT_GRADCHECK([](const V& v) { return add_layer_norm(v[0], v[1], {4}, v[2], v[3]).h; }, {x, r, w, b});
  EXPECT_GRADCHECK([](const V& v) { return add_layer_norm(v[0], v[1], {4}).y; }, {x, r});
  Variable w2 = param(randn64({3, 4})), b2 = param(randn64({3, 4}));
  EXPECT_GRADCHECK(
      [&](const V& v) {
        return both(add_layer_norm(v[0], v[1], {3, 4}, v[2], v[3], 1e-3));
      },
      {x, r, w2, b2});
  Variable rc = constant(randn64({2, 3, 4}));
  EXPECT_GRADCHECK([&](const V& v) { return both(add_layer_norm(v[0], v[1], {4}, v[2], v[3])); }, {x, rc, w, b});
}

// The fused node's gradients are the unfused graph's (add, then layer_norm,
// h used again after): the same sums in f64.
TEST(NnTest, AddLayerNormMatchesAddThenLayerNorm) {
  const Tensor xt = randn64({3, 5, 6}), rt = randn64({3, 5, 6}), wt = randn64({6}), bt = randn64({6});
  const Tensor gy = randn64({3, 5, 6}), gh = randn64({3, 5, 6});
  auto run = [&](bool fused) {
    Variable x = param(xt), r = param(rt), w = param(wt), b = param(bt);
    Variable h, y;
    if (fused) {
      AddLayerNormVariables o = add_layer_norm(x, r, {6}, w, b);
      h = o.h;
      y = o.y;
    } else {
      h = add(x, r);
      y = layer_norm(h, {6}, w, b);
    }
    Variable loss = add(sum(mul(y, Variable(gy))), sum(mul(h, Variable(gh))));
    loss.backward();
    return std::vector<Tensor>{y.value(), h.value(), x.grad(), r.grad(), w.grad(), b.grad()};
  };
  const std::vector<Tensor> fused = run(true), plain = run(false);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_LE(max_abs_diff(fused[i], plain[i]), 1e-12) << "result " << i;
}

// Only y used: no gradient reaches h from elsewhere, x and r get layer_norm's dx.
TEST(NnTest, AddLayerNormWithoutGradientAtH) {
  Variable x = param(randn64({4, 8})), r = param(randn64({4, 8})), w = param(randn64({8}));
  AddLayerNormVariables o = add_layer_norm(x, r, {8}, w);
  EXPECT_EQ(o.h.grad_fn(), o.y.grad_fn());
  sum(mul(o.y, o.y)).backward();
  const LayerNormGrads want =
      layer_norm_backward(add(x.value(), r.value()), {8}, w.value(), mul(o.y.value(), 2.0), true, false);
  EXPECT_LE(max_abs_diff(x.grad(), want.dx), 1e-12);
  EXPECT_LE(max_abs_diff(r.grad(), want.dx), 1e-12);
  EXPECT_LE(max_abs_diff(w.grad(), want.dweight), 1e-12);
  // Under no-grad, or with no input requiring grad, the outputs are plain values.
  AddLayerNormVariables c = add_layer_norm(constant(x.value()), constant(r.value()), {8});
  EXPECT_FALSE(c.h.requires_grad());
  EXPECT_FALSE(c.y.requires_grad());
}

TEST(NnTest, Embedding) {
  Variable w = param(randn64({5, 3}), "weight");
  Tensor idx = from_vector<int64_t>({0, 4, 2, 4, 4, 1}, {2, 3});  // repeats accumulate
  EXPECT_GRADCHECK([idx](const V& v) { return embedding(v[0], idx); }, {w});
  Tensor idx32 = from_vector<int32_t>({3, 3, 0});
  EXPECT_GRADCHECK([idx32](const V& v) { return embedding(v[0], idx32); }, {w});
}

TEST(NnTest, Dropout) {
  Variable x = param(randn64({4, 5}));
  // A fresh generator per call: the same mask on every evaluation.
  EXPECT_GRADCHECK(
      [](const V& v) {
        Generator gen(7);
        return dropout(v[0], 0.3, true, gen);
      },
      {x});
  EXPECT_GRADCHECK([](const V& v) { return dropout(v[0], 0.3, false); }, {x});
  // The same mask as the Tensor op for the same generator state.
  Generator g1(11), g2(11);
  EXPECT_TRUE(allclose(dropout(x, 0.5, true, g1).value(), dropout(x.value(), 0.5, true, g2)));
  EXPECT_EQ(g1.offset(), g2.offset());
}

TEST(NnTest, Conv2d) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  Conv2dOptions strided;
  strided.stride = {2, 1};
  strided.padding = {1, 2};
  Conv2dOptions dilated;
  dilated.dilation = {2, 2};
  dilated.padding = {1, 1};
  const std::vector<Case> cases = {
      {{2, 3, 5, 5}, {4, 3, 3, 3}, {}}, {{1, 2, 6, 5}, {3, 2, 3, 2}, strided}, {{2, 2, 6, 6}, {2, 2, 2, 3}, dilated}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_to_string(c.x) + " * " + shape_to_string(c.w));
    Variable x = param(randn64(c.x), "x"), w = param(randn64(c.w), "weight"), b = param(randn64({c.w[0]}), "bias");
    Conv2dOptions o = c.o;
    EXPECT_GRADCHECK([o](const V& v) { return conv2d(v[0], v[1], v[2], o); }, {x, w, b});
    EXPECT_GRADCHECK([o](const V& v) { return conv2d(v[0], v[1], Variable(), o); }, {x, w});
  }
}

TEST(NnTest, MaxPool2d) {
  Variable x = param(randn64({2, 2, 5, 6}));
  EXPECT_GRADCHECK([](const V& v) { return max_pool2d(v[0], {2, 2}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
  // Overlapping windows: one input can win several.
  EXPECT_GRADCHECK([](const V& v) { return max_pool2d(v[0], {3, 2}, {1, 1}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return max_pool2d_with_indices(v[0], {2, 3}).values; }, {x});
}

TEST(NnTest, Im2colCol2im) {
  Conv2dOptions o;
  o.padding = {1, 0};
  o.stride = {2, 1};
  Variable x = param(randn64({2, 3, 5, 4}));
  EXPECT_GRADCHECK([o](const V& v) { return im2col(v[0], {3, 2}, o); }, {x});
  Tensor cols = im2col(x.value(), {3, 2}, o);
  Variable c = param(randn64(cols.shape()));
  EXPECT_GRADCHECK([o](const V& v) { return col2im(v[0], {2, 3, 5, 4}, {3, 2}, o); }, {c});
}

// Fused attention against central differences, with every kind of mask: none,
// causal, a block pattern (with a key block no query sees and a query block
// that sees nothing), and both; T = 7 is not a multiple of the block.
TEST(NnTest, Attention) {
  const Shape shape{2, 7, 3};
  Variable q = param(randn64(shape), "q"), k = param(randn64(shape), "k"), v = param(randn64(shape), "v");
  // Blocks of 3 tokens: 3 query blocks; block 1 sees nothing, block 2 sees 0 and 2.
  const Tensor pattern =
      attention_block_pattern({true, false, false, false, false, false, true, false, true}, 3, Device::cpu());
  for (bool causal : {false, true}) {
    for (bool blocks : {false, true}) {
      SCOPED_TRACE(str_cat("causal ", causal, ", pattern ", blocks));
      AttentionMask mask{causal, blocks ? pattern : Tensor()};
      EXPECT_GRADCHECK([mask](const V& x) { return attention(x[0], x[1], x[2], 0.7, mask); }, {q, k, v});
    }
  }
}

TEST(NnTest, AttentionPacked) {
  Variable qkv = param(randn64({2, 5, 3, 2, 3}), "qkv");
  AttentionMask mask{true, {}};
  EXPECT_GRADCHECK([mask](const V& x) { return attention_packed(x[0], 0.6, mask); }, {qkv});
}

TEST(NnTest, SmallNetworkEndToEnd) {
  // conv -> relu -> pool -> flatten -> layer_norm -> linear -> gelu -> linear -> cross_entropy
  Variable x = constant(randn64({2, 1, 6, 6}));
  Variable cw = param(mul(randn64({2, 1, 3, 3}), 0.5), "conv.weight"), cb = param(randn64({2}), "conv.bias");
  Variable g = param(randn64({8}), "ln.weight"), beta = param(randn64({8}), "ln.bias");
  Variable w1 = param(mul(randn64({5, 8}), 0.3), "fc1.weight"), b1 = param(randn64({5}), "fc1.bias");
  Variable w2 = param(mul(randn64({3, 5}), 0.3), "fc2.weight");
  Tensor target = from_vector<int64_t>({2, 0});
  auto net = [target](const V& v) {
    Variable h = max_pool2d(relu(conv2d(v[0], v[1], v[2])), {2, 2});  // [2, 2, 2, 2]
    h = layer_norm(flatten(h, 1), {8}, v[3], v[4]);
    h = gelu(linear(h, v[5], v[6]));
    CrossEntropyOptions o;
    o.label_smoothing = 0.05;
    return cross_entropy(linear(h, v[7]), target, o);
  };
  EXPECT_GRADCHECK(net, {x, cw, cb, g, beta, w1, b1, w2});
}

}  // namespace
}  // namespace coppice
