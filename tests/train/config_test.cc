#include "train/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace coppice {
namespace {

// A small valid job that reads no files: the base of the error table.
const char* kBase = R"(
model: {name: mlp, options: {sizes: [8, 16, 3]}}
data:
  dataset: synthetic
  batch_size: 16
  synthetic: {examples: 64, test_examples: 32, features: 8, classes: 3}
training: {steps: 100}
)";

const char* kSparse = R"(
sparsity:
  density: 0.2
  rules: [{regex: 'fc[0-9]\.weight', format: csr}]
)";

absl::StatusOr<JobConfig> parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_job_config(yaml, overrides, "test.yaml");
}

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  const absl::StatusOr<JobConfig> c = parse(yaml, overrides);
  return c.ok() ? std::string("<ok>") : std::string(c.status().message());
}

TEST(JobConfig, EveryConfigInConfigsLoads) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("configs"))
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 15u);
  for (const std::string& f : files) {
    const absl::StatusOr<JobConfig> c = load_job_config(f);
    EXPECT_TRUE(c.ok()) << f << ": " << c.status().message();
    if (!c.ok()) continue;
    EXPECT_EQ(c->name, std::filesystem::path(f).stem().string()) << f;
  }
}

TEST(JobConfig, RigLConfigFillsTheLowerLayersStructs) {
  const absl::StatusOr<JobConfig> c = load_job_config("configs/lenet300_rigl_90.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.name, "mlp");
  EXPECT_EQ(std::get<std::string>(c->model.options.at("sizes")), "784,300,100,10");
  EXPECT_EQ(std::get<int64_t>(c->model.options.at("seed")), 0);  // from the job's seed
  EXPECT_EQ(c->data.dataset, DatasetKind::kFashionMnist);
  EXPECT_TRUE(c->data.fashion_mnist.flatten);
  EXPECT_EQ(c->data.loader.batch_size, 128);
  EXPECT_DOUBLE_EQ(c->data.validation_split, 0.1);
  EXPECT_TRUE(c->device.is_auto);
  ASSERT_EQ(c->sparsity.schedule.parameters.size(), 1u);
  const ParameterRule& r = c->sparsity.schedule.parameters[0];
  EXPECT_EQ(r.selector.kind, Selector::Kind::kRegex);
  EXPECT_EQ(r.selector.pattern, "fc[0-9]+\\.weight");
  EXPECT_EQ(r.format.name, "csr");
  EXPECT_FALSE(r.density.has_value());
  EXPECT_DOUBLE_EQ(c->sparsity.distribution.density, 0.1);
  EXPECT_EQ(c->sparsity.distribution.distribution, DensityDistribution::kErdosRenyiKernel);
  EXPECT_TRUE(c->sparsity.sparse_weights());
  EXPECT_EQ(c->mask_update.method, MaskMethod::kRigL);
  EXPECT_EQ(c->mask_update.updater.growth, "gradient");
  EXPECT_EQ(c->mask_update.updater.end_step, 6300);
  EXPECT_EQ(c->mask_update.updater.interval, 100);
  EXPECT_DOUBLE_EQ(c->mask_update.updater.drop_fraction, 0.3);
  EXPECT_EQ(c->mask_update.updater.schedule, DropSchedule::kCosine);
  EXPECT_EQ(c->optimizer.kind, OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(c->optimizer.sgd.lr, 0.1);
  EXPECT_TRUE(c->optimizer.sgd.nesterov);
  EXPECT_EQ(c->lr_schedule.kind, LrScheduleKind::kCosine);
  EXPECT_EQ(c->lr_schedule.warmup_steps, 200);
  EXPECT_EQ(c->training.epochs, 20);
  EXPECT_FALSE(c->training.steps.has_value());
  EXPECT_EQ(c->evaluation.split, EvalSplit::kValidation);
  EXPECT_EQ(c->checkpoint.keep_last, 2);
  EXPECT_EQ(c->logging.metrics, "runs/lenet300_rigl_90/metrics.jsonl");
  EXPECT_EQ(c->distributed.world_size, 1);
}

TEST(JobConfig, OtherConfigsFillTheirSections) {
  const absl::StatusOr<JobConfig> nm = load_job_config("configs/lenet5_nm24.yaml");
  ASSERT_TRUE(nm.ok()) << nm.status().message();
  const ParameterRule& r = nm->sparsity.schedule.parameters.at(0);
  EXPECT_EQ(r.format.name, "nm");
  EXPECT_EQ(r.format.options.n, 2);
  EXPECT_EQ(r.format.options.m, 4);
  ASSERT_TRUE(r.sparsifier.has_value());
  EXPECT_EQ(r.sparsifier->name, "nm");  // filled in for the format
  const absl::StatusOr<JobConfig> gmp = load_job_config("configs/lenet300_gmp_98.yaml");
  ASSERT_TRUE(gmp.ok()) << gmp.status().message();
  EXPECT_EQ(gmp->mask_update.method, MaskMethod::kGmp);
  EXPECT_DOUBLE_EQ(gmp->mask_update.gmp.final_density, 0.02);
  EXPECT_EQ(gmp->mask_update.gmp.frequency, 100);
  const absl::StatusOr<JobConfig> lm = load_job_config("configs/charlm_perldiag.yaml");
  ASSERT_TRUE(lm.ok()) << lm.status().message();
  EXPECT_EQ(lm->data.dataset, DatasetKind::kText);
  EXPECT_EQ(lm->data.text_path(), kDefaultTextCorpus);
  EXPECT_EQ(lm->data.text.seq_len, 64);
  EXPECT_EQ(lm->optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(lm->optimizer.adam.weight_decay, 0.01);
  EXPECT_EQ(lm->mask_update.updater.growth, "random");
}

// mask_update.densify_step with any method that keeps weights sparse; the
// shipped SPDF job makes its BSR weights dense at three quarters of its run.
TEST(JobConfig, DensifyStepFillsItsSection) {
  const absl::StatusOr<JobConfig> rigl =
      parse(std::string(kBase) + kSparse + "mask_update: {method: rigl, end_step: 60, densify_step: 60}\n");
  ASSERT_TRUE(rigl.ok()) << rigl.status().message();
  EXPECT_EQ(rigl->mask_update.densify_step, 60);
  const absl::StatusOr<JobConfig> none = parse(std::string(kBase) + kSparse + "mask_update: {method: static}\n");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->mask_update.densify_step, 0);
  EXPECT_EQ(rigl->mask_update.densify_warmup_steps, 0);  // no ramp unless asked
  // The learning-rate ramp after it, ending at the run's last step at the latest.
  const absl::StatusOr<JobConfig> ramp = parse(
      std::string(kBase) + kSparse + "mask_update: {method: static, densify_step: 60, densify_warmup_steps: 40}\n");
  ASSERT_TRUE(ramp.ok()) << ramp.status().message();
  EXPECT_EQ(ramp->mask_update.densify_step, 60);
  EXPECT_EQ(ramp->mask_update.densify_warmup_steps, 40);
  const absl::StatusOr<JobConfig> zero = parse(
      std::string(kBase) + kSparse + "mask_update: {method: static, densify_step: 60, densify_warmup_steps: 0}\n");
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  EXPECT_EQ(zero->mask_update.densify_warmup_steps, 0);
  const absl::StatusOr<JobConfig> spdf = load_job_config("configs/gpt_bsr64_spdf.yaml");
  ASSERT_TRUE(spdf.ok()) << spdf.status().message();
  EXPECT_EQ(spdf->mask_update.method, MaskMethod::kStatic);
  EXPECT_EQ(spdf->mask_update.densify_step, 2250);
  EXPECT_EQ(spdf->sparsity.schedule.parameters.at(0).format.name, "bsr");
  EXPECT_EQ(spdf->sparsity.schedule.parameters.at(0).format.options.block_rows, 64);
}

// A directory of files as the corpus, with all 256 bytes as tokens.
// SR-STE: its two keys, with the paper's defaults; the job in configs/.
TEST(JobConfig, SrSteFillsItsSection) {
  const absl::StatusOr<JobConfig> d = parse(
      std::string(kBase) + "sparsity: {rules: [{name: fc1.weight, format: nm}]}\nmask_update: {method: sr_ste}\n");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->mask_update.method, MaskMethod::kSrSte);
  EXPECT_EQ(d->mask_update.sr_ste.interval, 1);
  EXPECT_EQ(d->mask_update.sr_ste.decay, 2e-4);
  const absl::StatusOr<JobConfig> c = load_job_config("configs/lenet5_nm24_sr_ste.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->mask_update.method, MaskMethod::kSrSte);
  EXPECT_EQ(c->sparsity.schedule.parameters.at(0).format.name, "nm");
  // Transposable masks are SR-STE's to recompute: allowed with it.
  const absl::StatusOr<JobConfig> t = parse(std::string(kBase) +
                                            "sparsity: {rules: [{name: fc1.weight, format: nm, transposable: true}]}\n"
                                            "mask_update: {method: sr_ste, interval: 10, decay: 0}\n");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->mask_update.sr_ste.interval, 10);
  EXPECT_EQ(t->mask_update.sr_ste.decay, 0.0);
}

TEST(JobConfig, TextCorpusDirectory) {
  const std::string dir = ::testing::TempDir() + "/config_test_corpus";
  std::filesystem::create_directories(dir + "/sub");
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"/a.rst.txt", "alpha beta gamma\n"},
                                   {"/sub/b.rst.txt", "delta epsilon\n"},
                                   {"/sub/c.html", "<p>"}}) {
    std::ofstream(dir + name) << text;
  }
  const std::string job =
      "model: {name: char_lm, options: {vocab_size: 256, context: 8}}\n"
      "data: {dataset: text, path: " +
      dir +
      ", suffix: .rst.txt, vocab: bytes, seq_len: 8, validation_split: 0.2}\n"
      "training: {steps: 1}\n";
  const absl::StatusOr<JobConfig> c = parse(job);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->data.text_path(), dir);
  EXPECT_EQ(c->data.text.suffix, ".rst.txt");
  EXPECT_TRUE(c->data.text.byte_vocab);
  // A suffix that no file has is refused, naming the directory.
  const absl::StatusOr<JobConfig> none = parse(job, {"data.suffix=.md"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no file whose name ends in '.md'"), std::string::npos)
      << none.status().message();
}

// The example of README.md, "Configuring a job".
TEST(JobConfig, ReadmeExampleLoads) {
  const char* readme = R"(
name: lenet300_rigl_90    # default: the file name without .yaml
seed: 0                   # init, masks, random sparsifiers; default of the seeds below
device: auto              # auto | cpu | cuda | cuda:N
model: {name: mlp, options: {sizes: [784, 300, 100, 10]}}  # mlp | lenet5 | vit | char_lm; options as models/zoo.h
data:
  dataset: fashion_mnist  # fashion_mnist | synthetic | text
  path: ""                # the IDX directory or text file ("" = the installed one)
  batch_size: 64          # and eval_batch_size (0 = batch_size)
  validation_split: 0     # [0, 1), held out of the training set
  shuffle: true           # shuffle_seed (seed), drop_last (false)
sparsity:
  density: 1              # (0, 1], split over the weights rules select
  distribution: erk       # uniform | er | erk
  overrides: {}           # fixed densities by parameter name
  dense: []               # parameters kept dense by name
  rules:                  # parameters, by exact name or whole-name regex
    - regex: 'fc[0-9]+\.weight'
      format: csr         # dense | coo | csr | csc | bsr | blocked_ell | nm | masked
  outputs:                # module outputs, by name or regex
    - {name: fc1, forward: [{inline: {name: threshold, threshold: 0}, format: csr}], backward: []}
optimizer: {name: sgd, lr: 1.0e-3}
lr_schedule: {name: constant}
mask_update:
  method: dense           # dense | static | set | rigl | snfs | gmp
training: {epochs: 20}    # or steps: N, not both; cuda_graph: true replays steps from a CUDA graph
evaluation: {every_steps: 0, split: test, max_batches: 0}  # 0 = each epoch's end / all batches
checkpoint: {dir: "", every_steps: 0, keep_last: 0, resume: ""}
logging: {metrics: "", progress: true, every_steps: 50}    # metrics: a JSONL path
distributed: {world_size: 1, backend: inproc}              # inproc | nccl; see Distributed
precision:
  allow_tf32: false       # true: f32 dense matmuls on CUDA may use TF32 tensor cores
  dtype: f32              # f32 | bf16 | f16: parameters (sparse values too) and activations; see Mixed precision
  loss_scale: none        # dynamic | none | a number (static); default dynamic for f16, none otherwise
)";
  const absl::StatusOr<JobConfig> c = parse(readme);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->sparsity.schedule.outputs.size(), 1u);
  ASSERT_EQ(c->sparsity.schedule.outputs[0].forward.size(), 1u);
  EXPECT_EQ(c->sparsity.schedule.outputs[0].forward[0].inline_sparsifier->name, "threshold");
  EXPECT_EQ(c->sparsity.schedule.outputs[0].forward[0].output_format.name, "csr");
}

TEST(JobConfig, DistributedAndPrecisionKeys) {
  const absl::StatusOr<JobConfig> c =
      parse(std::string(kBase) +
            "distributed: {world_size: 4, timeout_s: 20, bucket_mb: 8, sparse_exchange: dense, "
            "topk_fraction: 0.1}\nprecision: {allow_tf32: true}\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->distributed.world_size, 4);
  EXPECT_DOUBLE_EQ(c->distributed.timeout_s, 20.0);
  EXPECT_DOUBLE_EQ(c->distributed.bucket_mb, 8.0);
  EXPECT_EQ(c->distributed.sparse_exchange, SparseExchange::kDense);
  EXPECT_DOUBLE_EQ(c->distributed.topk_fraction, 0.1);
  EXPECT_TRUE(c->precision.allow_tf32);
}

TEST(JobConfig, AdagradKeysAndTheirDefaults) {
  const absl::StatusOr<JobConfig> c = parse(
      std::string(kBase) + "optimizer: {name: adagrad, lr: 0.1, lr_decay: 0.01, initial_accumulator_value: 0.2}\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->optimizer.kind, OptimizerKind::kAdagrad);
  EXPECT_DOUBLE_EQ(c->optimizer.lr(), 0.1);
  EXPECT_DOUBLE_EQ(c->optimizer.adagrad.lr_decay, 0.01);
  EXPECT_DOUBLE_EQ(c->optimizer.adagrad.initial_accumulator_value, 0.2);
  EXPECT_DOUBLE_EQ(c->optimizer.adagrad.eps, AdagradOptions{}.eps);  // adagrad's 1e-10, not adam's 1e-8
  EXPECT_DOUBLE_EQ(c->optimizer.adagrad.weight_decay, 0.0);
  const absl::StatusOr<JobConfig> a = parse(std::string(kBase) + "optimizer: {name: adam}\n");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_DOUBLE_EQ(a->optimizer.adam.eps, AdamOptions{}.eps);
  EXPECT_NE(error_of(std::string(kBase) + "optimizer: {name: adagrad, beta1: 0.9}\n")
                .find("optimizer.beta1: not an option of adagrad (it is adam's and adamw's)"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "optimizer: {name: adagrad, momentum: 0.9}\n")
                .find("optimizer.momentum: not an option of adagrad (it is sgd's)"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "optimizer: {name: adamw, lr_decay: 0.1}\n")
                .find("optimizer.lr_decay: not an option of adamw (it is adagrad's)"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "optimizer: {name: sgd, initial_accumulator_value: 0.1}\n")
                .find("optimizer.initial_accumulator_value: not an option of sgd (it is adagrad's)"),
            std::string::npos);
}

TEST(JobConfig, CudaGraphKey) {
  std::string base(kBase);
  const std::string steps = "training: {steps: 100}";
  ASSERT_NE(base.find(steps), std::string::npos);
  auto with = [&](const std::string& training) {
    std::string text = base;
    return parse(text.replace(text.find(steps), steps.size(), training));
  };
  absl::StatusOr<JobConfig> c = with("training: {steps: 100}");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->training.cuda_graph);
  c = with("training: {steps: 100, cuda_graph: true}");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->training.cuda_graph);
  c = with("training: {steps: 100, cuda_graph: sometimes}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("training.cuda_graph"), std::string::npos) << c.status().message();
}

TEST(JobConfig, OnNonfiniteKeys) {
  std::string base(kBase);
  const std::string steps = "training: {steps: 100}";
  ASSERT_NE(base.find(steps), std::string::npos);
  auto with = [&](const std::string& training) {
    std::string text = base;
    return parse(text.replace(text.find(steps), steps.size(), training));
  };
  absl::StatusOr<JobConfig> c = with("training: {steps: 100}");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->training.nonfinite.policy, NonfinitePolicy::kStop);
  EXPECT_EQ(c->training.nonfinite.max_consecutive_skips, 10);
  c = with("training: {steps: 100, on_nonfinite: skip_step, max_consecutive_skips: 3}");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->training.nonfinite.policy, NonfinitePolicy::kSkipStep);
  EXPECT_EQ(c->training.nonfinite.max_consecutive_skips, 3);
  for (const auto& [training, key] : std::vector<std::pair<std::string, std::string>>{
           {"training: {steps: 100, on_nonfinite: skip}", "did you mean 'skip_step'"},
           {"training: {steps: 100, max_consecutive_skips: 3}", "training.max_consecutive_skips: applies only"},
           {"training: {steps: 100, on_nonfinite: skip_step, max_consecutive_skips: 0}",
            "training.max_consecutive_skips"}}) {
    c = with(training);
    ASSERT_FALSE(c.ok()) << training;
    EXPECT_NE(std::string(c.status().message()).find(key), std::string::npos) << c.status().message();
  }
}

TEST(JobConfig, PrecisionDtypeAndLossScale) {
  auto with = [](const std::string& precision) { return parse(std::string(kBase) + "precision: " + precision + "\n"); };
  const absl::StatusOr<JobConfig> f32 = parse(kBase);
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->precision.dtype, DType::kF32);
  EXPECT_EQ(f32->precision.loss_scale.mode, LossScaleMode::kNone);
  const absl::StatusOr<JobConfig> bf16 = with("{dtype: bf16}");
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  EXPECT_EQ(bf16->precision.dtype, DType::kBF16);
  EXPECT_EQ(bf16->precision.loss_scale.mode, LossScaleMode::kNone);  // bf16 has f32's range
  const absl::StatusOr<JobConfig> f16 = with("{dtype: f16}");
  ASSERT_TRUE(f16.ok());
  EXPECT_EQ(f16->precision.dtype, DType::kF16);
  EXPECT_EQ(f16->precision.loss_scale.mode, LossScaleMode::kDynamic);
  EXPECT_EQ(f16->precision.loss_scale.init_scale, 65536.0);
  const absl::StatusOr<JobConfig> fixed = with("{dtype: f16, loss_scale: 1024}");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->precision.loss_scale.mode, LossScaleMode::kStatic);
  EXPECT_EQ(fixed->precision.loss_scale.init_scale, 1024.0);
  const absl::StatusOr<JobConfig> off = with("{dtype: f16, loss_scale: none}");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->precision.loss_scale.mode, LossScaleMode::kNone);
  const absl::StatusOr<JobConfig> set = parse(kBase, {"precision.dtype=bf16", "precision.loss_scale=dynamic"});
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->precision.dtype, DType::kBF16);
  EXPECT_EQ(set->precision.loss_scale.mode, LossScaleMode::kDynamic);
  // One line each, naming the key.
  EXPECT_EQ(error_of(std::string(kBase) + "precision: {dtype: f8}\n")
                .rfind("precision.dtype: must be one of f32 | bf16 | f16, got 'f8'", 0),
            0u)
      << error_of(std::string(kBase) + "precision: {dtype: f8}\n");
  EXPECT_EQ(error_of(std::string(kBase) + "precision: {loss_scale: lots}\n"),
            "precision.loss_scale: expected dynamic, none or a number, got 'lots'");
  EXPECT_EQ(error_of(std::string(kBase) + "precision: {loss_scale: -8}\n"),
            "precision.loss_scale: a static loss scale must be in (0, 3.40282346638529e+38], got -8");
  EXPECT_EQ(error_of(std::string(kBase) + "precision: {loss_scale: 0}\n"),
            "precision.loss_scale: a static loss scale must be in (0, 3.40282346638529e+38], got 0");
}

TEST(JobConfig, BaseIsValidAndDefaultsAreTheStructs) {
  const absl::StatusOr<JobConfig> c = parse(kBase);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->name, "job");
  EXPECT_EQ(c->mask_update.method, MaskMethod::kDense);
  EXPECT_EQ(c->optimizer.kind, OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(c->optimizer.sgd.lr, SgdOptions{}.lr);
  EXPECT_EQ(c->lr_schedule.kind, LrScheduleKind::kConstant);
  EXPECT_EQ(c->evaluation.split, EvalSplit::kTest);
  EXPECT_TRUE(c->logging.progress);
  EXPECT_EQ(c->distributed.backend, CommBackend::kInProc);
  EXPECT_EQ(c->distributed.sparse_exchange, SparseExchange::kCompact);
  EXPECT_DOUBLE_EQ(c->distributed.timeout_s, 300.0);
  EXPECT_FALSE(c->precision.allow_tf32);
  EXPECT_FALSE(c->sparsity.sparse_weights());
  EXPECT_EQ(c->data.synthetic.n, 64);
  EXPECT_EQ(c->data.synthetic_test_examples, 32);
}

struct ErrorCase {
  const char* label;
  std::string yaml;  // appended to kBase unless it starts with '!'
  std::string message;
};

TEST(JobConfig, EachClassOfErrorIsOneLineNamingTheKey) {
  const std::string sparse = kSparse;
  const ErrorCase cases[] = {
      // Unknown keys, with did-you-mean.
      {"unknown top-level", "optimiser: {lr: 0.1}", "optimiser: unknown key; did you mean 'optimizer'?"},
      {"unknown nested", "optimizer: {lrr: 0.1}", "optimizer.lrr: unknown key; did you mean 'optimizer.lr'?"},
      {"key of another section", "lr: 0.1", "lr: unknown key; did you mean 'optimizer.lr' (in another section)?"},
      {"unknown in a list", sparse + "  outputs: [{name: fc1, foward: []}]",
       "sparsity.outputs[0].foward: unknown key; did you mean 'sparsity.outputs[0].forward'?"},
      {"unknown model option",
       "!model: {name: mlp, options: {size: [8, 3]}}\ndata: {dataset: synthetic}\ntraining: {steps: 1}",
       "model.options.size: unknown option of mlp; did you mean 'model.options.sizes'?"},
      {"unknown value", "optimizer: {name: adma}",
       "optimizer.name: must be one of sgd | adam | adamw | adagrad, got 'adma'; did you mean 'adam'?"},
      // Wrong types.
      {"string for number", "optimizer: {lr: fast}", "optimizer.lr: expected a number, got 'fast'"},
      {"float for integer", "evaluation: {every_steps: 2.5}", "evaluation.every_steps: expected an integer, got '2.5'"},
      {"scalar for section", "checkpoint: runs", "checkpoint: expected a section (a map), got 'runs'"},
      {"map for bool", "logging: {progress: {a: 1}}", "logging.progress: expected a boolean (true/false), got a map"},
      // Out of range.
      {"negative lr", "optimizer: {lr: -0.1}", "optimizer.lr: must be in (0, 10000], got -0.1"},
      {"batch size 0",
       "!model: {name: mlp, options: {sizes: [8, 3]}}\ndata: {dataset: synthetic, batch_size: 0}\ntraining: {steps: 1}",
       "data.batch_size: must be in [1, 16777216], got 0"},
      {"density 0", "sparsity: {density: 0, rules: [{name: fc1.weight}]}",
       "sparsity.density: must be in (0, 1], got 0"},
      {"density above 1", "sparsity: {rules: [{name: fc1.weight, format: csr, density: 1.5}]}",
       "sparsity.rules[0].density: must be in (0, 1], got 1.5"},
      {"momentum 1", "optimizer: {momentum: 1}", "optimizer.momentum: must be in [0, 1), got 1"},
      {"drop fraction", sparse + "mask_update: {method: set, end_step: 50, drop_fraction: 1.5}",
       "mask_update.drop_fraction: must be in (0, 1], got 1.5"},
      {"world size", "distributed: {world_size: 0}", "distributed.world_size: must be in [1, 65536], got 0"},
      {"bad device", "device: gpu", "device: must be auto, cpu, cuda or cuda:N, got 'gpu'"},
      {"bad regex", "sparsity: {rules: [{regex: 'fc[', format: csr}]}", ""},
      // Impossible combinations.
      {"steps and epochs",
       "!model: {name: mlp, options: {sizes: [8, 3]}}\ndata: {dataset: synthetic}\ntraining: {steps: 1, epochs: 2}",
       "training.steps: training.epochs is set too; give one of epochs and steps"},
      {"no length", "!model: {name: mlp, options: {sizes: [8, 3]}}\ndata: {dataset: synthetic}",
       "training: give one of training.epochs and training.steps"},
      {"rigl without sparsity", "mask_update: {method: rigl, end_step: 50}",
       "mask_update.method: rigl needs sparse weights: add sparsity.rules and a density below 1"},
      {"static without sparsity", "mask_update: {method: static}",
       "mask_update.method: static needs sparse weights: add sparsity.rules and a density below 1"},
      {"dense with sparse rules", sparse,
       "mask_update.method: dense trains every weight, but sparsity.rules make weights sparse; use static (a fixed "
       "mask) "
       "or a prune-and-regrow method"},
      {"nm with another sparsifier",
       "sparsity: {rules: [{name: fc1.weight, format: nm, sparsifier: {name: magnitude, sparsity: "
       "0.5}}]}\nmask_update: {method: static}",
       "sparsity.rules[0].sparsifier.name: format nm needs the nm sparsifier, got 'magnitude'"},
      {"nm sparsifier in csr",
       "sparsity: {rules: [{name: fc1.weight, format: csr, sparsifier: {name: nm, n: 2, m: 4}}]}",
       "sparsity.rules[0].format: the nm sparsifier makes n:m weights; use format nm (or masked / a general format), "
       "got csr"},
      {"transposable with rigl_nm",
       "sparsity: {rules: [{name: fc1.weight, format: nm, transposable: true}]}\nmask_update: {method: rigl_nm, "
       "end_step: 50}",
       "sparsity.rules[0].transposable: transposable masks stay fixed (method static) or are chosen whole (sr_ste): "
       "rigl_nm regrows within the groups of a row, which leaves the columns' groups uneven"},
      {"transposable on csr", "sparsity: {density: 0.2, rules: [{name: fc1.weight, format: csr, transposable: true}]}",
       "sparsity.rules[0].transposable: only for n:m formats (nm, or one declared with n:m groups), not csr"},
      {"unknown growth policy",
       "sparsity: {density: 0.2, rules: [{name: fc1.weight, format: csr}]}\nmask_update: {method: rigl, end_step: 50, "
       "growth: no_such_policy}",
       "mask_update.growth: unknown growth policy 'no_such_policy'; registered: gradient, momentum, random (a program "
       "registers its own with register_growth_policy)"},
      {"rigl_nm on csr",
       "sparsity: {density: 0.2, rules: [{name: fc1.weight, format: csr}]}\nmask_update: {method: rigl_nm, end_step: "
       "50}",
       "sparsity.rules[0].format: rigl_nm regrows n:m layers within their groups and needs an n:m format (nm, or one "
       "declared with n:m groups), got csr (method rigl takes any format)"},
      {"sr_ste on csr",
       "sparsity: {density: 0.2, rules: [{name: fc1.weight, format: csr}]}\nmask_update: {method: sr_ste}",
       "sparsity.rules[0].format: sr_ste trains dense weights through their n:m projection and needs an n:m format "
       "(nm, or one declared with n:m groups), got csr (for other formats use static, set, rigl or snfs)"},
      {"sr_ste with a negative decay",
       "sparsity: {rules: [{name: fc1.weight, format: nm}]}\nmask_update: {method: sr_ste, decay: -1.0e-4}",
       "mask_update.decay: must be in [0, 1], got -0.0001"},
      {"sr_ste with interval 0",
       "sparsity: {rules: [{name: fc1.weight, format: nm}]}\nmask_update: {method: sr_ste, interval: 0}",
       "mask_update.interval: must be in [1, 1000000000000], got 0"},
      {"sr_ste with an end step",
       "sparsity: {rules: [{name: fc1.weight, format: nm}]}\nmask_update: {method: sr_ste, end_step: 50}",
       "mask_update.end_step: not used by method sr_ste (its keys: interval, decay)"},
      {"sr_ste without sparsity", "mask_update: {method: sr_ste}",
       "mask_update.method: sr_ste needs sparse weights: add sparsity.rules and a density below 1"},
      {"sr_ste on a parameter read without a view",
       "sparsity: {rules: [{name: fc1.bias, format: nm}]}\nmask_update: {method: sr_ste}",
       "sparsity.rules[0]: sr_ste sees a weight through its n:m projection where its layer reads it, which Linear and "
       "Conv2d weights allow; 'fc1.bias' is not one"},
      {"decay with rigl",
       "sparsity: {density: 0.2, rules: [{name: fc1.weight, format: csr}]}\nmask_update: {method: rigl, end_step: "
       "50, decay: 1.0e-4}",
       "mask_update.decay: only for method sr_ste, not rigl"},
      {"gmp initial below final",
       sparse.substr(0, sparse.find("  density")) + "  rules: [{name: fc1.weight, format: csr}]\n" +
           "mask_update: {method: gmp, end_step: 50, initial_density: 0.5, final_density: 0.8}",
       "mask_update.final_density: must be <= mask_update.initial_density (0.5), got 0.8"},
      // Sparse to dense.
      {"densify without sparse weights", "mask_update: {densify_step: 50}",
       "mask_update.densify_step: method dense trains dense weights from the start; densify_step makes sparse "
       "weights dense (methods static, set, rigl, rigl_nm, snfs and gmp)"},
      {"densify with sr_ste",
       "sparsity: {rules: [{name: fc1.weight, format: nm}]}\nmask_update: {method: sr_ste, densify_step: 50}",
       "mask_update.densify_step: sr_ste keeps its weights dense already (forward sees their n:m projection)"},
      {"densify at the end", sparse + "mask_update: {method: static, densify_step: 100}",
       "mask_update.densify_step: must be < training.steps (100), so that some steps train dense after it; got "
       "100"},
      {"densify past the end", sparse + "mask_update: {method: static, densify_step: 5000}",
       "mask_update.densify_step: must be < training.steps (100), so that some steps train dense after it; got "
       "5000"},
      {"densify at step 0", sparse + "mask_update: {method: static, densify_step: 0}",
       "mask_update.densify_step: must be in [1, 1000000000000], got 0"},
      {"densify before the masks stop", sparse + "mask_update: {method: rigl, end_step: 60, densify_step: 40}",
       "mask_update.densify_step: must be >= mask_update.end_step (60): the masks change until then, and dense "
       "weights have no mask; got 40"},
      {"densify ramp negative", sparse + "mask_update: {method: static, densify_step: 50, densify_warmup_steps: -5}",
       "mask_update.densify_warmup_steps: must be in [0, 1000000000000], got -5"},
      {"densify ramp without densify_step", sparse + "mask_update: {method: static, densify_warmup_steps: 10}",
       "mask_update.densify_warmup_steps: ramps the learning rate up after mask_update.densify_step, which this job "
       "does not set (set densify_step too, or leave densify_warmup_steps out)"},
      {"densify ramp with method dense", "mask_update: {densify_warmup_steps: 10}",
       "mask_update.densify_warmup_steps: ramps the learning rate up after mask_update.densify_step, which this job "
       "does not set (set densify_step too, or leave densify_warmup_steps out)"},
      {"densify ramp past the end",
       sparse + "mask_update: {method: static, densify_step: 90, densify_warmup_steps: 11}",
       "mask_update.densify_warmup_steps: the ramp after mask_update.densify_step must end within training.steps "
       "(100): densify_step + densify_warmup_steps = 90 + 11 = 101 > 100"},
      {"densify ramp by epochs past the end",
       "!model: {name: mlp, options: {sizes: [8, 16, 3]}}\n"
       "data: {dataset: synthetic, batch_size: 16, synthetic: {examples: 64, test_examples: 32, features: 8, "
       "classes: 3}}\ntraining: {epochs: 1}\n" +
           sparse + "mask_update: {method: static, densify_step: 3, densify_warmup_steps: 2}",
       "mask_update.densify_warmup_steps: the ramp after mask_update.densify_step must end within the planned steps "
       "(4): densify_step + densify_warmup_steps = 3 + 2 = 5 > 4"},
      {"densify at gmp's last pruning step",
       sparse.substr(0, sparse.find("  density")) + "  rules: [{name: fc1.weight, format: csr}]\n" +
           "mask_update: {method: gmp, end_step: 50, final_density: 0.2, densify_step: 50}",
       "mask_update.densify_step: must be > mask_update.end_step (50): the masks change until then, and dense "
       "weights have no mask; got 50"},
      {"end past training", sparse + "mask_update: {method: set, end_step: 500}",
       "mask_update.end_step: must be <= training.steps (100), got 500"},
      {"end before start", sparse + "mask_update: {method: set, start_step: 50, end_step: 20}",
       "mask_update.end_step: must be > start_step (50), got 20"},
      {"regrow key for static", sparse + "mask_update: {method: static, interval: 10}",
       "mask_update.interval: not used by method static (masks never change)"},
      {"snfs without momentum", sparse + "mask_update: {method: snfs, end_step: 50}",
       "optimizer.momentum: snfs grows by momentum: must be > 0 with sgd, got 0"},
      {"adam key for sgd", "optimizer: {name: sgd, beta1: 0.9}",
       "optimizer.beta1: not an option of sgd (it is adam's and adamw's)"},
      {"nesterov without momentum", "optimizer: {nesterov: true}",
       "optimizer.nesterov: needs momentum > 0 and dampening 0, got momentum 0 and dampening 0"},
      {"validation without split", "evaluation: {split: validation}",
       "evaluation.split: validation needs data.validation_split > 0"},
      {"nccl on cpu", "device: cpu\ndistributed: {backend: nccl, world_size: 2}",
       "distributed.backend: nccl needs a CUDA device, got device cpu; use inproc"},
      {"inproc on a gpu", "device: cuda:0\ndistributed: {world_size: 2}",
       "distributed.backend: inproc runs its ranks on the CPU, got device cuda:0; use nccl for GPUs"},
      {"zero timeout", "distributed: {timeout_s: 0}", "distributed.timeout_s: must be in (0, 604800], got 0"},
      {"negative bucket", "distributed: {bucket_mb: -1}", "distributed.bucket_mb: must be in (0, 65536], got -1"},
      {"top-k of everything", "distributed: {topk_fraction: 1}", "distributed.topk_fraction: must be in [0, 1), got 1"},
      {"rigl with top-k",
       sparse + "mask_update: {method: rigl, end_step: 50}\ndistributed: {world_size: 2, topk_fraction: 0.1}",
       "distributed.topk_fraction: rigl grows from the dense gradient averaged over ranks, which the top-k exchange "
       "truncates: use 0 (exact exchange) with rigl"},
      {"snfs with top-k",
       sparse + "optimizer: {momentum: 0.9}\nmask_update: {method: snfs, end_step: 50}\n"
                "distributed: {world_size: 2, topk_fraction: 0.1}",
       "distributed.topk_fraction: snfs grows from the momentum averaged over ranks, which the top-k exchange "
       "truncates: "
       "use 0 (exact exchange) with snfs"},
      {"top-k on one rank", "distributed: {topk_fraction: 0.1}",
       "distributed.topk_fraction: has no effect with one rank (distributed.world_size 1); leave it 0"},
      {"validation split of nothing",
       "!model: {name: mlp, options: {sizes: [8, 3]}}\ndata: {dataset: synthetic, validation_split: 0.001, "
       "synthetic: {examples: 64, test_examples: 8, features: 8, classes: 3}}\ntraining: {steps: 1}",
       "data.validation_split: holds out no example of the 64 (0.001 x 64 < 1)"},
      {"drop_last leaves no batch",
       "!model: {name: mlp, options: {sizes: [8, 3]}}\ndata: {dataset: synthetic, batch_size: 100, drop_last: true, "
       "synthetic: {examples: 64, test_examples: 8, features: 8, classes: 3}}\ntraining: {steps: 1}",
       "data.drop_last: leaves no batch: each rank has 64 training examples, fewer than data.batch_size 100"},
      {"structural change allowed", "checkpoint: {allow_changes: [optimizer.lr, model.options.sizes]}",
       "checkpoint.allow_changes: 'model.options.sizes' cannot change on resume: the model, its formats and densities, "
       "the dtype, the optimizer, the mask-update method and its densify_step shape the checkpoint's tensors (start a "
       "new run instead)"},
      {"structural prefix allowed", "checkpoint: {allow_changes: ['sparsity.*']}", ""},
      {"not a setting", "checkpoint: {allow_changes: ['Optimizer LR']}",
       "checkpoint.allow_changes: 'Optimizer LR' is not a job setting (a key such as optimizer.lr, a prefix such as "
       "optimizer.*, or *)"},
      {"unknown exchange", "distributed: {sparse_exchange: compacted}",
       "distributed.sparse_exchange: must be one of compact | dense, got 'compacted'; did you mean 'compact'?"},
      {"rule selecting nothing", "sparsity: {rules: [{name: fc9.weight, format: csr}]}", ""},
      {"override of an unknown layer", sparse + "  overrides: {fc7.weight: 0.5}\nmask_update: {method: static}",
       "sparsity.overrides.fc7.weight: the model has no parameter 'fc7.weight'; did you mean 'fc1.weight'?"},
      {"keep_last without dir", "checkpoint: {keep_last: 3}",
       "checkpoint.keep_last: has no effect without checkpoint.dir"},
      {"warm-up factor without warm-up", "lr_schedule: {warmup_start_factor: 0.1}",
       "lr_schedule.warmup_start_factor: has no effect without lr_schedule.warmup_steps > 0"},
      {"bsr block that does not divide",
       "sparsity: {density: 0.5, rules: [{name: fc1.weight, format: bsr, block_rows: 5}]}\n"
       "mask_update: {method: static}",
       "sparsity.rules[0].format: 5x5 blocks do not divide 'fc1.weight' of shape [16, 8]"},
      {"sparsifier block that does not divide",
       "sparsity: {density: 0.5, rules: [{name: fc1.weight, format: csr, sparsifier: {name: block_magnitude, "
       "sparsity: 0.5, block_rows: 4611686018427387904}}]}\nmask_update: {method: static}",
       "sparsity.rules[0].sparsifier: cannot take 'fc1.weight': block_magnitude(sparsity=0.5, "
       "block_rows=4611686018427387904, block_cols=4611686018427387904, norm=l2): the shape [16, 8] is not a whole "
       "number of blocks"},
      {"csr on a conv weight",
       "!model: {name: lenet5}\ntraining: {steps: 1}\n"
       "sparsity: {density: 0.5, rules: [{name: conv1.weight, format: csr}]}\nmask_update: {method: static}",
       "sparsity.rules[0].format: csr holds matrices; 'conv1.weight' has shape [6, 1, 5, 5] (use coo or masked)"},
      {"dense layer without a rule", sparse + "  dense: [fc2.bias]\nmask_update: {method: static}",
       "sparsity.dense: no rule in sparsity.rules selects 'fc2.bias'"},
      {"mlp inputs unlike the data",
       "!model: {name: mlp, options: {sizes: [10, 3]}}\n"
       "data: {dataset: synthetic, synthetic: {features: 8, classes: 3, test_examples: 8}}\ntraining: {steps: 1}",
       "model.options.sizes: the first size must be the 8 input features of synthetic, got 10"},
      {"mlp classes unlike the data", "!model: {name: mlp, options: {sizes: '784,100,5'}}\ntraining: {steps: 1}",
       "model.options.sizes: the last size must be the 10 classes of fashion_mnist, got 5"},
      {"lenet5 on flattened images", "!model: {name: lenet5}\ndata: {flatten: true}\ntraining: {steps: 1}",
       "data.flatten: lenet5 reads [N, 1, 28, 28] images: must be false"},
      {"lenet5 classes unlike the data", "!model: {name: lenet5, options: {num_classes: 5}}\ntraining: {steps: 1}",
       "model.options.num_classes: must be the 10 classes of fashion_mnist, got 5"},
      {"char_lm on images", "!model: {name: char_lm}\ntraining: {steps: 1}",
       "data.dataset: char_lm reads token ids: must be text, got fashion_mnist with model char_lm"},
      {"char_lm vocabulary too small",
       "!model: {name: char_lm}\ndata: {dataset: text, validation_split: 0.1}\ntraining: {steps: 1}",
       "model.options.vocab_size: the corpus '/usr/share/perl/5.36.0/pod/perldiag.pod' has 97 distinct bytes: must be "
       ">= "
       "97, got 65"},
      {"window longer than the context",
       "!model: {name: char_lm, options: {vocab_size: 97, context: 32}}\ndata: {dataset: text, validation_split: 0.1}\n"
       "training: {steps: 1}",
       "data.seq_len: must be <= model.options.context (32), got 64"},
      {"density without rules", "sparsity: {density: 0.1}",
       "sparsity.density: applies to the parameters that sparsity.rules select, and there are no rules"},
      {"step schedule without step_size", "lr_schedule: {name: step}",
       "lr_schedule.step_size: required for the step schedule"},
      {"unknown sparsifier",
       "sparsity: {rules: [{name: fc1.weight, format: csr, sparsifier: {name: magnitud, sparsity: 0.5}}]}", ""},
      {"density contradicts sparsifier",
       "sparsity: {rules: [{name: fc1.weight, format: csr, density: 0.3, sparsifier: {name: magnitude, sparsity: "
       "0.5}}]}",
       "sparsity.rules[0].density: 0.3 contradicts the sparsifier's sparsity 0.5 (density = 1 - sparsity)"},
      // A sparsifier's parameter of the wrong type: the rule's key, the parameter and what it expects.
      {"sparsifier parameter not a number",
       "sparsity: {rules: [{name: fc1.weight, format: csr, sparsifier: {name: magnitude, sparsity: high}}]}",
       "sparsity.rules[0].sparsifier: sparsifier 'magnitude': parameter 'sparsity' must be a finite number, got "
       "'high'"},
      {"sparsifier parameter not an integer",
       "sparsity: {rules: [{name: fc1.weight, format: nm, sparsifier: {name: nm, n: 2.0, m: 4}}]}",
       "sparsity.rules[0].sparsifier: sparsifier 'nm': parameter 'n' must be an integer, got '2.0'"},
      {"output sparsifier parameter not a boolean",
       "sparsity: {outputs: [{name: fc1, forward: [{inline: {name: random, sparsity: 0.5, rescale: maybe}}]}]}",
       "sparsity.outputs[0].forward[0].inline: sparsifier 'random': parameter 'rescale' must be true or false, got "
       "'maybe'"},
      // Missing files.
      {"missing dataset path",
       "!model: {name: mlp}\ndata: {dataset: fashion_mnist, path: /nonexistent/fmnist}\ntraining: {steps: 1}",
       "data.path: Fashion-MNIST directory '/nonexistent/fmnist' not found"},
      {"missing text file",
       "!model: {name: char_lm}\ndata: {dataset: text, path: /nonexistent/corpus.txt, validation_split: "
       "0.1}\ntraining: {steps: 1}",
       "data.path: text file or directory '/nonexistent/corpus.txt' not found"},
      {"byte vocabulary too small",
       "!model: {name: char_lm}\ndata: {dataset: text, vocab: bytes, validation_split: 0.1}\ntraining: {steps: 1}",
       "model.options.vocab_size: data.vocab is bytes: must be >= 256, got 65"},
      {"unknown vocabulary",
       "!model: {name: char_lm}\ndata: {dataset: text, vocab: words, validation_split: 0.1}\ntraining: {steps: 1}",
       "data.vocab: must be one of distinct | bytes, got 'words'"},
      {"suffix for a file",
       "!model: {name: char_lm, options: {vocab_size: 97}}\ndata: {dataset: text, suffix: .pod}\ntraining: {steps: 1}",
       "data.suffix: only for a directory, not the file /usr/share/perl/5.36.0/pod/perldiag.pod"},
      {"missing resume dir", "checkpoint: {resume: /nonexistent/ckpt}",
       "checkpoint.resume: '/nonexistent/ckpt' not found"},
      {"key for another dataset", "!model: {name: mlp}\ndata: {dataset: synthetic, seq_len: 32}\ntraining: {steps: 1}",
       "data.seq_len: only for dataset text, not synthetic"},
  };
  for (const ErrorCase& c : cases) {
    const std::string yaml = c.yaml.rfind("!", 0) == 0 ? c.yaml.substr(1) : std::string(kBase) + c.yaml + "\n";
    const absl::StatusOr<JobConfig> r = parse(yaml);
    ASSERT_FALSE(r.ok()) << c.label;
    const std::string m(r.status().message());
    EXPECT_EQ(m.find('\n'), std::string::npos) << c.label << ": " << m;
    if (!c.message.empty()) { EXPECT_EQ(m, c.message) << c.label; }
  }
}

TEST(JobConfig, LooserMessagesNameTheKey) {
  // Messages that pass on a lower layer's words: checked for the key path only.
  EXPECT_EQ(error_of(std::string(kBase) + "sparsity: {rules: [{regex: 'fc[', format: csr}]}"),
            "sparsity.rules[0].regex: 'fc[' does not parse: missing ]: [");
  EXPECT_EQ(
      error_of(std::string(kBase) + "sparsity: {rules: [{name: fc9.weight, format: csr}]}").rfind("sparsity: ", 0), 0u);
  const std::string sp =
      error_of(std::string(kBase) +
               "sparsity: {rules: [{name: fc1.weight, format: csr, sparsifier: {name: magnitud, sparsity: 0.5}}]}");
  EXPECT_EQ(sp.rfind("sparsity.rules[0].sparsifier.name: unknown sparsifier 'magnitud'", 0), 0u) << sp;
  EXPECT_NE(sp.find("did you mean 'magnitude'?"), std::string::npos) << sp;
}

TEST(JobConfig, MissingFilesAreNotFound) {
  const absl::StatusOr<JobConfig> r = parse(std::string(kBase) + "checkpoint: {resume: /nonexistent/ckpt}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  const absl::StatusOr<JobConfig> f = load_job_config("/nonexistent/job.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(f.status().message()), "/nonexistent/job.yaml: cannot open: No such file or directory");
}

TEST(JobConfig, BadYamlIsOneLineWithThePosition) {
  const std::string m = error_of("model: {name: mlp\ntraining: [");
  EXPECT_EQ(m.rfind("test.yaml: not valid YAML: line ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_EQ(error_of("- a\n- b\n"), "test.yaml: a job file is a map of keys (model:, data:, ...)");
}

TEST(JobConfig, BadBytesNeverCrash) {
  const std::string inputs[] = {std::string("\x00\xff\xfe", 3),
                                "{{{{",
                                "model: [1, 2",
                                "- - -",
                                "? [a, b]\n: 1",
                                "model: {name: *x}",
                                "a: &x {b: 1}\nmodel: *x",
                                std::string(kBase) + "optimizer: {lr: .nan}",
                                "training: {steps: 99999999999999999999}",
                                std::string(kBase) + "sparsity: {rules: fc1.weight}",
                                std::string(kBase) + "sparsity: {rules: [fc1.weight]}",
                                std::string(kBase) + "sparsity: {overrides: {fc1.weight: [1]}}",
                                "model: {name: mlp, options: {sizes: {a: 1}}}",
                                std::string(600, '[')};
  for (const std::string& in : inputs) {
    const absl::StatusOr<JobConfig> c = parse(in);
    ASSERT_FALSE(c.ok()) << in;
    const std::string m(c.status().message());
    EXPECT_FALSE(m.empty()) << in;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(error_of(std::string(kBase) + "training: {epochs: 3}"),
            "training: given twice (YAML would keep only the first)");
  EXPECT_EQ(error_of(std::string(kBase) + "sparsity: {overrides: {a: 0.5, a: 0.2}}"),
            "sparsity.overrides.a: given twice (YAML would keep only the first)");
  EXPECT_EQ(error_of(std::string(kBase) + "optimizer: {lr: .nan}"), "optimizer.lr: must be a finite number, got .nan");
  EXPECT_EQ(error_of(std::string(kBase) + "sparsity: {rules: fc1.weight}"),
            "sparsity.rules: expected a list, got 'fc1.weight'");
  EXPECT_EQ(error_of(std::string(kBase) + "sparsity: {rules: [fc1.weight]}"),
            "sparsity.rules[0]: expected a section (a map of keys), got 'fc1.weight'");
}

TEST(JobConfig, OverridesApplyBeforeValidation) {
  const absl::StatusOr<JobConfig> c =
      parse(kBase, {"optimizer.lr=0.05", "optimizer.momentum=0.9", "training.steps=200", "seed=7", "device=cuda:1",
                    "data.synthetic.classes=5", "model.options.sizes=[8, 32, 5]", "logging.progress=off"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->optimizer.sgd.lr, 0.05);
  EXPECT_DOUBLE_EQ(c->optimizer.sgd.momentum, 0.9);
  EXPECT_EQ(c->training.steps, 200);
  EXPECT_EQ(c->seed, 7u);
  EXPECT_FALSE(c->device.is_auto);
  EXPECT_EQ(c->device.device, Device::cuda(1));
  EXPECT_EQ(c->data.synthetic.classes, 5);
  EXPECT_EQ(std::get<std::string>(c->model.options.at("sizes")), "8,32,5");
  EXPECT_FALSE(c->logging.progress);
  // An override can make a valid job invalid, and the message names the key.
  EXPECT_EQ(error_of(kBase, {"optimizer.lr=-1"}), "optimizer.lr: must be in (0, 10000], got -1");
  // Into a list, and into a free-form map whose keys have dots.
  const std::string sparse = std::string(kBase) + kSparse + "mask_update: {method: static}\n";
  const absl::StatusOr<JobConfig> s = parse(sparse, {"sparsity.rules.0.format=coo", "sparsity.overrides.fc2.weight=0.5",
                                                     "mask_update.method=set", "mask_update.end_step=50"});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->sparsity.schedule.parameters[0].format.name, "coo");
  EXPECT_DOUBLE_EQ(s->sparsity.distribution.overrides.at("fc2.weight"), 0.5);
  EXPECT_EQ(s->mask_update.method, MaskMethod::kSet);
}

TEST(JobConfig, OverridesAreTypeCheckedAndSuggestKeys) {
  EXPECT_EQ(error_of(kBase, {"optimizer.lr=abc"}), "--set optimizer.lr: optimizer.lr expects a number, got 'abc'");
  EXPECT_EQ(error_of(kBase, {"training.steps=ten"}),
            "--set training.steps: training.steps expects an integer, got 'ten'");
  EXPECT_EQ(
      error_of(kBase, {"optimizer.learning_rate=0.1"}),
      "--set: optimizer.learning_rate: unknown key; known keys here: name, lr, momentum, dampening, nesterov, beta1, "
      "beta2, eps, lr_decay, initial_accumulator_value, weight_decay, grad_clip");
  EXPECT_EQ(error_of(kBase, {"data.batchsize=32"}),
            "--set: data.batchsize: unknown key; did you mean 'data.batch_size'?");
  EXPECT_EQ(error_of(kBase, {"mask_update.metod=rigl"}),
            "--set: mask_update.metod: unknown key; did you mean 'mask_update.method'?");
  EXPECT_EQ(error_of(kBase, {"lr=0.1"}), "--set: lr: unknown key; did you mean 'optimizer.lr' (in another section)?");
  EXPECT_EQ(error_of(kBase, {"no_equals"}), "--set no_equals: expected key.path=value");
}

TEST(JobConfig, ResolveScheduleFillsDensitiesPerParameter) {
  const absl::StatusOr<JobConfig> c = parse(std::string(kBase) + R"(
sparsity:
  density: 0.3
  distribution: uniform
  dense: [fc2.weight]
  rules:
    - {regex: 'fc[0-9]\.weight', format: csr}
    - {name: fc1.bias, format: coo, sparsifier: {name: magnitude, sparsity: 0.5}}
mask_update: {method: static}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const std::vector<LayerShape> layers = {
      {"fc1.weight", Shape{16, 8}}, {"fc1.bias", Shape{16}}, {"fc2.weight", Shape{3, 16}}, {"fc2.bias", Shape{3}}};
  const SparsitySchedule s = resolve_schedule(*c, layers);
  ASSERT_EQ(s.parameters.size(), 2u);  // fc2.weight stays dense, fc2.bias has no rule
  EXPECT_EQ(s.parameters[0].selector.kind, Selector::Kind::kExact);
  EXPECT_EQ(s.parameters[0].selector.pattern, "fc1.weight");
  EXPECT_EQ(s.parameters[0].format.name, "csr");
  EXPECT_EQ(s.parameters[1].selector.pattern, "fc1.bias");
  ASSERT_TRUE(s.parameters[1].density.has_value());
  EXPECT_DOUBLE_EQ(*s.parameters[1].density, 0.5);  // from its sparsifier
  // The target nnz over fc1.weight, fc1.bias and the dense fc2.weight:
  // 0.3 * (128 + 16 + 48) = 57.6 = d * 128 + 8 + 48.
  ASSERT_TRUE(s.parameters[0].density.has_value());
  EXPECT_NEAR(*s.parameters[0].density, (0.3 * 192 - 8 - 48) / 128, 1e-9);
}

TEST(JobConfig, ConfigErrorPrintsOneLineAndReturnsTwo) {
  std::ostringstream err;
  EXPECT_EQ(config_error("job.yaml", absl::InvalidArgumentError("optimizer.lr: must be > 0, got -0.1"), err), 2);
  EXPECT_EQ(err.str(), "job.yaml: optimizer.lr: must be > 0, got -0.1\n");
  EXPECT_EQ(kConfigErrorExitCode, 2);
}

}  // namespace
}  // namespace coppice
