// Module: dotted names, parameters and buffers, train/eval recursion,
// state_dict round trips (in memory and through safetensors) with sparse
// weights, load_state_dict's name and shape checks, to(device), and a
// sparsity schedule applied to the LeNet-300-100 MLP (the right parameters in
// the right formats and densities, output rules run at forward time), and
// parameter views.
#include "models/module.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "models/layers.h"
#include "models/state_io.h"
#include "models/zoo.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/sparsity_builder.h"
#include "tests/models/test_util.h"

namespace coppice {
namespace {

using testing::error_of;

std::vector<std::string> names_of(const NamedParameters& p) {
  std::vector<std::string> out;
  for (const auto& [n, v] : p) out.push_back(n);
  return out;
}

class Net : public Module {
 public:
  Net() : Module("Net") {
    Generator gen(3);
    fc1 = register_module("fc1", std::make_shared<Linear>(6, 5, true, LayerOptions{}, gen));
    bn = register_module("bn", std::make_shared<BatchNorm1d>(5));
    auto body = register_module("body", std::make_shared<Sequential>());
    body->push_back(std::make_shared<Dropout>(0.3));
    body->push_back(std::make_shared<Linear>(5, 2, true, LayerOptions{}, gen));
    scale = register_parameter("scale", Variable(ones({2}), true));
  }
  Variable forward(const Variable& x) override {
    return mul(submodule("body").forward(bn->forward(fc1->forward(x))), *scale);
  }
  std::shared_ptr<Linear> fc1;
  std::shared_ptr<BatchNorm1d> bn;
  Variable* scale;
};

TEST(Module, DottedNamesAndModes) {
  Net net;
  EXPECT_EQ(names_of(net.named_parameters()), (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "bn.weight",
                                                                        "bn.bias", "body.1.weight", "body.1.bias"}));
  std::vector<std::string> buffers;
  for (const auto& [n, t] : net.named_buffers()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  std::vector<std::string> modules;
  for (const auto& [n, m] : net.named_modules()) modules.push_back(n + ":" + m->type_name());
  EXPECT_EQ(modules, (std::vector<std::string>{"fc1:Linear", "bn:BatchNorm1d", "body:Sequential", "body.0:Dropout",
                                               "body.1:Linear"}));
  EXPECT_EQ(net.parameters().size(), 7u);
  EXPECT_EQ(net.num_parameters(), 2 + 30 + 5 + 5 + 5 + 10 + 2);
  EXPECT_TRUE(net.submodule("body.0").is_training());
  net.eval();
  EXPECT_FALSE(net.submodule("body.0").is_training());
  EXPECT_FALSE(net.is_training());
  net.train();
  EXPECT_TRUE(net.bn->is_training());
  EXPECT_EQ(net.parameter("body.1.bias").shape(), (Shape{2}));
  EXPECT_NE(error_of([&] { net.parameter("body.2.bias"); }).find("known: scale, fc1.weight"), std::string::npos);
  EXPECT_NE(error_of([&] {
              net.set_parameter("fc1.weight", Variable(zeros({6, 5})));
            }).find("[6, 5]"),
            std::string::npos);
}

TEST(Module, BadRegistrationIsAnError) {
  class Bad : public Module {
   public:
    explicit Bad(int which) : Module("Bad") {
      register_parameter("w", Variable(zeros({1})));
      if (which == 0) register_parameter("w", Variable(zeros({1})));
      if (which == 1) register_module("a.b", std::make_shared<ReLU>());
      if (which == 2) register_buffer("", zeros({1}));
    }
    Variable forward(const Variable& x) override { return x; }
  };
  EXPECT_NE(error_of([] { Bad b(0); }).find("already a parameter"), std::string::npos);
  EXPECT_NE(error_of([] { Bad b(1); }).find("contains '.'"), std::string::npos);
  EXPECT_NE(error_of([] { Bad b(2); }).find("non-empty name"), std::string::npos);
}

TEST(Module, StateDictRoundTripWithSparseWeights) {
  Net a;
  a.fc1->set_parameter("weight", Variable(sparse_from_threshold(a.fc1->weight().value(), 0.2, "csr"), true));
  a.set_parameter("body.1.weight",
                  Variable(sparse_from_threshold(a.parameter("body.1.weight").value(), 0.1, "coo"), true));
  a.forward(Variable(randn({4, 6})));  // moves the running statistics
  NamedTensors state = a.state_dict();
  ASSERT_EQ(state.size(), 10u);

  Net b;
  Variable dense_kept = b.parameter("fc1.bias");
  b.load_state_dict(state);
  EXPECT_TRUE(b.parameter("fc1.bias").is_same(dense_kept));  // dense into dense: in place
  EXPECT_EQ(b.fc1->weight().value().format(), "csr");
  EXPECT_TRUE(b.fc1->weight().requires_grad());
  EXPECT_EQ(b.parameter("body.1.weight").value().format(), "coo");
  for (const auto& [n, t] : state) {
    const Tensor mine = n.find("running") != std::string::npos || n.find("tracked") != std::string::npos
                            ? b.buffer(n)
                            : b.parameter(n).value();
    EXPECT_TRUE(allclose(to_dense(mine).to(DType::kF64), to_dense(t).to(DType::kF64))) << n;
  }
  // b owns its values: updating them leaves a's alone.
  Tensor before = values(a.fc1->weight().value()).clone();
  Tensor bv = values(b.fc1->weight().value());
  bv.fill_(0.0);
  EXPECT_TRUE(allclose(values(a.fc1->weight().value()), before));
  b.load_state_dict(state);
  a.eval();
  b.eval();
  Tensor x = randn({3, 6});
  EXPECT_TRUE(allclose(a.forward(Variable(x)).value(), b.forward(Variable(x)).value()));

  // Through a safetensors file.
  const std::string path = ::testing::TempDir() + "/module_test.safetensors";
  ASSERT_TRUE(save_module(a, path).ok());
  Net c;
  absl::Status loaded = load_module(c, path);
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(c.fc1->weight().value().format(), "csr");
  EXPECT_EQ(nnz(c.fc1->weight().value()), nnz(a.fc1->weight().value()));
  c.eval();
  EXPECT_TRUE(allclose(a.forward(Variable(x)).value(), c.forward(Variable(x)).value()));

  // A model that does not fit: a Status naming the problem, nothing thrown.
  MLP other({6, 3});
  absl::Status bad = load_module(other, path);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.message()).find("missing: (none); unexpected: scale, bn.weight"), std::string::npos) << bad;
  EXPECT_FALSE(load_module(other, path + ".absent").ok());
  std::remove(path.c_str());
}

TEST(Module, LoadStateDictChecks) {
  Net net;
  NamedTensors state = net.state_dict();
  NamedTensors missing(state.begin() + 1, state.end());
  std::string e = error_of([&] { net.load_state_dict(missing); });
  EXPECT_NE(e.find("missing: scale; unexpected: (none)"), std::string::npos) << e;
  NamedTensors extra = state;
  extra.emplace_back("fc9.weight", zeros({1}));
  e = error_of([&] { net.load_state_dict(extra); });
  EXPECT_NE(e.find("missing: (none); unexpected: fc9.weight"), std::string::npos) << e;
  net.load_state_dict(extra, /*strict=*/false);  // ignored
  // Many unexpected entries (a hostile file): the message lists a few and the count.
  NamedTensors many = state;
  for (int i = 0; i < 100000; ++i) many.emplace_back(str_cat("x", i), Tensor());
  e = error_of([&] { net.load_state_dict(many); });
  EXPECT_NE(e.find("missing: (none); unexpected: x0, x1, x2, x3, x4, x5, x6, x7, ... (100000 in all)"),
            std::string::npos)
      << e.substr(0, 300);
  net.load_state_dict(many, /*strict=*/false);
  NamedTensors wrong = state;
  wrong[1].second = zeros({5, 7});
  e = error_of([&] { net.load_state_dict(wrong); });
  EXPECT_NE(e.find("'fc1.weight' has shape [5, 7], the module's is [5, 6]"), std::string::npos) << e;
  e = error_of([&] { net.load_state_dict(wrong, false); });
  EXPECT_NE(e.find("fc1.weight"), std::string::npos);
  // Nothing was changed by the refused loads; f64 values are converted.
  NamedTensors f64 = state;
  for (auto& [n, t] : f64) t = to_dtype(t, is_floating(t.dtype()) ? DType::kF64 : t.dtype());
  net.load_state_dict(f64);
  EXPECT_EQ(net.fc1->weight().dtype(), DType::kF32);
}

TEST(Module, ToDeviceAndZeroGrad) {
  Net net;
  net.fc1->set_parameter("weight", Variable(sparse_from_threshold(net.fc1->weight().value(), 0.2, "csr"), true));
  Variable out = net.forward(Variable(randn({4, 6})));
  sum(out).backward();
  EXPECT_TRUE(net.fc1->weight().grad().defined());
  net.zero_grad();
  EXPECT_FALSE(net.fc1->weight().grad().defined());
  net.to(Device::cpu());
  EXPECT_EQ(net.fc1->weight().value().format(), "csr");
  EXPECT_EQ(net.buffer("bn.running_var").device(), Device::cpu());
}

// A view changes what forward sees of a parameter, and nothing else: the
// parameter, its state_dict entry and its gradient's target stay its own.
TEST(Module, ParameterViewsAreWhatForwardSees) {
  Net net;
  const Variable w = net.fc1->weight();
  EXPECT_TRUE(net.accepts_view("fc1.weight"));
  EXPECT_TRUE(net.accepts_view("body.1.weight"));
  EXPECT_FALSE(net.accepts_view("fc1.bias"));
  EXPECT_FALSE(net.accepts_view("bn.weight"));
  EXPECT_FALSE(net.accepts_view("fc7.weight"));
  net.eval();  // dropout off
  const Variable x(randn({4, 6}));
  const Tensor plain = net.forward(x).value();
  // Forward sees twice the weight, with the gradient flowing to the weight.
  net.set_parameter_view("fc1.weight", [](const Variable& p) { return mul(p, 2.0); });
  EXPECT_EQ(to_dense(net.viewed_parameter("fc1.weight").value()).to_vector<float>(),
            mul(w.value(), 2.0).to_vector<float>());
  const Variable viewed = net.forward(x);
  EXPECT_FALSE(allclose(viewed.value(), plain));
  sum(viewed).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(net.fc1->weight().is_same(w));
  EXPECT_TRUE(net.state_dict()[1].second.is_same(w.value()));
  // A view survives replacing the parameter and is applied to the new one.
  net.fc1->set_parameter("weight", Variable(zeros({5, 6}), true));
  EXPECT_EQ(sum(net.viewed_parameter("fc1.weight").value()).item(), 0.0);
  // Removed, forward reads the parameter again.
  net.fc1->set_parameter("weight", w);
  net.set_parameter_view("fc1.weight", nullptr);
  EXPECT_TRUE(allclose(net.forward(x).value(), plain));
  // A layer that reads its parameter directly refuses a view (it would be ignored).
  const std::string e = error_of([&] { net.set_parameter_view("bn.weight", [](const Variable& p) { return p; }); });
  EXPECT_NE(e.find("parameter 'bn.weight' of BatchNorm1d cannot be seen through a view"), std::string::npos) << e;
  // Conv2d reads its weight through its view too.
  Conv2d conv(1, 2, 3);
  const Variable img(randn({1, 1, 5, 5}));
  const Tensor before = conv.forward(img).value();
  conv.set_parameter_view("weight", [](const Variable& p) { return mul(p, 0.0); });
  EXPECT_FALSE(allclose(conv.forward(img).value(), before));
}

SparsifierSpec magnitude(const char* sparsity) { return {"magnitude", {{"sparsity", sparsity}}}; }

TEST(Module, ScheduleOnTheMlp) {
  MLP mlp;  // LeNet-300-100
  EXPECT_EQ(names_of(mlp.named_parameters()),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  Variable fc1_bias = mlp.parameter("fc1.bias");
  Variable fc3_weight = mlp.parameter("fc3.weight");
  SparsityBuilder b;
  b["fc1.weight"].format("csr").sparsify(magnitude("0.9"));
  b.regex("fc2\\.weight").density(0.2);
  b["fc3.weight"].format("masked").density(0.5);
  b.output("fc1").forward({"magnitude", {{"sparsity", "0.5"}}}, "csr");
  b.output("fc2").backward({}).backward(magnitude("0.5"), "dense");
  const AppliedSchedule& applied = mlp.apply_sparsity(b.schedule());
  EXPECT_EQ(&applied, mlp.applied_schedule());

  const Tensor w1 = mlp.parameter("fc1.weight").value();
  EXPECT_EQ(w1.format(), "csr");
  EXPECT_EQ(nnz(w1), 300 * 784 - static_cast<int64_t>(std::llround(0.9 * 300 * 784)));
  EXPECT_TRUE(mlp.parameter("fc1.weight").requires_grad());
  const Tensor w2 = mlp.parameter("fc2.weight").value();
  EXPECT_EQ(w2.format(), "dense");
  EXPECT_EQ(sum(ne(w2, 0.0).to(DType::kF64)).item(), 100 * 300 * 0.2);
  const Tensor w3 = mlp.parameter("fc3.weight").value();
  EXPECT_EQ(w3.format(), "masked");
  EXPECT_EQ(nnz(w3), 500);
  EXPECT_FALSE(mlp.parameter("fc3.weight").is_same(fc3_weight));
  EXPECT_TRUE(mlp.parameter("fc1.bias").is_same(fc1_bias));  // unselected: untouched
  EXPECT_EQ(applied.parameter("fc2.weight").density, 0.2);

  // Output rules by module name, at forward time.
  EXPECT_NE(mlp.submodule("fc1").output_rule(), nullptr);
  EXPECT_NE(mlp.submodule("fc2").output_rule(), nullptr);
  EXPECT_EQ(mlp.submodule("fc3").output_rule(), nullptr);
  Variable x(randn({8, 784}));
  Variable h1 = mlp.submodule("fc1").forward(x);
  EXPECT_EQ(h1.value().format(), "csr");
  EXPECT_EQ(nnz(h1.value()), 8 * 300 / 2);

  // Forward and backward through the whole model: sparse weights keep their
  // patterns' gradients, and fc2's weight gradient is cut to its top half.
  Variable loss = cross_entropy(mlp.forward(x), randint(0, 10, {8}));
  loss.backward();
  const Tensor& g1 = mlp.parameter("fc1.weight").grad();
  EXPECT_EQ(g1.format(), "csr");
  EXPECT_EQ(pattern_version(g1), pattern_version(w1));
  EXPECT_EQ(mlp.parameter("fc3.weight").grad().format(), "masked");
  const Tensor& g2 = mlp.parameter("fc2.weight").grad();
  EXPECT_EQ(g2.format(), "dense");
  EXPECT_LE(sum(ne(g2, 0.0).to(DType::kF64)).item(), 100 * 300 / 2);

  // A bad schedule is refused before anything changes.
  SparsityBuilder bad;
  bad["fc4.weight"].format("csr");
  EXPECT_NE(error_of([&] { mlp.apply_sparsity(bad.schedule()); }).find("fc4.weight"), std::string::npos);
  EXPECT_EQ(mlp.parameter("fc1.weight").value().format(), "csr");
}

TEST(Module, RandomOutputSparsifierFollowsTheStep) {
  MLP mlp({16, 32, 4});
  SparsityBuilder b;
  b.output("fc1").forward({"random", {{"sparsity", "0.5"}}}, "dense");
  mlp.apply_sparsity(b.schedule(), SparsifyContext{7, 0, 0, 0});
  Variable x(randn({4, 16}));
  Module& fc1 = mlp.submodule("fc1");
  Tensor a = ne(fc1.forward(x).value(), 0.0), again = ne(fc1.forward(x).value(), 0.0);
  EXPECT_TRUE(allclose(a.to(DType::kF32), again.to(DType::kF32)));  // same step: same mask
  const double kept = sum(a.to(DType::kF64)).item();
  EXPECT_GT(kept, 0.3 * 128);
  EXPECT_LT(kept, 0.7 * 128);
  mlp.set_sparsity_step(1);
  Tensor next = ne(fc1.forward(x).value(), 0.0);
  EXPECT_FALSE(allclose(a.to(DType::kF32), next.to(DType::kF32)));
}

TEST(Module, ScheduleOnNestedNames) {
  auto vit = make_model({"vit", {{"depth", int64_t{1}}, {"dim", int64_t{16}}, {"heads", int64_t{2}}}});
  SparsityBuilder b;
  b.regex("blocks\\.[0-9]+\\.mlp\\.fc[12]\\.weight").format("csr").density(0.25);
  b.output_regex("blocks\\.[0-9]+\\.attn\\.qkv").forward(magnitude("0.5"), "dense");
  b.output("blocks").forward(magnitude("0.25"), "dense");
  vit->apply_sparsity(b.schedule());
  EXPECT_NE(vit->submodule("blocks").output_rule(), nullptr);
  EXPECT_EQ(vit->parameter("blocks.0.mlp.fc1.weight").value().format(), "csr");
  EXPECT_EQ(vit->parameter("blocks.0.mlp.fc2.weight").value().format(), "csr");
  EXPECT_EQ(vit->parameter("blocks.0.attn.qkv.weight").value().format(), "dense");
  EXPECT_NE(vit->submodule("blocks.0.attn.qkv").output_rule(), nullptr);
  Variable loss = cross_entropy(vit->forward(Variable(randn({2, 1, 28, 28}))), randint(0, 10, {2}));
  loss.backward();
  EXPECT_EQ(vit->parameter("blocks.0.mlp.fc1.weight").grad().format(), "csr");
}

TEST(ModelFactory, NamesOptionsAndErrors) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"char_lm", "cnn", "gcn", "gpt", "lenet5", "mlp", "sage", "vit"}));
  std::string e = error_of([] { make_model({"resnet", {}}); });
  EXPECT_NE(e.find("unknown model 'resnet'; known: char_lm, cnn, gcn, gpt, lenet5, mlp, sage, vit"), std::string::npos)
      << e;
  e = error_of([] { make_model({"mlp", {{"hidden", int64_t{3}}}}); });
  EXPECT_NE(e.find("unknown option 'hidden'; known: dtype, seed, sizes"), std::string::npos) << e;
  e = error_of([] { make_model({"vit", {{"dim", std::string("big")}}}); });
  EXPECT_NE(e.find("option 'dim': must be an integer, got a string"), std::string::npos) << e;
  e = error_of([] { make_model({"vit", {{"attention", std::string("strided")}}}); });
  EXPECT_NE(e.find("known: dense, local, block"), std::string::npos) << e;
  e = error_of([] { make_model({"mlp", {{"sizes", std::string("784,x,10")}}}); });
  EXPECT_NE(e.find("comma-separated list"), std::string::npos) << e;
  e = error_of([] { make_model({"char_lm", {{"heads", int64_t{0}}}}); });
  EXPECT_NE(e.find("'heads': must be in [1, 16777216], got 0"), std::string::npos) << e;

  auto mlp = make_model({"mlp", {{"sizes", std::string("10,4,3")}, {"seed", int64_t{5}}}});
  EXPECT_EQ(names_of(mlp->named_parameters()),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  auto again = make_model({"mlp", {{"sizes", std::string("10,4,3")}, {"seed", int64_t{5}}}});
  EXPECT_TRUE(allclose(mlp->parameter("fc1.weight").value(), again->parameter("fc1.weight").value()));
  auto f64 = make_model({"lenet5", {{"dtype", std::string("f64")}}});
  EXPECT_EQ(f64->parameter("conv1.weight").dtype(), DType::kF64);
  auto vit = make_model({"vit", {{"dropout", int64_t{0}}, {"pool", std::string("mean")}}});
  EXPECT_EQ(model_option_names("mlp"), (std::vector<std::string>{"dtype", "seed", "sizes"}));
}

}  // namespace
}  // namespace coppice
