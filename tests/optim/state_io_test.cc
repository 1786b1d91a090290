// Optimizer state in safetensors (optim/state_io.h): a round trip continues
// training identically; mismatches are refused naming the first one.
#include "optim/state_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "tensor/io/safetensors.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using optim_test::random_pattern;
using optim_test::random_tensor;

struct Model {
  Variable w, b;
};

Model make_model() {
  const Tensor keep = random_pattern({6, 8}, 0.3, 5);
  return {Variable(sparse_from_mask(random_tensor({6, 8}, 6), keep, "csr"), true, "fc.weight"),
          Variable(random_tensor({6}, 7), true, "fc.bias")};
}

Model copy_model(const Model& m) {
  return {Variable(with_values(m.w.value(), values(m.w.value()).clone()), true, "fc.weight"),
          Variable(m.b.value().clone(), true, "fc.bias")};
}

void train(Optimizer& opt, const Model& m, int from, int steps) {
  for (int s = from; s < from + steps; ++s) {
    m.w.set_grad(with_values(m.w.value(), random_tensor(values(m.w.value()).shape(), 300 + s)));
    m.b.set_grad(random_tensor({6}, 600 + s));
    opt.step();
  }
}

std::string temp_path() { return ::testing::TempDir() + "/optim_state_" + std::to_string(getpid()) + ".safetensors"; }

TEST(StateIoTest, RoundTripContinuesIdentically) {
  Model m = make_model();
  AdamWOptions o;
  o.lr = 0.02;
  AdamW opt({ParamGroup{{m.w}, {}}, ParamGroup{{m.b}, {{"weight_decay", 0.0}}}}, o);
  train(opt, m, 0, 5);
  opt.set_option(0, "lr", 0.0123);  // a scheduler's doing
  const std::string path = temp_path();
  ASSERT_TRUE(save_optimizer_state(opt, path).ok());
  Model m2 = copy_model(m);
  AdamW opt2({ParamGroup{{m2.w}, {}}, ParamGroup{{m2.b}, {}}}, AdamWOptions{});
  const absl::Status s = load_optimizer_state(opt2, path);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(opt2.option(0, "lr"), 0.0123);
  EXPECT_EQ(opt2.option(1, "weight_decay"), 0.0);
  EXPECT_EQ(opt2.state(m2.w)->step, 5);
  train(opt, m, 5, 5);
  train(opt2, m2, 5, 5);
  EXPECT_EQ(values(m.w.value()).to_vector<float>(), values(m2.w.value()).to_vector<float>());
  EXPECT_EQ(m.b.value().to_vector<float>(), m2.b.value().to_vector<float>());
  // The file holds "<param name>.<state>".
  absl::StatusOr<SafetensorsFile> file = read_safetensors(path);
  ASSERT_TRUE(file.ok());
  ASSERT_NE(file->find("fc.weight.exp_avg"), nullptr);
  EXPECT_EQ(file->find("fc.weight.exp_avg")->numel(), nnz(m.w.value()));
  EXPECT_NE(file->find("fc.bias.exp_avg_sq"), nullptr);
  EXPECT_EQ(file->metadata.at("coppice.optimizer"), "adamw");
  EXPECT_EQ(file->metadata.at("step.fc.bias"), "5");
  std::remove(path.c_str());
}

TEST(StateIoTest, SgdWithoutStateYetRoundTrips) {
  Model m = make_model();
  SgdOptions o;
  o.momentum = 0.9;
  Sgd opt({m.w, m.b}, o);
  absl::StatusOr<std::string> bytes = serialize_optimizer_state(opt);
  ASSERT_TRUE(bytes.ok());
  Model m2 = copy_model(m);
  Sgd opt2({m2.w, m2.b}, o);
  EXPECT_TRUE(parse_optimizer_state(opt2, *bytes).ok());
  EXPECT_EQ(opt2.state(m2.w), nullptr);
}

std::string load_error(Optimizer& opt, const std::string& bytes) {
  absl::Status s = parse_optimizer_state(opt, bytes);
  return s.ok() ? std::string("(ok)") : std::string(s.message());
}

TEST(StateIoTest, MismatchesNameTheFirstOne) {
  Model m = make_model();
  Adam opt({m.w, m.b}, AdamOptions{});
  train(opt, m, 0, 2);
  const std::string bytes = *serialize_optimizer_state(opt);

  {  // another optimizer
    Model m2 = copy_model(m);
    AdamW other({m2.w, m2.b});
    EXPECT_NE(load_error(other, bytes).find("'adam'"), std::string::npos) << load_error(other, bytes);
  }
  {  // another parameter name
    Model m2 = copy_model(m);
    Variable renamed(m2.b.value(), true, "fc.bias2");
    Adam other({m2.w, renamed}, AdamOptions{});
    const std::string e = load_error(other, bytes);
    EXPECT_NE(e.find("'fc.bias'"), std::string::npos) << e;
    EXPECT_NE(e.find("'fc.bias2'"), std::string::npos) << e;
  }
  {  // another shape (a different pattern), and the optimizer is left alone
    Model m2 = copy_model(m);
    Variable w(sparse_from_mask(random_tensor({6, 8}, 6), random_pattern({6, 8}, 0.9, 1), "csr"), true, "fc.weight");
    Adam other({w, m2.b}, AdamOptions{});
    w.set_grad(with_values(w.value(), random_tensor(values(w.value()).shape(), 1)));
    other.step();
    const std::string e = load_error(other, bytes);
    EXPECT_NE(e.find("'fc.weight.exp_avg'"), std::string::npos) << e;
    EXPECT_NE(e.find("shape"), std::string::npos) << e;
    EXPECT_EQ(other.state(w)->step, 1);
  }
  {  // another dtype
    Variable w(to_dtype(m.w.value(), DType::kF64), true, "fc.weight");
    Variable b(m.b.value().to(DType::kF64), true, "fc.bias");
    Adam other({w, b}, AdamOptions{});
    const std::string e = load_error(other, bytes);
    EXPECT_NE(e.find("dtype"), std::string::npos) << e;
  }
  {  // a tensor missing
    absl::StatusOr<SafetensorsFile> f = parse_safetensors(bytes);
    ASSERT_TRUE(f.ok());
    NamedTensors ts;
    for (const auto& kv : f->tensors) {
      if (kv.first != "fc.bias.exp_avg_sq") ts.push_back(kv);
    }
    const std::string cut = *serialize_safetensors(ts, f->metadata);
    Model m2 = copy_model(m);
    Adam other({m2.w, m2.b}, AdamOptions{});
    const std::string e = load_error(other, cut);
    EXPECT_NE(e.find("'fc.bias.exp_avg_sq'"), std::string::npos) << e;
  }
  {  // not an optimizer state at all
    Model m2 = copy_model(m);
    Adam other({m2.w, m2.b}, AdamOptions{});
    EXPECT_FALSE(parse_optimizer_state(other, *serialize_safetensors({{"x", random_tensor({2}, 1)}})).ok());
    EXPECT_FALSE(parse_optimizer_state(other, "garbage").ok());
  }
}

TEST(StateIoTest, UnnamedParametersCannotBeSaved) {
  Variable w(random_tensor({2}, 1), true);
  Sgd opt({w}, SgdOptions{});
  EXPECT_FALSE(serialize_optimizer_state(opt).ok());
}

}  // namespace
}  // namespace coppice
