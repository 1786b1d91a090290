// Sparsity attributes propagated through a traced step (models/propagation):
// the trace sees every op with its module; a relu MLP's hidden outputs are
// inferred CSR inputs of the next linear, by the same rule people write by
// hand, and the model trains the same with either; weights' patterns flow to
// their gradients; no rule where no kernel takes the pair, or where the
// job's own rule names the module; the ViT's attention pattern flows through
// its sampled scores.
#include "models/propagation/propagation.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "autograd/autograd.h"
#include "models/propagation/step_trace.h"
#include "models/zoo.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/generator.h"
#include "tensor/io/json.h"
#include "tests/models/test_util.h"

namespace coppice::propagation {
namespace {

// Every relu output a kernel takes, whatever its density (the structural choice).
PropagateOptions every_candidate() {
  PropagateOptions o;
  o.max_density = 1.0;
  return o;
}

ModulePtr mlp() { return make_model({"mlp", {{"sizes", std::string("8,16,12,4")}, {"seed", int64_t{3}}}}); }

Tensor features(int64_t n, uint64_t seed) {
  Generator g(seed);
  return randn({n, 8}, TensorOptions(DType::kF32, Device::cpu()), g);
}

const TracedTensor* returned_by(const StepTrace& trace, const std::string& module) {
  for (const TracedTensor& t : trace.tensors) {
    for (const std::string& m : t.returned_by) {
      if (m == module) return &t;
    }
  }
  return nullptr;
}

// The rule written by hand for a relu MLP's hidden layers (docs/guide/sparse_training.md).
OutputRule handwritten(const std::string& module) {
  SparsityBuilder b;
  StageSpec stage;
  stage.inline_sparsifier = SparsifierSpec{"threshold", {{"threshold", SpecValue(int64_t{0})}}};
  stage.output_format.name = "csr";
  b.output(module).forward(stage);
  return b.schedule().outputs.front();
}

TEST(StepTrace, SeesEveryOpWithItsModuleAndEveryParameter) {
  ModulePtr net = mlp();
  const StepTrace trace = trace_forward(*net, Variable(features(5, 1)));
  std::set<std::string> params;
  for (const TracedTensor& t : trace.tensors) {
    if (t.kind == TracedTensor::Kind::kParameter) params.insert(t.op);
  }
  EXPECT_EQ(params,
            (std::set<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  const TracedTensor* fc1 = returned_by(trace, "fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->op, "LinearRelu");
  EXPECT_EQ(fc1->module, "fc1");
  EXPECT_EQ(fc1->shape, (Shape{5, 16}));
  ASSERT_EQ(fc1->consumers.size(), 1u);
  const TracedTensor& fc2 = trace.tensors[static_cast<size_t>(fc1->consumers[0].first)];
  EXPECT_EQ(fc2.module, "fc2");
  EXPECT_EQ(fc1->consumers[0].second, 0);
  EXPECT_EQ(trace.tensors[static_cast<size_t>(trace.output)].module, "fc3");
  EXPECT_TRUE(net->is_training()) << "the trace runs in evaluation mode and gives the mode back";
}

TEST(Propagation, ReluOutputsBecomeTheNextLinearsCsrInputs) {
  ModulePtr net = mlp();
  const StepTrace trace = trace_forward(*net, Variable(features(5, 1)));
  const Plan plan = propagate(trace, DeviceType::kCpu, {}, every_candidate());
  ASSERT_EQ(plan.rules.size(), 2u);
  EXPECT_EQ(plan.rules[0].rule.selector.pattern, "fc1");
  EXPECT_EQ(plan.rules[1].rule.selector.pattern, "fc2");
  for (const InferredRule& r : plan.rules) {
    EXPECT_TRUE(same_settings(r.rule, handwritten(r.rule.selector.pattern))) << r.reason;
    EXPECT_NE(r.reason.find("linear(csr, dense) on cpu"), std::string::npos) << r.reason;
  }
  const TensorPlan& fc1 = plan.tensors[static_cast<size_t>(returned_by(trace, "fc1")->id)];
  EXPECT_EQ(describe(fc1.forward), "dense, zero where <= 0, >= 0");
  EXPECT_EQ(fc1.format, "csr");
  EXPECT_EQ(fc1.rule, "fc1");
  EXPECT_EQ(describe(fc1.gradient), str_cat("csr, pattern of #", fc1.id)) << "its gradient flows in its pattern";
  EXPECT_GT(fc1.density, 0.0);
  EXPECT_LT(fc1.density, 1.0);
  EXPECT_EQ(fc1.made_by, "gemm(dense, dense) on cpu; add(dense, dense) on cpu; relu(dense) on cpu");
  // The logits feed no linear: dense, no rule.
  const TensorPlan& logits = plan.tensors[static_cast<size_t>(trace.output)];
  EXPECT_EQ(describe(logits.forward), "dense");
  EXPECT_EQ(logits.rule, "");
  // By default (max_density 0.1) relu outputs at half density stay dense,
  // and the plan says why.
  const Plan by_default = propagate(trace, DeviceType::kCpu);
  EXPECT_TRUE(by_default.rules.empty());
  const TensorPlan& fc1_dense = by_default.tensors[static_cast<size_t>(fc1.id)];
  EXPECT_EQ(fc1_dense.format, "dense");
  EXPECT_NE(fc1_dense.left_dense.find("non-zero, above max_density 0.1"), std::string::npos) << fc1_dense.left_dense;
  // The plan lists every tensor, each as a JSON line (the measured density,
  // a fraction, is left out: the library's reader takes integers only).
  EXPECT_EQ(plan.tensors.size(), trace.tensors.size());
  const std::string jsonl = plan_jsonl(trace, plan);
  size_t lines = 0, start = 0;
  while (start < jsonl.size()) {
    const size_t end = jsonl.find('\n', start);
    std::string line = jsonl.substr(start, end - start);
    const size_t density = line.find(", \"density\": ");
    if (density != std::string::npos) line.erase(density, line.find('}', density) - density);
    ASSERT_TRUE(json::parse(line).ok()) << line;
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 1 + plan.rules.size() + plan.tensors.size());
}

TEST(Propagation, InferredRulesTrainAsTheHandwrittenOnes) {
  ModulePtr inferred = mlp(), by_hand = mlp();
  SparsitySchedule from_plan;
  from_plan.outputs = inferred_rules(
      propagate(trace_forward(*inferred, Variable(features(5, 1))), DeviceType::kCpu, {}, every_candidate()));
  inferred->apply_sparsity(from_plan);
  SparsitySchedule written;
  written.outputs = {handwritten("fc1"), handwritten("fc2")};
  by_hand->apply_sparsity(written);

  // With the rules attached, fc1's output is CSR and fc2's linear takes it.
  const StepTrace after = trace_forward(*inferred, Variable(features(5, 1)));
  EXPECT_EQ(returned_by(after, "fc1")->format, "csr");

  const Tensor x = features(16, 2);
  Generator g(4);
  const Tensor y = randint(0, 4, {16}, TensorOptions(DType::kI64, Device::cpu()), g);
  for (int step = 0; step < 5; ++step) {
    Variable a = cross_entropy(inferred->forward(Variable(x)), y);
    Variable b = cross_entropy(by_hand->forward(Variable(x)), y);
    EXPECT_EQ(a.item(), b.item()) << "step " << step;
    a.backward();
    b.backward();
    testing::sgd_step(*inferred, 0.1);
    testing::sgd_step(*by_hand, 0.1);
  }
}

TEST(Propagation, PatternsFlowToGradientsAndNoRuleWithoutAKernel) {
  ModulePtr net = mlp();
  SparsityBuilder b;
  b["fc2.weight"].format("csr").density(0.5);
  net->apply_sparsity(b.schedule());
  const StepTrace trace = trace_forward(*net, Variable(features(5, 1)));
  const Plan plan = propagate(trace, DeviceType::kCpu, {}, every_candidate());
  // fc1's output feeds fc2, whose weight is CSR: no kernel multiplies two
  // CSR operands in a linear, so fc1 keeps a dense output; fc2's feeds fc3.
  ASSERT_EQ(plan.rules.size(), 1u);
  EXPECT_EQ(plan.rules[0].rule.selector.pattern, "fc2");
  for (const TensorPlan& p : plan.tensors) {
    if (p.name.rfind("fc1:", 0) == 0) {
      EXPECT_EQ(p.left_dense, "fc2's SparseLinearRelu has no kernel taking it as CSR on cpu") << p.name;
    }
    if (p.name != "fc2.weight") continue;
    EXPECT_EQ(describe(p.forward), str_cat("csr, pattern of #", p.id));
    EXPECT_EQ(describe(p.gradient), describe(p.forward)) << "a masked weight's gradient stays masked";
  }
}

TEST(Propagation, TheJobsOwnRuleWins) {
  ModulePtr net = mlp();
  SparsityBuilder b;
  b.output_regex("fc[1]").forward({"magnitude", {{"sparsity", "0.5"}}}, "csr");
  const StepTrace trace = trace_forward(*net, Variable(features(5, 1)));
  const Plan plan = propagate(trace, DeviceType::kCpu, b.schedule().outputs, every_candidate());
  ASSERT_EQ(plan.rules.size(), 1u);
  EXPECT_EQ(plan.rules[0].rule.selector.pattern, "fc2");
}

// LeNet-5: relu(conv) then max_pool keeps the relu's zeros (the max of a
// relu is the relu of the max), and flatten keeps them too: the attributes
// follow the rules table through ops that are not linears.
TEST(Propagation, ReluZerosFlowThroughPoolingAndShapeOps) {
  auto lenet = make_model({"lenet5", {{"seed", int64_t{2}}}});
  Generator g(6);
  const Tensor x = randn({2, 1, 28, 28}, TensorOptions(DType::kF32, Device::cpu()), g);
  const StepTrace trace = trace_forward(*lenet, Variable(x));
  const Plan plan = propagate(trace, DeviceType::kCpu, {}, every_candidate());
  std::set<std::string> seen;
  for (const TensorPlan& p : plan.tensors) {
    const std::string& op = trace.tensors[static_cast<size_t>(p.id)].op;
    if (op == "Relu" || op == "MaxPool2d" || op == "Flatten") {
      EXPECT_EQ(describe(p.forward), "dense, zero where <= 0, >= 0") << p.name;
      seen.insert(op);
    }
    if (op == "Conv2d") { EXPECT_EQ(describe(p.forward), "dense") << p.name; }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"Relu", "MaxPool2d", "Flatten"}));
}

TEST(Propagation, AttentionPatternFlowsThroughItsScores) {
  auto vit = make_model(
      {"vit",
       {{"seed", int64_t{13}}, {"attention", std::string("block")}, {"block", int64_t{4}}, {"dim", int64_t{32}}}});
  Generator g(5);
  const Tensor x = randn({2, 1, 28, 28}, TensorOptions(DType::kF32, Device::cpu()), g);
  const StepTrace trace = trace_forward(*vit, Variable(x));
  const Plan plan = propagate(trace, DeviceType::kCpu, {}, every_candidate());
  EXPECT_TRUE(plan.rules.empty()) << "a GELU MLP makes no zeros";
  int sparse = 0;
  for (const TensorPlan& p : plan.tensors) {
    if (p.forward.zeros != Attribute::Zeros::kPattern || p.name.find("attn") == std::string::npos) continue;
    ++sparse;
    EXPECT_EQ(p.gradient.pattern_of, p.forward.pattern_of) << p.name;
  }
  EXPECT_GT(sparse, 0) << "the sampled scores and their softmax carry the attention pattern";
}

}  // namespace
}  // namespace coppice::propagation
