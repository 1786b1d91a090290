// The numbers of a job (train/config_schema.h's ranges, train/config.cc):
// every numeric key has a range and a value outside it is refused with one
// line naming the key, the value and the range; integers that do not fit
// int64 say so; seeds take any u64; products of sizes (epochs x batches,
// steps x batch x ranks) and data or models larger than memory are refused
// at validation, naming the key and the bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"
#include "train/config_schema.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

const char* kModel = "model: {name: mlp, options: {sizes: [8, 16, 3]}}\n";
const char* kSynthetic = "data: {dataset: synthetic, synthetic: {features: 8, test_examples: 8}}\n";
const char* kRule = "sparsity: {density: 0.5, rules: [{name: fc1.weight, format: csr}]}\n";

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  const absl::StatusOr<JobConfig> c = parse_job_config(yaml, overrides, "test.yaml");
  return c.ok() ? std::string("<ok>") : std::string(c.status().message());
}

std::string shown(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

TEST(ConfigRanges, EveryNumericKeyHasOne) {
  for (const SchemaKey& k : job_schema()) {
    if (k.type != KeyType::kInt && k.type != KeyType::kDouble) continue;
    const KeyRange* r = key_range(k.path);
    ASSERT_NE(r, nullptr) << k.path << " has no range";
    EXPECT_EQ(r->type, k.type) << k.path;
    if (r->seed) continue;
    if (k.type == KeyType::kInt) {
      EXPECT_LE(r->min, r->max) << k.path;
    } else {
      EXPECT_LT(r->lo, r->hi) << k.path;
      EXPECT_TRUE(std::isfinite(r->lo)) << k.path;  // every lower end is a number
    }
  }
  EXPECT_EQ(key_range("optimizer.name"), nullptr);
  EXPECT_EQ(key_range("precision.loss_scale")->text(), "in (0, 3.40282346638529e+38]");  // its number
  EXPECT_EQ(key_range("sparsity.overrides.*")->text(), "in (0, 1]");
  EXPECT_EQ(key_range("data.batch_size")->text(), "in [1, 16777216]");
  EXPECT_EQ(key_range("optimizer.grad_clip")->text(), ">= 0");
  EXPECT_EQ(key_range("seed")->text(), "in [0, 18446744073709551615]");
}

// One key of each section in a job where it is read: `context` holds '@'
// where the value goes; `shown` is the key as messages name it.
struct Where {
  Where(std::string p, std::string c, std::string s = "")
      : pattern(std::move(p)), context(std::move(c)), shown(std::move(s)) {}
  std::string pattern;
  std::string context;
  std::string shown;  // "" = pattern
};

const std::vector<Where>& every_key() {
  static const std::vector<Where> keys = {
      {"data.batch_size", "data: {dataset: synthetic, batch_size: @, synthetic: {features: 8}}"},
      {"data.eval_batch_size", "data: {dataset: synthetic, eval_batch_size: @, synthetic: {features: 8}}"},
      {"data.validation_split", "data: {dataset: synthetic, validation_split: @, synthetic: {features: 8}}"},
      {"data.mean", "data: {dataset: fashion_mnist, mean: @}"},
      {"data.std", "data: {dataset: fashion_mnist, std: @}"},
      {"data.seq_len", "data: {dataset: text, seq_len: @}"},
      {"data.stride", "data: {dataset: text, stride: @}"},
      {"data.synthetic.examples", "data: {dataset: synthetic, synthetic: {features: 8, examples: @}}"},
      {"data.synthetic.test_examples", "data: {dataset: synthetic, synthetic: {features: 8, test_examples: @}}"},
      {"data.synthetic.features", "data: {dataset: synthetic, synthetic: {features: @}}"},
      {"data.synthetic.classes", "data: {dataset: synthetic, synthetic: {features: 8, classes: @}}"},
      {"data.synthetic.center_scale", "data: {dataset: synthetic, synthetic: {features: 8, center_scale: @}}"},
      {"data.synthetic.spread", "data: {dataset: synthetic, synthetic: {features: 8, spread: @}}"},
      {"data.docgraph.vocabulary", "data: {dataset: docgraph, docgraph: {vocabulary: @}}"},
      {"data.docgraph.min_class_documents", "data: {dataset: docgraph, docgraph: {min_class_documents: @}}"},
      {"data.docgraph.train_fraction", "data: {dataset: docgraph, docgraph: {train_fraction: @}}"},
      {"data.docgraph.validation_fraction", "data: {dataset: docgraph, docgraph: {validation_fraction: @}}"},
      {"sparsity.density", std::string(kSynthetic) + "sparsity: {density: @, rules: [{name: fc1.weight}]}"},
      {"sparsity.rules[].block_rows",
       std::string(kSynthetic) + "sparsity: {rules: [{name: fc1.weight, format: bsr, block_rows: @}]}",
       "sparsity.rules[0].block_rows"},
      {"sparsity.rules[].block_cols",
       std::string(kSynthetic) + "sparsity: {rules: [{name: fc1.weight, format: bsr, block_rows: 1, block_cols: @}]}",
       "sparsity.rules[0].block_cols"},
      {"sparsity.propagate_max_density", "sparsity: {propagate: true, propagate_max_density: @}"},
      {"sparsity.formats.*.block",
       std::string(kSynthetic) +
           "sparsity: {formats: {ranges_blocks: {levels: [dense, compressed, dense, dense], block: @}}}",
       "sparsity.formats.ranges_blocks.block"},
      {"sparsity.rules[].n", std::string(kSynthetic) + "sparsity: {rules: [{name: fc1.weight, format: nm, n: @}]}",
       "sparsity.rules[0].n"},
      {"sparsity.rules[].m", std::string(kSynthetic) + "sparsity: {rules: [{name: fc1.weight, format: nm, m: @}]}",
       "sparsity.rules[0].m"},
      {"sparsity.rules[].density",
       std::string(kSynthetic) + "sparsity: {rules: [{name: fc1.weight, format: csr, density: @}]}",
       "sparsity.rules[0].density"},
      {"optimizer.lr", "optimizer: {lr: @}"},
      {"optimizer.momentum", "optimizer: {momentum: @}"},
      {"optimizer.dampening", "optimizer: {dampening: @}"},
      {"optimizer.beta1", "optimizer: {name: adam, beta1: @}"},
      {"optimizer.beta2", "optimizer: {name: adam, beta2: @}"},
      {"optimizer.eps", "optimizer: {name: adamw, eps: @}"},
      {"optimizer.lr_decay", "optimizer: {name: adagrad, lr_decay: @}"},
      {"optimizer.initial_accumulator_value", "optimizer: {name: adagrad, initial_accumulator_value: @}"},
      {"optimizer.weight_decay", "optimizer: {weight_decay: @}"},
      {"optimizer.grad_clip", "optimizer: {grad_clip: @}"},
      {"lr_schedule.step_size", "lr_schedule: {name: step, step_size: @}"},
      {"lr_schedule.gamma", "lr_schedule: {name: step, step_size: 10, gamma: @}"},
      {"lr_schedule.t_max", "lr_schedule: {name: cosine, t_max: @}"},
      {"lr_schedule.eta_min", "lr_schedule: {name: cosine, eta_min: @}"},
      {"lr_schedule.warmup_steps", "lr_schedule: {warmup_steps: @}"},
      {"lr_schedule.warmup_start_factor", "lr_schedule: {warmup_steps: 10, warmup_start_factor: @}"},
      {"mask_update.start_step", std::string(kRule) + "mask_update: {method: set, start_step: @, end_step: 50}"},
      {"mask_update.end_step", std::string(kRule) + "mask_update: {method: set, end_step: @}"},
      {"mask_update.interval", std::string(kRule) + "mask_update: {method: set, end_step: 50, interval: @}"},
      {"mask_update.drop_fraction", std::string(kRule) + "mask_update: {method: set, end_step: 50, drop_fraction: @}"},
      {"mask_update.initial_density",
       std::string(kRule) + "mask_update: {method: gmp, end_step: 50, initial_density: @}"},
      {"mask_update.final_density", std::string(kRule) + "mask_update: {method: gmp, end_step: 50, final_density: @}"},
      {"mask_update.frequency", std::string(kRule) + "mask_update: {method: gmp, end_step: 50, frequency: @}"},
      {"mask_update.densify_step", std::string(kRule) + "mask_update: {method: static, densify_step: @}"},
      {"mask_update.densify_warmup_steps",
       std::string(kRule) + "mask_update: {method: static, densify_step: 50, densify_warmup_steps: @}"},
      {"mask_update.decay",
       "sparsity: {rules: [{name: fc1.weight, format: nm}]}\nmask_update: {method: sr_ste, "
       "decay: @}"},
      {"training.epochs", "training: {epochs: @}"},
      {"training.steps", "training: {steps: @}"},
      {"training.max_consecutive_skips", "training: {steps: 10, on_nonfinite: skip_step, max_consecutive_skips: @}"},
      {"evaluation.every_steps", "evaluation: {every_steps: @}"},
      {"evaluation.max_batches", "evaluation: {max_batches: @}"},
      {"checkpoint.every_steps", "checkpoint: {dir: /tmp/ckpt, every_steps: @}"},
      {"checkpoint.keep_last", "checkpoint: {dir: /tmp/ckpt, keep_last: @}"},
      {"logging.every_steps", "logging: {every_steps: @}"},
      {"distributed.world_size", "distributed: {world_size: @}"},
      {"distributed.timeout_s", "distributed: {timeout_s: @}"},
      {"distributed.bucket_mb", "distributed: {bucket_mb: @}"},
      {"distributed.topk_fraction", "distributed: {topk_fraction: @}"},
  };
  return keys;
}

std::string job_with(const Where& w, const std::string& value) {
  std::string text = w.context;
  text.replace(text.find('@'), 1, value);
  std::string job = kModel + text + "\n";
  if (text.find("training:") == std::string::npos) job += "training: {steps: 100}\n";
  if (text.find("data:") == std::string::npos) job += kSynthetic;
  return job;
}

TEST(ConfigRanges, EachRangeIsEnforced) {
  size_t covered = 0;
  for (const Where& w : every_key()) {
    const KeyRange* r = key_range(w.pattern);
    ASSERT_NE(r, nullptr) << w.pattern;
    const std::string key = w.shown.empty() ? w.pattern : w.shown;
    const std::string prefix = key + ": must be " + r->text() + ", got ";
    std::vector<std::string> outside;  // as YAML and as the message shows it
    if (r->type == KeyType::kInt) {
      outside = {std::to_string(r->min - 1), std::to_string(r->max + 1)};
      for (const std::string& v : outside) EXPECT_EQ(error_of(job_with(w, v)), prefix + v) << w.pattern;
    } else {
      std::vector<double> values = {r->lo_open ? r->lo : r->lo - 0.5};
      if (std::isfinite(r->hi)) values.push_back(r->hi_open ? r->hi : r->hi * 2 + 1);
      for (double v : values) {
        std::ostringstream yaml;
        yaml.precision(17);
        yaml << v;
        EXPECT_EQ(error_of(job_with(w, yaml.str())), prefix + shown(v)) << w.pattern;
      }
    }
    ++covered;
  }
  // Every numeric key but the seeds (below) and sparsity.overrides.* (config_test).
  size_t numeric = 0;
  for (const SchemaKey& k : job_schema())
    if ((k.type == KeyType::kInt || k.type == KeyType::kIntList || k.type == KeyType::kDouble) &&
        !key_range(k.path)->seed)
      ++numeric;
  EXPECT_EQ(covered, numeric - 1);
}

TEST(ConfigRanges, IntegersThatDoNotFitSaySo) {
  const std::string job = std::string(kModel) + kSynthetic;
  EXPECT_EQ(error_of(job + "training: {epochs: 99999999999999999999}"),
            "training.epochs: 99999999999999999999 does not fit in a 64-bit integer (-9223372036854775808 to "
            "9223372036854775807)");
  EXPECT_EQ(error_of(job + "training: {steps: -9223372036854775809}")
                .rfind("training.steps: -9223372036854775809 does not fit in a 64-bit integer", 0),
            0u);
  EXPECT_EQ(error_of(job + "training: {steps: 100}", {"training.steps=0x10000000000000000"})
                .rfind("training.steps: 0x10000000000000000 does not fit", 0),
            0u);
  // Model options too, scalars and list entries.
  EXPECT_EQ(error_of(job + "training: {steps: 1}", {"model.options.sizes=[8, 99999999999999999999, 3]"})
                .rfind("model.options.sizes: 99999999999999999999 does not fit in a 64-bit integer", 0),
            0u);
  EXPECT_EQ(error_of("model: {name: vit, options: {dim: 18446744073709551616}}\ntraining: {steps: 1}")
                .rfind("model.options.dim: 18446744073709551616 does not fit", 0),
            0u);
  // Still "not an integer" for what is not one.
  EXPECT_EQ(error_of(job + "training: {steps: 1e3}"), "training.steps: expected an integer, got '1e3'");
}

TEST(ConfigRanges, SeedsAreAnyUnsigned64BitInteger) {
  const std::string job = std::string(kModel) + "training: {steps: 1}\n";
  const absl::StatusOr<JobConfig> c =
      parse_job_config(job +
                       "seed: 18446744073709551615\ndata: {dataset: synthetic, shuffle_seed: 9223372036854775808, "
                       "synthetic: {features: 8, test_examples: 8}}\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(c->data.loader.seed, uint64_t{1} << 63);
  EXPECT_EQ(c->data.synthetic.seed, std::numeric_limits<uint64_t>::max());  // defaults to the job's
  EXPECT_EQ(std::get<int64_t>(c->model.options.at("seed")), -1);            // the zoo takes the same bits
  EXPECT_EQ(error_of(job + kSynthetic + "seed: -1"), "seed: must be in [0, 18446744073709551615], got -1");
  EXPECT_EQ(error_of(job + kSynthetic + "seed: 18446744073709551616"),
            "seed: must be in [0, 18446744073709551615], got 18446744073709551616 (it does not fit in 64 bits)");
  EXPECT_EQ(error_of(job + "data: {dataset: synthetic, synthetic: {features: 8, test_examples: 8, seed: -5}}"),
            "data.synthetic.seed: must be in [0, 18446744073709551615], got -5");
  EXPECT_EQ(error_of("model: {name: mlp, options: {sizes: [8, 3], seed: -1}}\ntraining: {steps: 1}\n" +
                     std::string(kSynthetic)),
            "model.options.seed: must be in [0, 18446744073709551615], got -1");
}

TEST(ConfigRanges, TheIssuesNumbers) {
  const std::string job = std::string(kModel) + kSynthetic;
  EXPECT_EQ(error_of(job + "training: {epochs: 4611686018427387904}"),
            "training.epochs: must be in [1, 1000000000000], got 4611686018427387904");
  EXPECT_EQ(error_of(job + "training: {steps: 1}\ndistributed: {world_size: 4294967298}"),
            "distributed.world_size: must be in [1, 65536], got 4294967298");
  EXPECT_EQ(error_of(job + "training: {steps: 1}\ndistributed: {timeout_s: 1.0e10}"),
            "distributed.timeout_s: must be in (0, 604800], got 1e+10");
  EXPECT_EQ(error_of(job + "training: {steps: 1}\ndistributed: {timeout_s: 1e300}"),
            "distributed.timeout_s: must be in (0, 604800], got 1e+300");
  EXPECT_EQ(error_of(job + "training: {steps: 1}\ndistributed: {bucket_mb: 1e300}"),
            "distributed.bucket_mb: must be in (0, 65536], got 1e+300");
  EXPECT_EQ(error_of(job + "training: {steps: 1}\nprecision: {loss_scale: 1e300}"),
            "precision.loss_scale: a static loss scale must be in (0, 3.40282346638529e+38], got 1e300");
  EXPECT_EQ(error_of(std::string(kModel) +
                     "training: {steps: 1}\n"
                     "data: {dataset: synthetic, synthetic: {features: 8, examples: 2305843009213693952}}"),
            "data.synthetic.examples: must be in [1, 1099511627776], got 2305843009213693952");
  EXPECT_EQ(error_of(job + "training: {steps: 1}\ndistributed: {world_size: 257}"),
            "distributed.world_size: backend inproc runs a thread (and a model and dataset) per rank: must be <= 256 "
            "with it, got 257");
}

TEST(ConfigRanges, ProductsOfCountsMustBeCountable) {
  // 10^12 epochs of 16 batches (1000 examples at batch 64): more steps than kMaxSteps.
  EXPECT_EQ(error_of(std::string(kModel) + kSynthetic + "training: {epochs: 1000000000000}"),
            "training.epochs: 1000000000000 epochs of 16 steps make more than 1000000000000 steps");
  // 10^12 steps x 2^24 examples x 4 ranks overflow the examples counter.
  EXPECT_EQ(error_of(std::string(kModel) +
                     "training: {steps: 1000000000000}\ndistributed: {world_size: 4}\n"
                     "data: {dataset: synthetic, batch_size: 16777216, synthetic: {features: 8, test_examples: 8}}"),
            "training.steps: 1000000000000 steps of 16777216 examples on 4 ranks are more examples than a 64-bit "
            "integer counts");
}

TEST(ConfigRanges, DataAndModelsLargerThanMemoryAreRefused) {
  // 2^40 examples of 2^24 features: the byte count itself overflows.
  std::string e = error_of(std::string(kModel) +
                           "training: {steps: 1}\n"
                           "data: {dataset: synthetic, synthetic: {examples: 1099511627776, features: 16777216}}");
  EXPECT_EQ(e.rfind("data.synthetic.examples: make_blobs: bytes of 1099511627776 examples of 16777216 features: ", 0),
            0u)
      << e;
  EXPECT_NE(e.find("overflows a 64-bit integer"), std::string::npos) << e;
  // 2^30 examples of 1024 features: 4 TiB.
  e = error_of(
      "model: {name: mlp, options: {sizes: [1024, 3]}}\ntraining: {steps: 1}\n"
      "data: {dataset: synthetic, synthetic: {examples: 1073741824, features: 1024}}");
  EXPECT_EQ(e.rfind("data.synthetic.examples: 1073741824 examples of 1024 features: needs 4406636457984 bytes (4.1e+03 "
                    "GiB) but only ",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find(" of host memory are available"), std::string::npos) << e;
  // The issue's model: a size past the zoo's limit; then one within it but
  // with a petabyte of parameters, refused before any is allocated.
  e = error_of(std::string(kSynthetic) + "training: {steps: 1}\n",
               {"model.name=mlp", "model.options={sizes: [2147483648, 2147483648, 10]}"});
  EXPECT_EQ(e, "model.options.sizes: 2147483648 is more than 16777216 (in '2147483648,2147483648,10')");
  e = error_of(std::string(kSynthetic) + "training: {steps: 1}\n",
               {"model.name=mlp", "model.options={sizes: [16777216, 16777216, 10]}"});
  EXPECT_EQ(e.rfind("model.options.sizes: [16777216, 16777216, 10]: 281475161260042 parameters of f32: needs "
                    "1125900645040168 bytes (1.05e+06 GiB) but only ",
                    0),
            0u)
      << e;
  // Other models: sizes whose products overflow, and tensors beyond memory
  // (refused by the allocator, tensor by tensor).
  e = error_of(
      "model: {name: vit, options: {image_size: 16777216, patch_size: 16777216, channels: 16777216}}\n"
      "training: {steps: 1}\n");
  EXPECT_EQ(e.rfind("model: VisionTransformer: values per patch (channels 16777216, patch_size 16777216): ", 0), 0u)
      << e;
  EXPECT_NE(e.find("overflows a 64-bit integer"), std::string::npos) << e;
  e = error_of("model: {name: vit, options: {dim: 1048576, heads: 1}}\ntraining: {steps: 1}\n");
  EXPECT_EQ(e.rfind("model: cpu allocator: 13194139533312 bytes (1.23e+04 GiB) requested but only ", 0), 0u) << e;
}

TEST(ConfigRanges, TheTextCorpusIsReadBounded) {
  // A sparse file past kTextMaxBytes: refused by its size, before it is read.
  const fs::path dir = fs::temp_directory_path() / "config_ranges_text";
  fs::create_directories(dir);
  const fs::path big = dir / "big.txt";
  { std::ofstream(big) << "x"; }
  fs::resize_file(big, kTextMaxBytes + 1);
  const std::string job = "model: {name: char_lm}\ntraining: {steps: 1}\ndata: {dataset: text, path: " + big.string() +
                          ", validation_split: 0.1}\n";
  EXPECT_EQ(error_of(job), "data.path: " + big.string() + ": 1073741825 bytes, more than the limit of 1073741824");
  // Too short for one window of seq_len.
  const fs::path small = dir / "small.txt";
  { std::ofstream(small) << "abc"; }
  EXPECT_EQ(error_of("model: {name: char_lm}\ntraining: {steps: 1}\ndata: {dataset: text, path: " + small.string() +
                     ", validation_split: 0.1}\n"),
            "data.seq_len: the corpus '" + small.string() +
                "' has 3 bytes, too few for one window of seq_len 64 and its next-byte target");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace coppice
