// The training loop (train/loop.h): LeNet-300-100 learns synthetic data dense
// and with RigL at 90 % sparsity, dense gradients appear on mask-update steps
// only, GMP prunes, weights made dense after densify_step keep their values
// and optimizer state, and a run interrupted and resumed from a checkpoint in
// freshly built components ends bit for bit where an uninterrupted one does
// (dense with Adam, cosine LR and clipping; CSR with RigL updates on both
// sides of the checkpoint; CSR made dense before or after it).
#include "train/loop.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/route_choices.h"
#include "sparse/sparse_impl.h"
#include "tensor/generator.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/summary.h"

namespace coppice {
namespace {

using testing_train::blob_loader;
using testing_train::make_mlp;
using testing_train::parameter_bits;
using testing_train::sparsify_weights;
using testing_train::temp_dir;

double mean(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to), 0.0) /
         static_cast<double>(to - from);
}

MaskUpdaterConfig rigl_config(int64_t end_step, int64_t interval) {
  MaskUpdaterConfig u;
  u.start_step = 0;
  u.end_step = end_step;
  u.interval = interval;
  u.drop_fraction = 0.3;
  u.schedule = DropSchedule::kCosine;
  u.growth = "gradient";
  u.seed = 3;
  return u;
}

TEST(RunTraining, LeNet300100LearnsDense) {
  auto model = make_mlp({784, 300, 100, 10}, 1);
  Sgd opt(model->parameters(), SgdOptions{0.05, 0.9});
  TrainComponents c(*model, blob_loader(640, 784, 10, 64, 5), opt);
  c.test = blob_loader(256, 784, 10, 128, 5, false);
  c.steps = 60;
  const TrainingSummary s = run_training(c);
  ASSERT_EQ(s.losses.size(), 60u);
  EXPECT_LT(mean(s.losses, 50, 60), 0.5 * mean(s.losses, 0, 10));
  EXPECT_TRUE(s.dense_gradient_steps.empty());
  ASSERT_TRUE(s.test.has_value());
  EXPECT_GT(s.test->accuracy, 0.5);
  EXPECT_EQ(s.model.linear_flops_dense, s.model.linear_flops_sparse);
}

TEST(RunTraining, LeNet300100LearnsWithRigLAt90PercentAndDenseGradientsOnlyOnUpdateSteps) {
  auto model = make_mlp({784, 300, 100, 10}, 1);
  const std::vector<std::string> layers = sparsify_weights(*model, 0.1, 9);
  Sgd opt(model->parameters(), SgdOptions{0.05, 0.9});
  MaskUpdater updater(rigl_config(50, 10));
  for (const std::string& n : layers) updater.add_layer(n, model->parameter(n).value());
  TrainComponents c(*model, blob_loader(640, 784, 10, 64, 5), opt);
  c.test = blob_loader(256, 784, 10, 128, 5, false);
  c.mask_updater = &updater;
  c.steps = 60;
  std::set<int64_t> seen;
  c.on_dense_gradient = [&](int64_t step, const std::string&) { seen.insert(step); };
  // Between updates every sparse weight's gradient is compact: CSR in its
  // pattern (nnz-sized values).
  int64_t compact_checked = 0;
  c.on_step_end = [&](int64_t step) {
    if (updater.is_update_step(step)) return;
    for (const std::string& n : layers) {
      const Variable& w = model->parameter(n);
      ASSERT_TRUE(w.grad().defined()) << n << " at step " << step;
      ASSERT_EQ(w.grad().format(), "csr") << n << " at step " << step;
      ASSERT_EQ(pattern_version(w.grad()), pattern_version(w.value()));
      ++compact_checked;
    }
  };
  const TrainingSummary s = run_training(c);
  EXPECT_EQ(compact_checked, 3 * 55);

  EXPECT_LT(mean(s.losses, 50, 60), 0.5 * mean(s.losses, 0, 10));
  EXPECT_EQ(s.dense_gradient_steps, (std::vector<int64_t>{0, 10, 20, 30, 40}));
  EXPECT_EQ(seen, (std::set<int64_t>{0, 10, 20, 30, 40}));
  ASSERT_EQ(s.mask_updates.size(), 5u);
  int64_t grown = 0;
  for (const MaskUpdateStats& m : s.mask_updates) {
    for (const auto& [name, g] : m.grown) {
      EXPECT_EQ(g, m.dropped.at(name)) << name;
      grown += g;
    }
  }
  EXPECT_GT(grown, 0);
  // The density is kept, the weights stay CSR, and the optimizer steps the
  // model's current parameters.
  for (const LayerStats& l : s.model.layers) {
    EXPECT_EQ(l.format, "csr") << l.name;
    EXPECT_NEAR(l.density, 0.1, 1e-3) << l.name;
  }
  for (const std::string& n : layers) {
    bool found = false;
    for (const Variable& p : opt.param_groups()[0].params) found = found || p.is_same(model->parameter(n));
    EXPECT_TRUE(found) << n;
  }
  EXPECT_LT(s.model.linear_flops_sparse * 5, s.model.linear_flops_dense);
  ASSERT_TRUE(s.test.has_value());
  EXPECT_GT(s.test->accuracy, 0.3);
}

// Block RigL on one rank: BSR weights are not swapped for dense leaves (the
// view probes their gradients' factors for block scores), stay BSR with whole
// blocks and their density through every update, and the model learns.
TEST(RunTraining, BlockRigLOnOneRankProbesInsteadOfSwapping) {
  auto model = make_mlp({64, 64, 32, 8}, 1);
  std::vector<std::string> layers;
  Generator gen(5);
  for (const auto& [name, p] : model->named_parameters()) {
    if (p.dim() != 2) continue;
    const int64_t br = p.shape()[0] / 8, bc = p.shape()[1] / 8;
    const Tensor keep = lt(rand({br, 1, bc, 1}, TensorOptions(DType::kF32), gen), 0.4)
                            .expand({br, 8, bc, 8})
                            .contiguous()
                            .reshape(p.shape());
    model->set_parameter(name, Variable(sparse_from_mask(p.value(), keep, "bsr", FormatOptions::block(8)), true, name));
    layers.push_back(name);
  }
  std::map<std::string, int64_t> nnz0;
  for (const std::string& n : layers) nnz0[n] = nnz(model->parameter(n).value());
  Sgd opt(model->parameters(), SgdOptions{0.05, 0.9});
  MaskUpdater updater(rigl_config(40, 10));
  for (const std::string& n : layers) updater.add_layer(n, model->parameter(n).value());
  TrainComponents c(*model, blob_loader(640, 64, 8, 64, 5), opt);
  c.mask_updater = &updater;
  c.steps = 50;
  std::set<int64_t> swapped;
  c.on_dense_gradient = [&](int64_t step, const std::string&) { swapped.insert(step); };
  const TrainingSummary s = run_training(c);
  EXPECT_TRUE(swapped.empty());  // probed, not swapped
  EXPECT_EQ(s.dense_gradient_steps, (std::vector<int64_t>{0, 10, 20, 30}));
  ASSERT_EQ(s.mask_updates.size(), 4u);
  int64_t grown = 0;
  for (const MaskUpdateStats& m : s.mask_updates) {
    for (const auto& [name, g] : m.grown) {
      EXPECT_EQ(g % 64, 0) << name;  // whole 8x8 blocks
      grown += g;
    }
  }
  EXPECT_GT(grown, 0);
  for (const std::string& n : layers) {
    EXPECT_EQ(model->parameter(n).value().format(), "bsr") << n;
    EXPECT_EQ(nnz(model->parameter(n).value()), nnz0[n]) << n;
  }
  EXPECT_LT(mean(s.losses, 40, 50), 0.7 * mean(s.losses, 0, 10));
}

// SET grows at random: no dense gradient, ever. SNFS reads the momentum.
TEST(RunTraining, SetNeverMaterializesDenseGradientsAndSnfsRuns) {
  for (const char* growth : {"random", "momentum"}) {
    auto model = make_mlp({20, 32, 16, 4}, 1);
    const std::vector<std::string> layers = sparsify_weights(*model, 0.2, 9);
    Sgd opt(model->parameters(), SgdOptions{0.05, 0.9});
    MaskUpdaterConfig u = rigl_config(20, 5);
    u.growth = growth;
    MaskUpdater updater(u);
    for (const std::string& n : layers) updater.add_layer(n, model->parameter(n).value());
    TrainComponents c(*model, blob_loader(128, 20, 4, 16, 2), opt);
    c.mask_updater = &updater;
    c.epochs = 3;  // 8 batches per epoch
    const TrainingSummary s = run_training(c);
    EXPECT_EQ(s.final_step, 24) << growth;
    EXPECT_TRUE(s.dense_gradient_steps.empty()) << growth;
    EXPECT_EQ(s.mask_updates.size(), 4u) << growth;
    int64_t total_nnz = 0;
    for (const LayerStats& l : s.model.layers) total_nnz += l.nnz;
    EXPECT_EQ(total_nnz, static_cast<int64_t>(0.2 * 20 * 32 + 0.5) + static_cast<int64_t>(0.2 * 32 * 16 + 0.5) +
                             static_cast<int64_t>(0.2 * 16 * 4 + 0.5))
        << growth;
  }
}

TEST(RunTraining, GmpPrunesToTheFinalDensity) {
  auto model = make_mlp({20, 32, 4}, 1);
  sparsify_weights(*model, 1.0, 9);
  Sgd opt(model->parameters(), SgdOptions{0.05});
  GmpConfig g;
  g.initial_density = 1.0;
  g.final_density = 0.25;
  g.start_step = 2;
  g.end_step = 12;
  g.frequency = 2;
  GmpPruner pruner(g);
  TrainComponents c(*model, blob_loader(128, 20, 4, 16, 2), opt);
  c.gmp = &pruner;
  c.steps = 16;
  const TrainingSummary s = run_training(c);
  EXPECT_TRUE(s.dense_gradient_steps.empty());
  for (const LayerStats& l : s.model.layers) EXPECT_NEAR(l.density, 0.25, 0.01) << l.name;
}

TEST(RunTraining, RefusesBadComponents) {
  auto model = make_mlp({4, 3}, 1);
  Sgd opt(model->parameters(), SgdOptions{0.1});
  TrainComponents c(*model, blob_loader(32, 4, 3, 8, 1), opt);
  EXPECT_THROW(run_training(c), Error);  // neither steps nor epochs
  c.steps = 3;
  c.epochs = 1;
  EXPECT_THROW(run_training(c), Error);
  c.epochs = 0;
  c.resume = "/nonexistent/checkpoints";
  try {
    run_training(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/checkpoints"), std::string::npos) << e.what();
  }
}

// ---- bit-identical resume ---------------------------------------------------------

struct Job {
  std::shared_ptr<MLP> model;
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<LrScheduler> sched;
  std::unique_ptr<MaskUpdater> updater;
  std::unique_ptr<TrainComponents> c;
};

// Builds everything from scratch, as a new process would. `movement`: the
// updater prunes by movement score and grows at random (SET) instead of RigL.
// `densify_step` > 0: the masks change until then and the weights become
// dense after it (TrainComponents::densify_step).
Job build_job(bool sparse, int64_t total_steps, bool movement = false, int64_t densify_step = 0) {
  manual_seed(777);  // whatever the previous run left, a fresh process starts here
  Job j;
  j.model = make_mlp({12, 24, 16, 3}, 11);
  std::vector<std::string> layers;
  if (sparse) layers = sparsify_weights(*j.model, 0.3, 4);
  if (sparse) {
    j.opt = std::make_unique<Sgd>(j.model->parameters(), SgdOptions{0.05, 0.9, 0.0, 1e-4, true});
  } else {
    AdamOptions a;
    a.lr = 0.01;
    j.opt = std::make_unique<Adam>(j.model->parameters(), a);
  }
  j.sched = std::make_unique<LrScheduler>(*j.opt, linear_warmup(3, 0.1, cosine_lr(total_steps)));
  j.c = std::make_unique<TrainComponents>(*j.model, blob_loader(90, 12, 3, 16, 8), *j.opt);
  j.c->scheduler = j.sched.get();
  j.c->grad_clip = 1.0;
  j.c->steps = total_steps;
  if (sparse) {
    MaskUpdaterConfig u = rigl_config(densify_step > 0 ? densify_step : total_steps, 4);
    if (movement) {
      u.prune = PruneCriterion::kMovement;
      u.growth = "random";
    }
    j.updater = std::make_unique<MaskUpdater>(u);
    for (const std::string& n : layers) j.updater->add_layer(n, j.model->parameter(n).value());
    j.c->mask_updater = j.updater.get();
    j.c->densify_step = densify_step;
  }
  return j;
}

void expect_resume_bit_identical(bool sparse, bool movement = false, int64_t densify_step = 0) {
  const int64_t n = 11, total = 2 * n;  // 5 batches per epoch: the checkpoint is mid-epoch
  Job straight = build_job(sparse, total, movement, densify_step);
  const TrainingSummary a = run_training(*straight.c);
  ASSERT_EQ(a.final_step, total);
  const std::vector<std::string> want = parameter_bits(*straight.model);

  const std::string dir = temp_dir(densify_step > 0 ? "resume_densify_" + std::to_string(densify_step)
                                   : movement       ? "resume_movement"
                                   : sparse         ? "resume_sparse"
                                                    : "resume_dense");
  std::string last;
  {
    Job first = build_job(sparse, total, movement, densify_step);
    first.c->stop_at_step = n;
    first.c->checkpoint_dir = dir;
    first.c->checkpoint_every = 4;  // 4 and 8, then 11 at the stop; the newest two are kept
    first.c->keep_last = 2;
    const TrainingSummary b = run_training(*first.c);
    ASSERT_EQ(b.final_step, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a.losses[i], b.losses[i]) << "step " << i;
    auto list = list_checkpoints(dir);
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 2u);
    EXPECT_EQ((*list)[0].step, 8);
    EXPECT_EQ((*list)[1].step, n);
    EXPECT_EQ((*list)[0].run_id, (*list)[1].run_id);
    EXPECT_TRUE(is_run_id((*list)[1].run_id));
    ASSERT_EQ(b.last_checkpoint, dir + "/" + checkpoint_file_name(n, (*list)[1].run_id));
    last = b.last_checkpoint;
  }
  Job second = build_job(sparse, total, movement, densify_step);
  // The directory (its newest checkpoint) or the file itself.
  second.c->resume = sparse ? last : dir;
  const TrainingSummary c = run_training(*second.c);
  EXPECT_EQ(c.start_step, n);
  ASSERT_EQ(c.final_step, total);
  ASSERT_EQ(c.losses.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a.losses[n + i], c.losses[i]) << "step " << n + i;
  if (densify_step > 0) {
    // The weights were made dense on one side of the checkpoint or the other.
    for (const auto& [name, p] : second.model->named_parameters()) EXPECT_TRUE(p.value().is_dense()) << name;
    EXPECT_EQ(c.mask_updates.empty(), densify_step <= n);
  } else if (sparse) {
    // Mask updates happened on both sides of the checkpoint.
    EXPECT_FALSE(c.mask_updates.empty());
    const std::vector<int64_t> want_dense = movement ? std::vector<int64_t>() : std::vector<int64_t>{12, 16, 20};
    EXPECT_EQ(c.dense_gradient_steps, want_dense);
  }
  EXPECT_EQ(parameter_bits(*second.model), want);
  EXPECT_EQ(second.sched->current_step(), straight.sched->current_step());
  EXPECT_EQ(second.opt->option(0, "lr"), straight.opt->option(0, "lr"));
}

TEST(RunTraining, ResumeIsBitIdenticalDense) { expect_resume_bit_identical(false); }
TEST(RunTraining, ResumeIsBitIdenticalSparseCsrWithRigL) { expect_resume_bit_identical(true); }
// The movement scores travel in the checkpoint (updater.*).
TEST(RunTraining, ResumeIsBitIdenticalSparseCsrWithMovementPruningAndSet) { expect_resume_bit_identical(true, true); }

// Made dense after step 8, before the checkpoint at 11, which holds the
// weights dense and no updater state: the resumed run makes its CSR weights
// dense before loading it. Made dense after step 16: the checkpoint is
// sparse and the resumed run makes them dense itself.
TEST(RunTraining, ResumeIsBitIdenticalAfterDensify) { expect_resume_bit_identical(true, false, 8); }
TEST(RunTraining, ResumeIsBitIdenticalBeforeDensify) { expect_resume_bit_identical(true, false, 16); }

// ---- sparse to dense --------------------------------------------------------------

// CSR weights with RigL until step 10, made dense after it: the first 10
// steps are the sparse run's, bit for bit; then every weight is dense, its
// stored values the sparse run's where they were (zeros elsewhere) and its
// optimizer state the sparse run's scattered alike, the densify recorded as
// a mask change of step 9 that grew every unstored entry; the loss goes on
// and the entries never stored train.
TEST(RunTraining, DensifyMakesEveryWeightDenseKeepingItsValuesAndState) {
  const int64_t densify = 10, total = 16;
  Job sparse = build_job(true, total, false, densify);
  sparse.c->densify_step = 0;
  sparse.c->stop_at_step = densify;
  const TrainingSummary a = run_training(*sparse.c);

  Job job = build_job(true, total, false, densify);
  std::map<std::string, Tensor> at_densify, at_end;  // the weights after step 9 and after the last
  std::map<std::string, ParamState> state_at_densify;
  job.c->on_step_end = [&](int64_t t) {
    for (const auto& [name, p] : job.model->named_parameters()) {
      if (p.dim() != 2) continue;
      if (t < densify - 1) { EXPECT_TRUE(p.value().is_sparse()) << name << " at step " << t; }
      if (t == densify - 1) {
        at_densify[name] = p.value().clone();
        // The step kernels update the state in place: a copy of what it holds now.
        ParamState copy = *job.opt->state(p);
        for (auto& [key, tensor] : copy.tensors) tensor = tensor.clone();
        state_at_densify[name] = copy;
      }
      if (t == total - 1) at_end[name] = p.value();
    }
  };
  const TrainingSummary b = run_training(*job.c);
  ASSERT_EQ(b.final_step, total);
  for (int64_t i = 0; i < densify; ++i) ASSERT_EQ(a.losses[i], b.losses[i]) << "step " << i;
  for (double loss : b.losses) EXPECT_TRUE(std::isfinite(loss));
  ASSERT_FALSE(b.mask_updates.empty());
  const MaskUpdateStats& last = b.mask_updates.back();
  EXPECT_EQ(last.step, densify - 1);

  ASSERT_EQ(at_densify.size(), 3u);
  for (const auto& [name, p] : sparse.model->named_parameters()) {
    if (p.dim() != 2) continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.value().is_sparse());
    const Tensor& dense = at_densify.at(name);
    ASSERT_TRUE(dense.is_dense());
    EXPECT_EQ(to_dense(p.value()).to_vector<float>(), dense.to_vector<float>());
    EXPECT_EQ(last.grown.at(name), p.numel() - nnz(p.value()));
    EXPECT_EQ(last.dropped.at(name), 0);
    const ParamState& was = *sparse.opt->state(p);
    const ParamState& now = state_at_densify.at(name);
    EXPECT_EQ(now.step, was.step);
    ASSERT_EQ(now.tensors.size(), was.tensors.size());
    for (const auto& [key, t] : was.tensors)
      EXPECT_EQ(to_dense(with_values(p.value(), t)).to_vector<float>(), now.tensors.at(key).to_vector<float>()) << key;
    // Dense training moves the entries the sparse run never stored (all but
    // those a dead ReLU unit gives no gradient).
    const std::vector<float> before = dense.to_vector<float>(), after = at_end.at(name).to_vector<float>();
    int64_t moved = 0;
    for (size_t i = 0; i < before.size(); ++i) moved += before[i] == 0.0f && after[i] != 0.0f;
    EXPECT_GT(moved, (p.numel() - nnz(p.value())) / 2);
  }
  EXPECT_TRUE(b.dense_gradient_steps.back() < densify);
  for (const LayerStats& l : b.model.layers) EXPECT_EQ(l.format, "dense") << l.name;
}

// The planners' measured decisions (sparse/route_choices.h) travel in the
// checkpoint and the summary: a resumed run computes with the routes of the
// run it continues instead of measuring again (on the CPU no planner
// measures, so the test records one as a CUDA planner would).
TEST(RunTraining, RouteChoicesTravelInTheCheckpointAndTheSummary) {
  clear_route_choices();
  const std::vector<std::string_view> routes = {"sparse", "dense"};
  choose_route("nm24", "GPU|k", routes, [] { return std::vector<double>{2.0, 1.0}; });
  const std::string dir = temp_dir("resume_routes");
  Job first = build_job(false, 6);
  first.c->stop_at_step = 3;
  first.c->checkpoint_dir = dir;
  first.c->checkpoint_every = 3;
  const TrainingSummary a = run_training(*first.c);
  EXPECT_NE(a.route_choices.find("\"winner\":\"dense\""), std::string::npos) << a.route_choices;
  EXPECT_NE(summary_json(a).str().find("\"route_choices\":[{\"decision\":\"nm24\""), std::string::npos);

  clear_route_choices();  // a new process
  Job second = build_job(false, 6);
  second.c->resume = dir;
  run_training(*second.c);
  const std::vector<RouteChoice> restored = recorded_route_choices();
  ASSERT_EQ(restored.size(), 1u);
  EXPECT_EQ(restored[0].source, RouteSource::kRestored);
  EXPECT_EQ(choose_route("nm24", "GPU|k", routes,
                         [] {
                           ADD_FAILURE() << "measured again after the resume";
                           return std::vector<double>{1.0, 2.0};
                         }),
            1u);
  clear_route_choices();
}

}  // namespace
}  // namespace coppice
