// bench train on the CPU at a small size: every model, format and mode gives
// a result (tf32 a skip on the CPU), sparse weights shrink the training
// state, and --gelu tanh runs the transformers with the tanh GELU.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suites.h"
#include "tools/bench/train_step_util.h"

namespace coppice::bench {
namespace {

std::vector<Result> run(const std::vector<std::string>& args) {
  absl::StatusOr<Config> config = parse_args(args);
  EXPECT_TRUE(config.ok()) << config.status();
  std::vector<Result> results;
  if (config.ok()) run_train(*config, &results);
  return results;
}

TEST(TrainBenchTest, ParsesItsFlags) {
  absl::StatusOr<Config> c = parse_args(
      {"train", "--models", "mlp,vit", "--formats=dense,nm", "--modes", "tf32", "--config-dir", "x/configs"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->train);
  EXPECT_FALSE(c->gemm || c->dp || c->spmm);
  EXPECT_EQ(c->train_models, (std::vector<std::string>{"mlp", "vit"}));
  EXPECT_EQ(c->train_formats, (std::vector<std::string>{"dense", "nm"}));
  EXPECT_EQ(c->train_modes, (std::vector<std::string>{"tf32"}));
  EXPECT_EQ(c->config_dir, "x/configs");
  EXPECT_FALSE(parse_args({"train", "--models", "resnet"}).ok());
  EXPECT_FALSE(parse_args({"train", "--formats", "coo"}).ok());
  EXPECT_FALSE(parse_args({"train", "--modes", ""}).ok());
  EXPECT_FALSE(parse_args({"all"})->train);  // never part of all
}

TEST(TrainBenchTest, BsrBlockIsTheLargestPowerOfTwoThatDivides) {
  EXPECT_EQ(bsr_block_for(4096, 4096, 32), 32);
  EXPECT_EQ(bsr_block_for(256, 64, 32), 32);
  EXPECT_EQ(bsr_block_for(300, 784, 32), 4);
  EXPECT_EQ(bsr_block_for(10, 100, 32), 2);
}

TEST(TrainBenchTest, NmMaskKeepsTwoOfEveryFour) {
  WeightPattern p;
  p.format = "nm";
  const Tensor mask = weight_mask(p, 8, 16, 1);
  const bool* m = mask.data<bool>();
  for (int g = 0; g < 8 * 16; g += 4) EXPECT_EQ(m[g] + m[g + 1] + m[g + 2] + m[g + 3], 2) << "group " << g / 4;
}

// The command line of docs/benchmarks.md's CPU sample, at one step.
TEST(TrainBenchTest, MlpOnTheCpuEveryFormatAndMode) {
  const std::vector<Result> results = run({"train", "--device", "cpu", "--hidden", "256", "--batch", "64", "--models",
                                           "mlp", "--steps", "1", "--warmup", "0"});
  ASSERT_EQ(results.size(), 8u * 3u);   // dense, csr x3, bsr x3, nm; f32, tf32, bf16
  std::map<std::string, double> state;  // by format and sparsity, f32
  for (const Result& r : results) {
    SCOPED_TRACE(r.format + " " + r.dtype);
    EXPECT_EQ(r.suite, "train");
    EXPECT_EQ(r.op, "mlp");
    EXPECT_EQ(r.device, "cpu");
    if (r.dtype == "tf32") {  // a CUDA mode
      EXPECT_EQ(r.status.rfind("skipped: TF32", 0), 0u) << r.status;
      continue;
    }
    ASSERT_EQ(r.status, "ok");
    EXPECT_EQ(r.shape, (std::vector<int64_t>{64, 256, 256, 256, 256, 10}));  // batch, then the widths
    EXPECT_GT(r.median_ms, 0);
    EXPECT_EQ(extra_value(r, "dense_fallbacks_per_step"), 0) << "a dense fallback in the step";
    EXPECT_TRUE(std::isfinite(extra_value(r, "final_loss")));
    state[r.dtype + r.format + std::to_string(r.sparsity)] = extra_value(r, "training_state_bytes");
  }
  auto at = [&state](const std::string& mode, const std::string& format, double sparsity) {
    return state.at(mode + format + std::to_string(sparsity));
  };
  const double numel = 3 * 256 * 256 + 3 * 256 + 256 * 10 + 10;
  const double dense = at("f32", "dense", kNaN);
  EXPECT_EQ(dense, 3.0 * 4.0 * numel);  // f32 weights, gradients and momentum
  // bf16: bf16 weights and gradients, f32 master weights and momentum.
  EXPECT_EQ(at("bf16", "dense", kNaN), (2.0 + 2.0 + 4.0 + 4.0) * numel);
  EXPECT_LT(at("f32", "csr", 0.9), 0.25 * dense);
  EXPECT_LT(at("f32", "bsr", 0.9), 0.25 * dense);
  EXPECT_LT(at("f32", "csr", 0.98), at("f32", "csr", 0.9));
}

// The job models come from configs/ with their batch sizes and sparsified weights.
TEST(TrainBenchTest, JobModelsFromTheirConfigs) {
  const std::vector<Result> results = run({"train", "--device", "cpu", "--models", "lenet300,vit", "--formats",
                                           "dense,bsr,nm", "--modes", "f32,bf16", "--steps", "1", "--warmup", "0"});
  ASSERT_EQ(results.size(), 2u * 5u * 2u);
  for (const Result& r : results) {
    SCOPED_TRACE(r.op + " " + r.format + " " + r.dtype);
    ASSERT_EQ(r.status, "ok");
    EXPECT_EQ(r.shape[0], 128);                                               // both jobs' batch_size
    EXPECT_EQ(extra_value(r, "sparse_weights"), r.op == "lenet300" ? 3 : 4);  // fc1-3; 2 blocks x fc1, fc2
    if (r.format == "bsr") { EXPECT_EQ(extra_value(r, "bsr_block"), r.op == "lenet300" ? 2 : 32); }
  }
}

// --gelu tanh: the vit built with the job's model.options.gelu tanh, its rows
// "vit+gelu_tanh" (torch_train.py --gelu tanh names its records the same);
// the same step with the exact GELU gives another loss. The MLP has no GELU:
// its rows keep their name.
TEST(TrainBenchTest, GeluTanhRows) {
  std::map<std::string, double> loss;  // by row name
  for (const char* gelu : {"erf", "tanh"}) {
    for (const Result& r :
         run({"train", "--device", "cpu", "--models", "mlp,vit", "--hidden", "64", "--batch", "8", "--formats", "dense",
              "--modes", "f32", "--steps", "1", "--warmup", "0", "--gelu", gelu})) {
      SCOPED_TRACE(r.op);
      ASSERT_EQ(r.status, "ok");
      if (r.op.rfind("mlp", 0) == 0) {
        EXPECT_EQ(r.op, "mlp");
        continue;
      }
      EXPECT_EQ(r.op, std::string(gelu) == "tanh" ? "vit+gelu_tanh" : "vit");
      loss[r.op] = extra_value(r, "final_loss");
    }
  }
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_TRUE(std::isfinite(loss["vit+gelu_tanh"]));
  EXPECT_NE(loss["vit+gelu_tanh"], loss["vit"]);
}

}  // namespace
}  // namespace coppice::bench
