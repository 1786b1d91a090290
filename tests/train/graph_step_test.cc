// CUDA graphs in training (train/graph_step.h, TrainComponents::cuda_graph):
// a run whose steps are replayed from a graph ends where an eager run does,
// is captured again after each mask update, and falls back to eager steps,
// saying why, where a step cannot be captured (the CPU, random draws).
#include "train/graph_step.h"

#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions/nn.h"
#include "gtest/gtest.h"
#include "optim/sgd.h"
#include "tests/train/train_test_util.h"
#include "train/loop.h"

namespace coppice {
namespace {

using testing_train::blob_loader;
using testing_train::make_mlp;
using testing_train::sparsify_weights;

#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: graph capture needs a GPU"; \
  } while (0)

MaskUpdaterConfig rigl_every(int64_t interval, int64_t end_step) {
  MaskUpdaterConfig u;
  u.end_step = end_step;
  u.interval = interval;
  u.drop_fraction = 0.3;
  u.growth = "gradient";
  u.seed = 3;
  return u;
}

struct TrainRun {
  TrainingSummary summary;
  std::vector<std::vector<double>> params;  // each parameter densified, in order
};

// 24 steps of a small MLP on blobs on `device`; CSR weights with RigL every
// 8 steps when `sparse`.
TrainRun train(Device device, bool graph, bool sparse) {
  auto model = make_mlp({32, 64, 64, 4}, 1);
  std::vector<std::string> layers;
  if (sparse) layers = sparsify_weights(*model, 0.2, 9);
  model->to(device);
  Sgd opt(model->parameters(), SgdOptions{0.05, 0.9});
  MaskUpdater updater(rigl_every(8, 20));
  for (const std::string& n : layers) updater.add_layer(n, model->parameter(n).value());
  TrainComponents c(*model, blob_loader(512, 32, 4, 64, 5, true, device), opt);
  c.device = device;
  c.steps = 24;
  c.cuda_graph = graph;
  if (sparse) c.mask_updater = &updater;
  TrainRun r;
  r.summary = run_training(c);
  for (const Variable& p : model->parameters()) r.params.push_back(to_dense(p.value()).to_vector<double>());
  return r;
}

void expect_same_run(const TrainRun& graphed, const TrainRun& eager) {
  ASSERT_EQ(graphed.summary.losses.size(), eager.summary.losses.size());
  for (size_t i = 0; i < eager.summary.losses.size(); ++i) {
    EXPECT_NEAR(graphed.summary.losses[i], eager.summary.losses[i], 1e-6 * (1 + std::abs(eager.summary.losses[i])))
        << "step " << i;
  }
  ASSERT_EQ(graphed.params.size(), eager.params.size());
  for (size_t p = 0; p < eager.params.size(); ++p) {
    ASSERT_EQ(graphed.params[p].size(), eager.params[p].size());
    for (size_t i = 0; i < eager.params[p].size(); ++i) {
      ASSERT_NEAR(graphed.params[p][i], eager.params[p][i], 1e-5) << "parameter " << p << " entry " << i;
    }
  }
}

TEST(GraphedTraining, OnTheCpuStepsRunEagerlyAndSayWhy) {
  const TrainRun graphed = train(Device::cpu(), true, false);
  const TrainRun eager = train(Device::cpu(), false, false);
  EXPECT_TRUE(graphed.summary.cuda_graph);
  EXPECT_FALSE(eager.summary.cuda_graph);
  EXPECT_EQ(graphed.summary.graph_replays, 0);
  EXPECT_NE(graphed.summary.graph_declined.find("not a CUDA device"), std::string::npos)
      << graphed.summary.graph_declined;
  EXPECT_EQ(graphed.summary.losses, eager.summary.losses);  // the same eager steps, bit for bit
  EXPECT_NE(format_summary(graphed.summary).find("cuda graphs: 0 steps replayed"), std::string::npos);
}

TEST(GraphedTraining, DenseRunMatchesTheEagerRun) {
  REQUIRE_GPU();
  const TrainRun graphed = train(Device::cuda(0), true, false);
  const TrainRun eager = train(Device::cuda(0), false, false);
  EXPECT_EQ(graphed.summary.graph_declined, "");
  EXPECT_EQ(graphed.summary.graph_captures, 1);
  EXPECT_EQ(graphed.summary.graph_replays, 24 - 1);  // all but the first (eager) step
  expect_same_run(graphed, eager);
}

TEST(GraphedTraining, SparseRunWithRigLIsCapturedAgainAfterEachMaskUpdate) {
  REQUIRE_GPU();
  const TrainRun graphed = train(Device::cuda(0), true, true);
  const TrainRun eager = train(Device::cuda(0), false, true);
  EXPECT_EQ(graphed.summary.graph_declined, "");
  // Updates after steps 0, 8 and 16 (RigL's dense-gradient steps run eagerly
  // on their own): each new pattern costs one eager step and one capture.
  ASSERT_EQ(graphed.summary.mask_updates.size(), 3u);
  EXPECT_GE(graphed.summary.graph_captures, 3);
  EXPECT_GT(graphed.summary.graph_replays, 10);
  expect_same_run(graphed, eager);
}

TEST(GraphedStep, ASmallerBatchRunsEagerlyAndKeepsTheGraph) {
  REQUIRE_GPU();
  auto model = make_mlp({8, 8, 2}, 1);
  model->to(Device::cuda(0));
  GraphedStep graph(Device::cuda(0));
  auto fn = [&](const Tensor& in, const Tensor& t) {
    const Variable logits = (*model)(Variable(in));
    const Variable loss = cross_entropy(logits, t);
    loss.backward();
    return StepOutputs{loss.value(), logits.value(), t};
  };
  auto batch = [](int64_t n) {
    return std::make_pair(full({n, 8}, 0.5, TensorOptions(DType::kF32, Device::cuda(0))),
                          zeros({n}, TensorOptions(DType::kI64, Device::cuda(0))));
  };
  for (int64_t n : {16, 16, 16, 5, 16, 16}) {  // eager, capture + replay, replay, eager, replay, replay
    model->zero_grad();
    const auto [x, y] = batch(n);
    const StepOutputs out = graph.run(*model, x, y, 1.0, fn);
    EXPECT_EQ(out.logits.size(0), n);
  }
  EXPECT_EQ(graph.declined(), "");
  EXPECT_EQ(graph.captures(), 1);
  EXPECT_EQ(graph.replays(), 4);
}

TEST(GraphedStep, RandomDrawsTurnGraphsOffAndStepsStayEager) {
  REQUIRE_GPU();
  auto model = make_mlp({8, 8, 2}, 1);
  model->to(Device::cuda(0));
  GraphedStep graph(Device::cuda(0));
  const Tensor x = full({4, 8}, 0.5, TensorOptions(DType::kF32, Device::cuda(0)));
  const Tensor y = zeros({4}, TensorOptions(DType::kI64, Device::cuda(0)));
  auto fn = [&](const Tensor& in, const Tensor& t) {
    const Variable logits = dropout((*model)(Variable(in)), 0.5, true);
    const Variable loss = cross_entropy(logits, t);
    loss.backward();
    return StepOutputs{loss.value(), logits.value(), t};
  };
  for (int i = 0; i < 4; ++i) {
    model->zero_grad();
    (void)graph.run(*model, x, y, 1.0, fn);
    for (const Variable& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
  }
  EXPECT_EQ(graph.replays(), 0);
  EXPECT_NE(graph.declined().find("random"), std::string::npos) << graph.declined();
}

}  // namespace
}  // namespace coppice
