// dp: data-parallel training steps of an MLP hidden-hidden-hidden-hidden-10
// (f32, cross-entropy, SGD with momentum), one rank per process (tools/launch
// -n N -- bench dp: NCCL, cuda:<local rank>) or per thread (--ranks N, the
// in-process communicator, CPU). A world of one rank has no communicator at
// all: the honest single-GPU baseline. Weak scaling: every rank trains on its
// own fixed random batch of --batch examples.
//
// Variants:
//   dense      every weight dense; gradients all-reduced in 25 MiB buckets
//   compact    the hidden x hidden weights CSR at --sparsity (the last layer
//              dense); only their nnz gradient values travel
//   densified  the same CSR model with GradSyncOptions::compact_sparse = false:
//              the sparse gradients are exchanged as dense ones (the baseline
//              the compact exchange is measured against)
//
// A step: zero grads, GradientSync::begin, forward, backward, end, optimizer
// step; the device is synchronized after every step and each step is timed on
// its own (no inner repetition: every rank must issue the same collectives).
// Reported per variant: the median step time (and the slowest rank's median),
// samples/s over all ranks, and the gradient bytes this rank sent per step
// (GradSyncStats) next to the dense parameter bytes (what PyTorch DDP sends).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "distributed/communicator.h"
#include "distributed/grad_sync.h"
#include "distributed/inproc_communicator.h"
#include "distributed/launch_env.h"
#include "distributed/nccl.h"
#include "models/zoo.h"
#include "optim/growth.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"
#include "tools/bench/train_step_util.h"

namespace coppice::bench {

namespace {

constexpr int64_t kClasses = 10;
constexpr uint64_t kModelSeed = 20261122;
constexpr uint64_t kDataSeed = 0xDA7Aull;

struct DpSetup {
  bool cuda = false;
  Device device = Device::cpu();
  std::string label;  // the Result's device: "cpu", "cuda:0"
  int64_t hidden = 0;
  int64_t batch = 0;
  int warmup = 0;
  int steps = 0;
  double sparsity = 0.9;
};

Result base_result(const DpSetup& s, const std::string& variant, int world) {
  Result r;
  r.suite = "dp";
  r.op = variant;
  r.device = s.label;
  r.dtype = "f32";
  r.shape = {s.batch, s.hidden, s.hidden, s.hidden, s.hidden, kClasses};
  r.format = variant == "dense" ? "dense" : "csr";
  if (variant != "dense") r.sparsity = s.sparsity;
  describe_device(s.cuda, DType::kF32, "gflops", &r);
  r.extra.emplace_back("world_size", world);
  r.extra.emplace_back("batch_per_rank", static_cast<double>(s.batch));
  return r;
}

// One variant on this rank; `comm` null: a world of one.
Result run_variant(const DpSetup& s, const std::string& variant, Communicator* comm) {
  const int world = comm != nullptr ? comm->world_size() : 1;
  Result r = base_result(s, variant, world);

  // Every rank builds the same model from the same seed (and the same masks),
  // so no broadcast is needed.
  Generator model_gen(kModelSeed);
  LayerOptions lo;
  lo.dtype = DType::kF32;
  lo.device = s.device;
  auto model =
      std::make_shared<MLP>(std::vector<int64_t>{s.hidden, s.hidden, s.hidden, s.hidden, kClasses}, lo, model_gen);
  int64_t stored = 0, dense_numel = 0, sparse_nnz = 0;
  uint64_t purpose = 1;
  WeightPattern pattern;
  pattern.format = "csr";
  pattern.sparsity = s.sparsity;
  for (const auto& [name, p] : model->named_parameters()) {
    dense_numel += p.numel();
    const bool sparsify = variant != "dense" && p.dim() == 2 && p.shape()[0] == s.hidden && p.shape()[1] == s.hidden;
    if (!sparsify) {
      stored += p.numel();
      continue;
    }
    const int64_t nnz = sparsify_parameter(*model, name, pattern, purpose++);
    stored += nnz;
    sparse_nnz += nnz;
  }
  if (variant != "dense") r.nnz = sparse_nnz;
  NamedLeaves leaves;
  for (const auto& [name, p] : model->named_parameters()) {
    if (p.requires_grad()) leaves.emplace_back(name, p);
  }
  const std::vector<Variable> params = trainable_parameters(*model);
  SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  Sgd optimizer(params, so);

  // The rank's own fixed batch.
  const int rank = comm != nullptr ? comm->rank() : 0;
  Generator data_gen = Generator::keyed(kDataSeed, 1, 0, static_cast<uint64_t>(rank));
  const Tensor x = randn({s.batch, s.hidden}, TensorOptions(DType::kF32, s.device), data_gen);
  const Tensor y = randint(0, kClasses, {s.batch}, TensorOptions(DType::kI64, s.device), data_gen);

  std::unique_ptr<GradientSync> sync;
  if (comm != nullptr) {
    GradSyncOptions go;
    go.compact_sparse = variant != "densified";
    sync = std::make_unique<GradientSync>(*comm, go);
  }
  Variable last_loss;
  auto step = [&] {
    optimizer.zero_grad();
    if (sync) sync->begin(leaves);
    // On a throw, ~GradientSync removes the hooks.
    Variable loss = cross_entropy((*model)(Variable(x)), y);
    loss.backward();
    if (sync) sync->end();
    optimizer.step();
    last_loss = loss;
  };

  fill_step_timing(time_steps(step, s.device, s.warmup, s.steps), &r);
  // Useful flops per rank and step: forward, input gradient and weight
  // gradient, 2 x batch x stored weight entries each.
  r.flops = 6.0 * static_cast<double>(s.batch) * static_cast<double>(stored);

  double slowest = r.median_ms;
  if (comm != nullptr) {
    Tensor t = full({1}, r.median_ms, TensorOptions(DType::kF64, s.device));
    comm->all_reduce(t, ReduceOp::kMax).wait();
    synchronize(s.device);
    slowest = t.item();
  }
  const GradSyncStats st = sync ? sync->last_stats() : GradSyncStats{};
  const double final_loss = last_loss.defined() ? last_loss.item() : kNaN;
  r.extra.emplace_back("slowest_rank_median_ms", slowest);
  r.extra.emplace_back("samples_per_s", static_cast<double>(world * s.batch) / (slowest * 1e-3));
  r.extra.emplace_back("exchange_bytes_per_step", static_cast<double>(st.bytes));
  r.extra.emplace_back("exchange_dense_bytes", static_cast<double>(st.dense_bytes));
  r.extra.emplace_back("exchange_compact_bytes", static_cast<double>(st.compact_bytes));
  // What the buckets got by copy; the rest backward wrote into them.
  r.extra.emplace_back("exchange_copied_bytes", static_cast<double>(st.copied_bytes));
  r.extra.emplace_back("collectives_per_step", static_cast<double>(st.collectives));
  r.extra.emplace_back("collectives_during_backward", static_cast<double>(st.collectives_during_backward));
  r.extra.emplace_back("buckets", static_cast<double>(st.buckets));
  r.extra.emplace_back("param_bytes_dense", static_cast<double>(dense_numel) * 4.0);
  r.extra.emplace_back("param_bytes_stored", static_cast<double>(stored) * 4.0);
  r.extra.emplace_back("training_state_bytes", training_state_bytes(params, optimizer));
  r.extra.emplace_back("final_loss", final_loss);
  return r;
}

std::vector<std::string> variants_of(const Config& config) {
  if (!config.variants.empty()) return config.variants;
  return {"dense", "compact", "densified"};
}

// Every variant on `rank` of `world`; errors become the variant's status
// (setup_error, when given, is every variant's).
std::vector<Result> run_rank(const DpSetup& s, const std::vector<std::string>& variants, Communicator* comm,
                             const std::string& setup_error, int world, int rank) {
  std::vector<Result> out;
  for (const std::string& v : variants) {
    Result r = base_result(s, v, world);
    if (!setup_error.empty()) {
      r.status = setup_error;
    } else {
      try {
        r = run_variant(s, v, comm);
      } catch (const std::exception& e) { r.status = str_cat("error: rank ", rank, ": ", e.what()); }
    }
    if (rank == 0) {
      log_result(r);
      if (r.status == "ok") {
        std::fprintf(stderr, "%-11s %-6s %-9s world %d: %.1f samples/s, %.0f exchange bytes per step, loss %g\n", "dp",
                     r.device.c_str(), v.c_str(), world, extra_value(r, "samples_per_s"),
                     extra_value(r, "exchange_bytes_per_step"), extra_value(r, "final_loss"));
      }
    } else if (r.status != "ok") {
      std::fprintf(stderr, "dp rank %d %s: %s\n", rank, v.c_str(), r.status.c_str());
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

bool run_dp(const Config& config, std::vector<Result>* results) {
  const std::vector<std::string> variants = variants_of(config);
  absl::StatusOr<LaunchEnv> env = launch_env();
  DpSetup s;
  std::string error;
  int world = 1, rank = 0, local_rank = 0;
  if (!env.ok()) {
    error = str_cat("error: ", env.status().message());
  } else {
    world = env->world_size;
    rank = env->rank;
    local_rank = env->local_rank;
  }
  if (error.empty() && world > 1 && config.ranks > 1) {
    error = str_cat("error: --ranks ", config.ranks, " (threads) inside a launched job of ", world,
                    " processes; use one or the other");
  }
  // The device: a GPU when asked for (or by default, when there is one).
  const bool want_cuda = config.cuda && (!config.cpu || cuda_skip_reason().empty());
  if (error.empty() && want_cuda) {
    const std::string skip = cuda_skip_reason();
    if (!skip.empty()) {
      error = skip;
    } else if (local_rank >= cuda_device_count()) {
      error = str_cat("error: local rank ", local_rank, " needs GPU ", local_rank, " but ", cuda_device_count(),
                      " are visible");
    }
  }
  s.cuda = want_cuda;
  s.device = want_cuda ? Device::cuda(local_rank) : Device::cpu();
  s.label = want_cuda ? "cuda:" + std::to_string(local_rank) : "cpu";
  s.hidden = config.hidden > 0 ? config.hidden : (want_cuda ? kDpHidden : kDpCpuHidden);
  s.batch = config.batch > 0 ? config.batch : (want_cuda ? kDpBatch : kDpCpuBatch);
  s.steps = config.steps > 0 ? config.steps : kDpSteps;
  s.warmup = config.warmup_given ? config.warmup : kDpWarmup;
  s.sparsity = config.sparsity;
  if (error.empty() && world > 1 && !want_cuda) {
    error = str_cat("error: a launched dp job of ", world,
                    " processes exchanges over NCCL and needs a GPU per rank (use --ranks N for CPU threads)");
  }
  if (error.empty() && config.ranks > 1 && want_cuda) {
    error = "error: --ranks N runs ranks as CPU threads; give --device cpu (GPUs: tools/launch -n N -- bench dp)";
  }

  std::vector<Result> mine;
  if (!error.empty()) {
    // Every variant reports the reason (a skip or an error).
    mine = run_rank(s, variants, nullptr, error, std::max(world, config.ranks), rank);
  } else if (world > 1) {
    std::unique_ptr<Communicator> comm;
    try {
      NcclOptions no;
      no.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(config.timeout_s * 1000.0)));
      comm = make_nccl_communicator(*env, local_rank, no);
    } catch (const std::exception& e) { error = str_cat("error: rank ", rank, ": ", e.what()); }
    if (comm == nullptr && error.empty()) error = "error: no NCCL communicator";
    mine = run_rank(s, variants, comm.get(), error, world, rank);
  } else if (config.ranks > 1) {
    std::mutex mu;
    InprocOptions io;
    io.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(config.timeout_s * 1000.0)));
    try {
      run_inproc(
          config.ranks,
          [&](Communicator& comm) {
            std::vector<Result> r = run_rank(s, variants, &comm, "", comm.world_size(), comm.rank());
            std::lock_guard<std::mutex> lock(mu);
            if (comm.rank() == 0) mine = std::move(r);
          },
          io);
    } catch (const std::exception& e) {
      mine = run_rank(s, variants, nullptr, str_cat("error: ", e.what()), config.ranks, 0);
    }
  } else {
    mine = run_rank(s, variants, nullptr, "", 1, 0);
  }
  for (Result& r : mine) results->push_back(std::move(r));
  return rank == 0;
}

}  // namespace coppice::bench
