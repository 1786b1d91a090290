// The layers of models/layers.h: forward shapes, float64 gradchecks of small
// instances (Linear with a dense and a CSR weight, its forward_relu against
// relu(forward), its forward_gelu_mlp in both GELU forms against the layers
// apart, Conv2d dense and masked, LayerNorm, BatchNorm in training,
// Embedding, GELU's two forms against their formulas), the sparse weight's
// gradient staying in its pattern, and train/eval behaviour of Dropout and
// BatchNorm.
#include "models/layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "sparse/convert.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/dispatcher.h"
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

TEST(Linear, ShapesAndInit) {
  Generator gen(1);
  Linear fc(20, 7, true, {}, gen);
  EXPECT_EQ(fc.weight().shape(), (Shape{7, 20}));
  EXPECT_EQ(fc.bias().shape(), (Shape{7}));
  const double bound = 1.0 / std::sqrt(20.0);
  EXPECT_LE(max(abs(fc.weight().value())).item(), bound);
  EXPECT_GT(max(abs(fc.weight().value())).item(), 0.5 * bound);
  EXPECT_EQ(fc.forward(Variable(randn({3, 20}))).shape(), (Shape{3, 7}));
  EXPECT_EQ(fc.forward(Variable(randn({2, 3, 20}))).shape(), (Shape{2, 3, 7}));
  Generator again(1);
  Linear same(20, 7, true, {}, again);
  EXPECT_TRUE(allclose(same.weight().value(), fc.weight().value()));  // seeded
  EXPECT_NE(error_of([&] { fc.forward(Variable(randn({3, 19}))); }).find("in_features = 20"), std::string::npos);
  Linear nobias(4, 2, false);
  EXPECT_EQ(nobias.named_parameters().size(), 1u);
}

TEST(Linear, GradcheckDense) {
  Generator gen(2);
  Linear fc(5, 3, true, kF64, gen);
  EXPECT_GRADCHECK_OK(gradcheck_module(fc, Variable(randn64({4, 5}, 3), true)));
  Linear nobias(5, 3, false, kF64, gen);
  EXPECT_GRADCHECK_OK(gradcheck_module(nobias, Variable(randn64({2, 2, 5}, 4), true)));
}

TEST(Linear, CsrWeightGradientKeepsThePattern) {
  Generator gen(5);
  Linear fc(6, 4, true, kF64, gen);
  Tensor w = fc.weight().value();
  Tensor csr = sparse_from_threshold(w, 0.15, "csr");
  ASSERT_GT(nnz(csr), 0);
  ASSERT_LT(nnz(csr), w.numel());
  fc.set_parameter("weight", Variable(csr, true));
  EXPECT_GRADCHECK_OK(gradcheck_module(fc, Variable(randn64({3, 6}, 6), true)));

  Variable x(randn64({3, 6}, 7));
  Variable y = fc.forward(x);
  EXPECT_TRUE(allclose(y.value(), linear(x.value(), to_dense(csr), fc.bias().value())));
  sum(y).backward();
  const Tensor& g = fc.weight().grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.format(), "csr");
  EXPECT_EQ(pattern_version(g), pattern_version(csr));
  EXPECT_EQ(nnz(g), nnz(csr));
}

TEST(Linear, AnySparseFormatRuns) {
  Generator gen(8);
  for (const char* format : {"coo", "csc", "masked", "bsr"}) {
    Linear fc(8, 4, true, kF64, gen);
    Tensor w = fc.weight().value();
    Tensor s = std::string(format) == "bsr"
                   ? to_format(sparse_from_threshold(w, 0.1, "csr"), "bsr", FormatOptions::block(2))
                   : sparse_from_threshold(w, 0.1, format);
    fc.set_parameter("weight", Variable(s, true));
    Variable x(randn64({2, 8}, 9));
    Variable y = fc.forward(x);
    EXPECT_TRUE(allclose(y.value(), linear(x.value(), to_dense(s), fc.bias().value()), 1e-9, 1e-9)) << format;
    sum(y).backward();
    EXPECT_EQ(fc.weight().grad().format(), format) << format;
  }
}

// forward_relu (one linear_relu node) is relu(forward(x)) exactly, values and
// gradients, for a dense, a CSR and a BSR weight, 2-D and 3-D inputs, with
// and without a bias; and it passes the float64 gradcheck.
TEST(Linear, ForwardReluIsReluOfForward) {
  Generator gen(12);
  for (const char* format : {"dense", "csr", "bsr"}) {
    for (bool bias : {true, false}) {
      Linear fc(8, 6, bias, kF64, gen);
      Tensor w = fc.weight().value();
      if (std::string(format) != "dense") {
        Tensor csr = sparse_from_threshold(w, 0.1, "csr");
        fc.set_parameter(
            "weight",
            Variable(std::string(format) == "bsr" ? to_format(csr, "bsr", FormatOptions::block(2)) : csr, true));
      }
      for (const Shape& xs : {Shape{4, 8}, Shape{2, 3, 8}}) {
        const Tensor xv = randn64(xs, 13);
        auto run = [&](bool fused) {
          fc.zero_grad();
          Variable x(xv, true);
          Variable y = fused ? fc.forward_relu(x) : relu(fc.forward(x));
          sum(mul(y, y)).backward();
          std::vector<std::vector<double>> out{y.value().to_vector<double>(), x.grad().to_vector<double>()};
          for (const auto& [name, p] : fc.named_parameters()) out.push_back(to_dense(p.grad()).to_vector<double>());
          return out;
        };
        EXPECT_EQ(run(true), run(false)) << format << " bias " << bias << " input " << shape_to_string(xs);
      }
    }
  }
  Linear fc(5, 3, true, kF64, gen);
  Variable x(randn64({4, 5}, 14), true);
  EXPECT_GRADCHECK_OK(gradcheck([&](const std::vector<Variable>& in) { return fc.forward_relu(in[0]); }, {x}));
}

// forward_gelu_mlp in either GELU form: one GeluMlpBackward node whose value
// and gradients are exactly those of fc1, GELU(form) and fc2 run apart; with
// an output rule on fc1 (keep_all: values unchanged) the layers run apart,
// through the rule, and give the same. The two forms give different values.
TEST(Linear, ForwardGeluMlpInEitherForm) {
  Generator gen(15);
  Sequential mlp;
  auto fc1 = std::make_shared<Linear>(6, 10, true, kF64, gen);
  auto fc2 = std::make_shared<Linear>(10, 4, true, kF64, gen);
  mlp.push_back(fc1, "fc1");
  mlp.push_back(fc2, "fc2");
  const Tensor xv = randn64({2, 3, 6}, 16);
  auto run = [&](GeluForm form, bool fused) {
    mlp.zero_grad();
    Variable x(xv, true);
    Variable y =
        fused ? Linear::forward_gelu_mlp(*fc1, *fc2, x, form) : fc2->forward(GELU(form).forward(fc1->forward(x)));
    if (fused && fc1->output_rule() == nullptr) { EXPECT_EQ(y.grad_fn()->name(), "GeluMlpBackward"); }
    sum(mul(y, y)).backward();
    std::vector<std::vector<double>> out{y.value().to_vector<double>(), x.grad().to_vector<double>()};
    for (const auto& [name, p] : mlp.named_parameters()) out.push_back(p.grad().to_vector<double>());
    return out;
  };
  for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    EXPECT_EQ(run(form, true), run(form, false)) << "tanh " << (form == GeluForm::kTanh);
  }
  EXPECT_NE(run(GeluForm::kTanh, true)[0], run(GeluForm::kErf, true)[0]);
  const std::vector<std::vector<double>> tanh_fused = run(GeluForm::kTanh, true);
  SparsityBuilder b;
  b.output("fc1").forward({"keep_all", {}}, "dense");
  mlp.apply_sparsity(b.schedule());
  ASSERT_NE(fc1->output_rule(), nullptr);
  EXPECT_EQ(run(GeluForm::kTanh, true), tanh_fused);
}

TEST(Conv2d, ShapeAndGradcheck) {
  Generator gen(10);
  Conv2dOptions pad;
  pad.padding = {1, 1};
  Conv2d conv(2, 3, 3, pad, true, kF64, gen);
  EXPECT_EQ(conv.forward(Variable(randn64({2, 2, 5, 5}, 11))).shape(), (Shape{2, 3, 5, 5}));
  EXPECT_GRADCHECK_OK(gradcheck_module(conv, Variable(randn64({1, 2, 4, 4}, 12), true)));
}

TEST(Conv2d, MaskedWeight) {
  Generator gen(13);
  Conv2d conv(2, 2, 3, Conv2dOptions{}, true, kF64, gen);
  Tensor w = conv.weight().value();
  Tensor masked = sparse_masked(w, gt(abs(w), 0.1));
  conv.set_parameter("weight", Variable(masked, true));
  EXPECT_GRADCHECK_OK(gradcheck_module(conv, Variable(randn64({1, 2, 4, 4}, 14), true)));
  Variable y = conv.forward(Variable(randn64({1, 2, 4, 4}, 15)));
  sum(y).backward();
  EXPECT_EQ(conv.weight().grad().format(), "masked");
}

// A sparse weight is never made dense: the matrix form [out, in * k * k] in
// CSR, BSR and n:m (ConvWeightLayout::kMatrix), and COO and masked kernels,
// each equal to the dense convolution of its dense form, gradchecked, its
// gradient compact in its own format, with no dense fallback on the way.
TEST(Conv2d, SparseWeightsInEveryFormat) {
  struct Case {
    std::string format;
    ConvWeightLayout layout;
    FormatOptions options;
  };
  const std::vector<Case> cases = {
      {"csr", ConvWeightLayout::kMatrix, {}},
      {"bsr", ConvWeightLayout::kMatrix, FormatOptions::block(2, 3)},
      {"nm", ConvWeightLayout::kMatrix, FormatOptions::nm(2, 4)},
      {"coo", ConvWeightLayout::kMatrix, {}},
      {"coo", ConvWeightLayout::kKernel, {}},
      {"masked", ConvWeightLayout::kKernel, {}},
  };
  Conv2dOptions pad;
  pad.padding = {1, 1};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.format + (c.layout == ConvWeightLayout::kMatrix ? " matrix" : " kernel"));
    Generator gen(21);
    Conv2d conv(4, 4, 3, pad, true, kF64, gen, c.layout);  // matrix [4, 36]
    const Tensor w = conv.weight().value();
    Tensor mask = gt(abs(w), 0.1);
    if (c.format == "nm") {  // 2 of every 4 along a row
      std::vector<uint8_t> keep(static_cast<size_t>(w.numel()));
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = (i % 36) % 4 < 2;
      mask = ne(from_vector(keep, w.shape()), 0.0);
    }
    const Tensor sparse = sparse_from_mask(w, mask, c.format, c.options);
    conv.set_parameter("weight", Variable(sparse, true));
    const Tensor x = randn64({2, 4, 5, 5}, 22);
    Dispatcher::instance().set_fallback_is_error(true);
    Variable y = conv.forward(Variable(x));
    sum(y).backward();
    Dispatcher::instance().set_fallback_is_error(false);
    const Tensor want = conv2d(x, to_dense(sparse).reshape({4, 4, 3, 3}), conv.parameter("bias").value(), pad);
    EXPECT_TRUE(allclose(y.value(), want, 1e-12, 1e-12)) << max_abs_diff(y.value(), want);
    EXPECT_EQ(conv.weight().grad().format(), c.format);
    EXPECT_GRADCHECK_OK(gradcheck_module(conv, Variable(randn64({1, 4, 4, 4}, 23), true)));
  }
}

TEST(LayerNorm, ShapeAndGradcheck) {
  LayerNorm ln({6}, 1e-5, true, kF64);
  Variable x(randn64({2, 3, 6}, 16), true);
  Variable y = ln.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_LT(max(abs(mean(y.value(), {-1}))).item(), 1e-9);
  // Non-trivial affine parameters for the check.
  ln.set_parameter("weight", Variable(randn64({6}, 17), true));
  ln.set_parameter("bias", Variable(randn64({6}, 18), true));
  EXPECT_GRADCHECK_OK(gradcheck_module(ln, x));
}

// forward_add: h = x + r and the layer's forward(h) from one node, with the
// layer's own weight and bias (their names unchanged); a residual that add
// would broadcast takes add and forward as they are.
TEST(LayerNorm, ForwardAddIsAddThenForward) {
  LayerNorm ln({6}, 1e-4, true, kF64);
  ln.set_parameter("weight", Variable(randn64({6}, 30), true));
  ln.set_parameter("bias", Variable(randn64({6}, 31), true));
  Variable x(randn64({2, 3, 6}, 32), true), r(randn64({2, 3, 6}, 33), true);
  const AddLayerNormVariables fused = ln.forward_add(x, r);
  EXPECT_EQ(fused.y.grad_fn()->name(), "AddLayerNormBackward");
  const Variable h = add(x, r), y = ln.forward(h);
  EXPECT_LE(max_abs_diff(fused.h.value(), h.value()), 0.0);
  EXPECT_LE(max_abs_diff(fused.y.value(), y.value()), 1e-12);
  std::vector<std::string> names;
  for (const auto& [n, p] : ln.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));

  Variable row(randn64({6}, 34), true);
  const AddLayerNormVariables broadcast = ln.forward_add(x, row);
  EXPECT_EQ(broadcast.h.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(broadcast.y.grad_fn()->name(), "LayerNormBackward");
  EXPECT_LE(max_abs_diff(broadcast.y.value(), ln.forward(add(x, row)).value()), 1e-12);

  auto f = [&ln](const std::vector<Variable>& in) {
    ln.set_parameter("weight", in[2]);
    ln.set_parameter("bias", in[3]);
    const AddLayerNormVariables o = ln.forward_add(in[0], in[1]);
    return add(o.h, mul(o.y, o.y));
  };
  const Variable w = ln.parameter("weight"), b = ln.parameter("bias");
  EXPECT_GRADCHECK_OK(gradcheck(f, {x, r, w, b}));
}

TEST(BatchNorm, TrainGradcheckAndRunningStats) {
  BatchNorm2d bn(3, 1e-5, 0.1, true, kF64);
  bn.set_parameter("weight", Variable(randn64({3}, 19), true));
  bn.set_parameter("bias", Variable(randn64({3}, 20), true));
  Variable x(add(mul(randn64({4, 3, 2, 2}, 21), 2.0), 1.0), true);
  EXPECT_GRADCHECK_OK(gradcheck_module(bn, x));

  BatchNorm2d fresh(3, 1e-5, 0.1, false, kF64);
  Variable y = fresh.forward(x);
  EXPECT_LT(max(abs(mean(y.value(), {0, 2, 3}))).item(), 1e-9);
  Tensor bm = mean(x.value(), {0, 2, 3});
  EXPECT_TRUE(allclose(fresh.buffer("running_mean"), mul(bm, 0.1), 1e-9, 1e-12));
  EXPECT_EQ(fresh.buffer("num_batches_tracked").item(), 1.0);
  // Unbiased variance in the running estimate.
  Tensor xc = sub(x.value(), mean(x.value(), {0, 2, 3}, true));
  Tensor unbiased = div(sum(mul(xc, xc), {0, 2, 3}), 15.0);
  EXPECT_TRUE(allclose(fresh.buffer("running_var"), add(mul(unbiased, 0.1), 0.9), 1e-9, 1e-12));

  // Evaluation uses the running statistics and changes nothing.
  fresh.eval();
  Tensor before = fresh.buffer("running_mean").clone();
  Variable ye = fresh.forward(x);
  Tensor expect = div(sub(x.value(), fresh.buffer("running_mean").reshape({1, 3, 1, 1})),
                      sqrt(add(fresh.buffer("running_var").reshape({1, 3, 1, 1}), 1e-5)));
  EXPECT_TRUE(allclose(ye.value(), expect, 1e-9, 1e-9));
  EXPECT_TRUE(allclose(fresh.buffer("running_mean"), before));
  EXPECT_EQ(fresh.buffer("num_batches_tracked").item(), 1.0);
}

TEST(BatchNorm, OneDimensional) {
  BatchNorm1d bn(4, 1e-5, 0.1, true, kF64);
  EXPECT_EQ(bn.forward(Variable(randn64({5, 4}, 22))).shape(), (Shape{5, 4}));
  EXPECT_EQ(bn.forward(Variable(randn64({5, 4, 3}, 23))).shape(), (Shape{5, 4, 3}));
  EXPECT_GRADCHECK_OK(gradcheck_module(bn, Variable(randn64({5, 4}, 24), true)));
  EXPECT_NE(error_of([&] {
              bn.forward(Variable(randn64({5, 3}, 25)));
            }).find("3 channels, expected 4"),
            std::string::npos);
}

TEST(Dropout, TrainAndEval) {
  Dropout drop(0.5, 7);
  Variable x(ones({1000}));
  Variable y = drop.forward(x);
  const double kept = sum(ne(y.value(), 0.0).to(DType::kF64)).item();
  EXPECT_GT(kept, 400);
  EXPECT_LT(kept, 600);
  EXPECT_NEAR(max(y.value()).item(), 2.0, 1e-6);  // scaled by 1/(1-p)
  drop.eval();
  EXPECT_FALSE(drop.is_training());
  EXPECT_TRUE(drop.forward(x).is_same(x));
  EXPECT_NE(error_of([] { Dropout bad(1.0); }), "");
}

TEST(Embedding, ShapeAndGradcheck) {
  Generator gen(26);
  Embedding emb(10, 4, kF64, gen);
  Tensor idx = from_vector<int64_t>({1, 3, 3, 9, 0, 1}, {2, 3});
  Variable y = emb.forward(Variable(idx));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(allclose(y.value().select(0, 0).select(0, 1), emb.weight().value().select(0, 3)));
  EXPECT_GRADCHECK_OK(gradcheck_module(emb, Variable(idx)));
  EXPECT_NE(error_of([&] { emb.forward(Variable(randn({2}))); }).find("integers"), std::string::npos);
}

TEST(Embedding, SparseGradOptionGivesTheRowsUsed) {
  Generator gen(27);
  Embedding emb(10, 4, kF64, gen, 1.0, /*sparse_grad=*/true);
  Tensor idx = from_vector<int64_t>({7, 3, 3}, {3});
  EXPECT_GRADCHECK_OK(gradcheck_module(emb, Variable(idx)));
  Variable w = emb.weight();
  w.set_grad(Tensor());
  sum(emb.forward(Variable(idx))).backward();
  ASSERT_TRUE(is_row_sparse(w.grad()));
  EXPECT_EQ(row_sparse_rows(w.grad()).to_vector<int64_t>(), (std::vector<int64_t>{3, 7}));
}

TEST(Activations, ReluGeluPoolFlatten) {
  Variable x(randn64({2, 3, 4, 4}, 27), true);
  EXPECT_TRUE(allclose(ReLU().forward(x).value(), relu(x.value())));
  EXPECT_TRUE(allclose(GELU().forward(x).value(), gelu(x.value())));
  EXPECT_EQ(MaxPool2d(2).forward(x).shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(Flatten().forward(x).shape(), (Shape{2, 48}));
}

// GELU's forms in float64 against their formulas: the exact one by default
// (x/2 (1 + erf(x / sqrt 2))), GPT-2's tanh approximation with kTanh (x/2 (1 +
// tanh(sqrt(2/pi) (x + 0.044715 x^3)))), which differs from it by up to
// 4.7e-4; both gradcheck.
TEST(Activations, GeluForms) {
  const std::vector<double> xs = {-4.0, -2.5, -2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 1.5, 2.0, 3.0, 6.0};
  Variable x(from_vector(xs, {3, 4}), true);
  GELU exact, approximate(GeluForm::kTanh);
  EXPECT_EQ(exact.form(), GeluForm::kErf);
  EXPECT_EQ(approximate.form(), GeluForm::kTanh);
  const std::vector<double> e = exact.forward(x).value().to_vector<double>();
  const std::vector<double> t = approximate.forward(x).value().to_vector<double>();
  const double k = std::sqrt(2.0 / M_PI);
  double largest_gap = 0.0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_NEAR(e[i], 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))), 1e-14) << v;
    EXPECT_NEAR(t[i], 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))), 1e-14) << v;
    largest_gap = std::max(largest_gap, std::abs(t[i] - e[i]));
  }
  EXPECT_GT(largest_gap, 4e-4);  // 4.4e-4, at x = -2.5
  EXPECT_LT(largest_gap, 5e-4);
  Variable y(randn64({3, 5}, 30), true);
  EXPECT_GRADCHECK_OK(gradcheck_module(exact, y));
  EXPECT_GRADCHECK_OK(gradcheck_module(approximate, y));
}

TEST(Sequential, ChainsAndNames) {
  Generator gen(28);
  auto seq = std::make_shared<Sequential>();
  seq->push_back(std::make_shared<Linear>(4, 8, true, kF64, gen));
  seq->push_back(std::make_shared<ReLU>());
  seq->push_back(std::make_shared<Linear>(8, 2, true, kF64, gen), "out");
  std::vector<std::string> names;
  for (const auto& [n, v] : seq->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "out.weight", "out.bias"}));
  EXPECT_EQ(seq->size(), 3u);
  Variable x(randn64({3, 4}, 29), true);
  EXPECT_EQ(seq->forward(x).shape(), (Shape{3, 2}));
  EXPECT_GRADCHECK_OK(gradcheck_module(*seq, x));
}

}  // namespace
}  // namespace coppice
