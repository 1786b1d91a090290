// Data-parallel training on the in-process backend (2 and 4 ranks as
// threads): N ranks with batch B train exactly as one rank with batch N * B
// (dense, compact-sparse CSR, RigL), every rank holds the same masks, a rank
// that dies or hangs ends the job with an error instead of a hang while the
// last checkpoint stays loadable, ranks whose masks drift apart are stopped,
// and the trainer binary runs a distributed job.

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/inproc_communicator.h"
#include "distributed/replica_sync.h"
#include "gtest/gtest.h"
#include "optim/sgd.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tests/train/train_test_util.h"
#include "tests/util/error_matchers.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/job.h"
#include "train/loop.h"

namespace coppice {
namespace {

using testing_train::make_mlp;
using testing_train::run_trainer;
using testing_train::RunResult;
using testing_train::sparsify_weights;
using testing_train::temp_dir;

// A small synthetic job: 320 examples (a multiple of every global batch
// below, so no rank pads), 30 steps, a final checkpoint in `ckpt`.
std::string job_yaml(int world, int64_t global_batch, const std::string& ckpt, const std::string& extra) {
  std::ostringstream y;
  y << "seed: 5\n"
       "device: cpu\n"
       "model: {name: mlp, options: {sizes: [20, 24, 16, 3]}}\n"
       "data:\n"
       "  dataset: synthetic\n"
       "  batch_size: "
    << global_batch / world
    << "\n"
       "  eval_batch_size: 16\n"
       "  synthetic: {examples: 320, test_examples: 96, features: 20, classes: 3, center_scale: 1.0, spread: 1.0}\n"
       "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
       "training: {steps: 30}\n"
       "logging: {progress: false}\n"
       "checkpoint: {dir: '"
    << ckpt
    << "'}\n"
       "distributed: {world_size: "
    << world << ", backend: inproc, timeout_s: 60}\n"
    << extra;
  return y.str();
}

JobConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> job = parse_job_config(yaml, overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// The model's tensors in the newest checkpoint of `dir` ("model.<name>").
std::map<std::string, Tensor> checkpoint_model(const std::string& dir) {
  absl::StatusOr<ResolvedCheckpoint> path = resolve_checkpoint(dir);
  EXPECT_TRUE(path.ok()) << path.status();
  absl::StatusOr<SparseSafetensorsFile> f = read_sparse_safetensors(path->path);
  EXPECT_TRUE(f.ok()) << f.status();
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : f->tensors) {
    if (name.rfind("model.", 0) == 0) out[name] = t;
  }
  return out;
}

// Same patterns exactly; values within `tol`.
void expect_same_model(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, ta] : a) {
    const Tensor& tb = b.at(name);
    ASSERT_EQ(ta.layout(), tb.layout()) << name;
    EXPECT_EQ(pattern_fingerprint(ta), pattern_fingerprint(tb)) << name << ": the patterns differ";
    const std::vector<double> va = to_dense(ta).to_vector<double>(), vb = to_dense(tb).to_vector<double>();
    ASSERT_EQ(va.size(), vb.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
    EXPECT_LE(worst, tol) << name;
  }
}

// Runs the job on one rank with batch 16 and on `world` ranks with batch
// 16 / world each, and checks that they train alike.
void expect_matches_one_rank(int world, const std::string& extra, const std::string& tag) {
  const std::string one_dir = temp_dir(tag + "_1"), many_dir = temp_dir(tag + "_" + std::to_string(world));
  const TrainingSummary one = run_job(parse(job_yaml(1, 16, one_dir, extra)));
  const TrainingSummary many = run_job(parse(job_yaml(world, 16, many_dir, extra)));
  EXPECT_EQ(many.world_size, world);
  ASSERT_EQ(one.losses.size(), many.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(one.losses[i], many.losses[i], 2e-5 * (1 + std::abs(one.losses[i]))) << "step " << i;
  ASSERT_EQ(one.mask_updates.size(), many.mask_updates.size());
  for (size_t i = 0; i < one.mask_updates.size(); ++i) {
    EXPECT_EQ(one.mask_updates[i].dropped, many.mask_updates[i].dropped) << "update " << i;
    EXPECT_EQ(one.mask_updates[i].grown, many.mask_updates[i].grown) << "update " << i;
  }
  ASSERT_TRUE(one.test && many.test);
  EXPECT_EQ(one.test->examples, many.test->examples);  // evaluation splits batches, it does not skip any
  EXPECT_NEAR(one.test->loss, many.test->loss, 1e-4);
  expect_same_model(checkpoint_model(one_dir), checkpoint_model(many_dir), 1e-4);
  EXPECT_GT(many.exchange_bytes_per_step, 0);
}

const char* kCsr70 =
    "sparsity:\n"
    "  density: 0.3\n"
    "  distribution: uniform\n"
    "  rules: [{regex: 'fc[12]\\.weight', format: csr}]\n";
const std::string kStaticCsr70 = std::string(kCsr70) + "mask_update: {method: static}\n";

TEST(DataParallel, DenseMatchesOneRankOnTheConcatenatedBatch) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    expect_matches_one_rank(world, "", "dense");
  }
}

TEST(DataParallel, CompactSparseMatchesOneRank) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    expect_matches_one_rank(world, kStaticCsr70, "csr");
  }
}

TEST(DataParallel, RiglMatchesOneRankWithTheSameMasks) {
  const std::string rigl =
      std::string(kCsr70) + "mask_update: {method: rigl, end_step: 25, interval: 6, drop_fraction: 0.3}\n";
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    expect_matches_one_rank(world, rigl, "rigl");
  }
}

TEST(DataParallel, CompactSendsFewerBytesThanDense) {
  const std::string base = temp_dir("bytes");
  const TrainingSummary compact = run_job(parse(job_yaml(2, 16, base + "/c", kStaticCsr70)));
  const TrainingSummary dense =
      run_job(parse(job_yaml(2, 16, base + "/d", kStaticCsr70), {"distributed.sparse_exchange=dense"}));
  // fc1 20x24 and fc2 24x16 at 30 %: their values instead of their dense
  // gradients; biases and fc3 (16x3) dense either way. f32.
  const int64_t nnz = std::llround(0.3 * 480) + std::llround(0.3 * 384);
  EXPECT_EQ(compact.last_exchange.compact_bytes, 4 * nnz);
  EXPECT_EQ(dense.last_exchange.compact_bytes, 4 * (480 + 384));
  EXPECT_EQ(compact.last_exchange.dense_bytes, dense.last_exchange.dense_bytes);
  EXPECT_LT(compact.exchange_bytes_per_step, dense.exchange_bytes_per_step);
  // The baseline exchange trains the same.
  for (size_t i = 0; i < compact.losses.size(); ++i) EXPECT_NEAR(compact.losses[i], dense.losses[i], 1e-5);
}

TEST(DataParallel, TopkWithErrorFeedbackTrains) {
  const TrainingSummary s =
      run_job(parse(job_yaml(2, 16, temp_dir("topk"), ""),
                    // fc1 (20x256) is large enough for top-k (GradSyncOptions::topk_min_numel).
                    {"distributed.topk_fraction=0.25", "training.steps=60", "model.options.sizes=[20, 256, 16, 3]"}));
  ASSERT_EQ(s.losses.size(), 60u);
  EXPECT_LT(s.losses.back(), 0.5 * s.losses.front());
  EXPECT_GT(s.last_exchange.topk_bytes, 0);
}

// ---- faults -------------------------------------------------------------------------------

// SET every 3 steps; random growth is keyed by `seed`.
MaskUpdaterConfig small_updater_config(uint64_t seed) {
  MaskUpdaterConfig mc;
  mc.interval = 3;
  mc.end_step = 30;
  mc.seed = seed;
  return mc;
}

// One rank of a small run_training job on the CPU; `on_step_end` may fault.
TrainingSummary run_small_rank(Communicator& comm, const std::string& ckpt, std::function<void(int64_t)> on_step_end,
                               uint64_t updater_seed = 0) {
  std::shared_ptr<MLP> model = make_mlp({8, 16, 3}, 11);
  std::vector<std::string> layers = sparsify_weights(*model, 0.5, 3);
  BlobsOptions b;
  b.n = 256;
  b.features = 8;
  b.classes = 3;
  b.seed = 7;
  DataLoaderOptions o;
  o.batch_size = 8;
  o.seed = 8;
  o.rank = comm.rank();
  o.world_size = comm.world_size();
  DataLoader sharded(make_blobs(b).dataset, o);
  replicate_parameters(*model, comm);
  Sgd sgd(model->parameters(), SgdOptions{0.05});
  std::optional<MaskUpdater> updater;
  updater.emplace(small_updater_config(updater_seed));
  for (const std::string& name : layers) updater->add_layer(name, model->parameter(name).value());
  TrainComponents c(*model, sharded, sgd);
  c.steps = 30;
  c.mask_updater = &*updater;
  c.comm = &comm;
  c.checkpoint_dir = ckpt;
  c.checkpoint_every = ckpt.empty() ? 0 : 2;
  c.on_step_end = std::move(on_step_end);
  return run_training(c);
}

TEST(DataParallelFaults, ADeadRankEndsTheJobWithAnErrorAndTheCheckpointStaysGood) {
  const std::string ckpt = temp_dir("dead_rank");
  InprocOptions io;
  io.timeout = std::chrono::seconds(5);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR_NAMING(run_inproc(
                          2,
                          [&](Communicator& comm) {
                            run_small_rank(comm, ckpt, [&](int64_t step) {
                              if (comm.rank() == 1 && step == 6) fail("rank 1 was killed");
                            });
                          },
                          io),
                      "rank 1 was killed");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4)) << "the survivor waited for a timeout";
  // Rank 0 wrote step 6 at most (it cannot finish step 7 without rank 1), and
  // the newest checkpoint loads into fresh components.
  absl::StatusOr<ResolvedCheckpoint> path = resolve_checkpoint(ckpt);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_NE(path->path.find("ckpt-000000000"), std::string::npos) << path->path;
  std::shared_ptr<MLP> model = make_mlp({8, 16, 3}, 11);
  const std::vector<std::string> layers = sparsify_weights(*model, 0.5, 3);
  Sgd sgd(model->parameters(), SgdOptions{0.05});
  MaskUpdater updater(small_updater_config(0));
  for (const std::string& name : layers) updater.add_layer(name, model->parameter(name).value());
  absl::StatusOr<TrainerState> st = load_checkpoint(path->path, *model, sgd, &updater);
  EXPECT_TRUE(st.ok()) << st.status();
}

TEST(DataParallelFaults, AHungRankEndsTheJobWithinTheTimeout) {
  InprocOptions io;
  io.timeout = std::chrono::milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR_NAMING(run_inproc(
                          2,
                          [&](Communicator& comm) {
                            run_small_rank(comm, "", [&](int64_t step) {
                              if (comm.rank() == 1 && step == 4) std::this_thread::sleep_for(std::chrono::seconds(2));
                            });
                          },
                          io),
                      "within");
  // The survivor fails after 0.5 s; run_inproc then waits for the sleeper.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(DataParallelFaults, MasksThatDriftApartStopTheJob) {
  // Each rank grows with its own seed: the first update leaves different masks.
  EXPECT_ERROR_NAMING(run_inproc(2,
                                 [&](Communicator& comm) {
                                   run_small_rank(comm, "", {}, /*updater_seed=*/static_cast<uint64_t>(comm.rank()));
                                 }),
                      "mask update at step 0: the pattern of 'fc1.weight' on rank(s) 1 differs");
}

// ---- the binary -----------------------------------------------------------------------------

TEST(DataParallelTrainer, RunsAnInprocJobAndPrintsOneSummary) {
  const std::string dir = temp_dir("trainer_inproc");
  { std::ofstream(dir + "/job.yaml") << job_yaml(2, 16, dir + "/ckpt", kStaticCsr70); }
  const RunResult r = run_trainer("--config '" + dir + "/job.yaml'", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& out = r.out;
  size_t count = 0;
  for (size_t p = out.find("trained 30/30"); p != std::string::npos; p = out.find("trained 30/30", p + 1)) ++count;
  EXPECT_EQ(count, 1u) << out;
  EXPECT_NE(out.find("data-parallel over 2 ranks"), std::string::npos) << out;
}

TEST(DataParallelTrainer, NcclJobStartedAloneSaysHowToLaunchIt) {
  const std::string dir = temp_dir("trainer_nccl_alone");
  { std::ofstream(dir + "/job.yaml") << job_yaml(2, 16, dir + "/ckpt", ""); }
  const RunResult r =
      run_trainer("--config '" + dir + "/job.yaml' --set device=auto --set distributed.backend=nccl", dir);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("tools/launch -n 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace coppice
