// The job keys are declared once (train/job_keys.cc) and the readers of
// train/config_readers.cc take their defaults, ranges and choices from the
// declarations: here the two are held to each other. Every declaration is
// well formed (a default that fits its type, range and choices; a range on
// every number), every declared key is read by some reader, and every key a
// reader asks for is declared.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "train/config.h"
#include "train/config_schema.h"
#include "train/key_read_log.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

bool container(KeyType t) { return t == KeyType::kSection || t == KeyType::kList || t == KeyType::kFreeMap; }

TEST(JobKeys, EveryDeclarationIsWellFormed) {
  for (const SchemaKey& k : job_schema()) {
    SCOPED_TRACE(k.path);
    EXPECT_FALSE(k.doc.empty());
    const bool numeric = k.type == KeyType::kInt || k.type == KeyType::kDouble;
    const bool integers = k.type == KeyType::kIntList;
    if (numeric || integers) { EXPECT_TRUE(k.range.has_value()) << "a number without a range"; }
    // A string may carry the range of the number it can hold (precision.loss_scale).
    if (k.range) { EXPECT_TRUE(numeric || integers || k.type == KeyType::kString); }
    if (k.range && numeric) { EXPECT_EQ(k.range->type, k.type); }
    if (k.range && integers) { EXPECT_EQ(k.range->type, KeyType::kInt); }
    if (!k.choices.empty()) {
      EXPECT_EQ(k.type, KeyType::kString) << "choices on a key that is not a string";
      EXPECT_FALSE(k.choices.list().empty());
    }
    const KeyDefault& d = k.default_value;
    if (container(k.type)) { EXPECT_NE(d.kind, KeyDefault::Kind::kValue) << "a section has no default value"; }
    if (d.kind == KeyDefault::Kind::kComputed) { EXPECT_FALSE(d.words.empty()) << "a computed default says how"; }
    if (d.kind != KeyDefault::Kind::kValue) {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(d.value));
      continue;
    }
    switch (k.type) {
      case KeyType::kInt: {
        ASSERT_TRUE(std::holds_alternative<int64_t>(d.value));
        EXPECT_TRUE(k.range->contains(std::get<int64_t>(d.value))) << "the default is outside the range";
        break;
      }
      case KeyType::kDouble: {
        ASSERT_TRUE(std::holds_alternative<double>(d.value));
        EXPECT_TRUE(k.range->contains(std::get<double>(d.value))) << "the default is outside the range";
        break;
      }
      case KeyType::kBool: EXPECT_TRUE(std::holds_alternative<bool>(d.value)); break;
      case KeyType::kString: {
        ASSERT_TRUE(std::holds_alternative<std::string>(d.value));
        if (!k.choices.empty()) {
          const std::vector<std::string> options = k.choices.list();
          EXPECT_NE(std::find(options.begin(), options.end(), std::get<std::string>(d.value)), options.end())
              << "the default is not one of the choices";
        }
        break;
      }
      default: ADD_FAILURE() << "a default value on " << key_type_name(k.type);
    }
  }
}

// Jobs that, between them, take every reader down every branch: each
// dataset, optimizer, schedule and mask method, each kind of rule and stage.
// A job need not load (a Fashion-MNIST job reads its keys before it finds
// the files missing); it must not find a reader at odds with the
// declarations, which is an internal error.
std::vector<std::string> jobs_reading_every_key() {
  const fs::path dir = fs::path(::testing::TempDir()) / "job_keys_test";
  fs::create_directories(dir);
  const std::string corpus = (dir / "corpus.txt").string();
  std::ofstream(corpus) << "the quick brown fox jumps over the lazy dog\n";
  const std::string model = "model: {name: mlp, options: {sizes: [8, 16, 3], seed: 1}}\n";
  const std::string data =
      "data: {dataset: synthetic, batch_size: 4, eval_batch_size: 8, validation_split: 0.25, shuffle: false,\n"
      "       shuffle_seed: 3, drop_last: false,\n"
      "       synthetic: {examples: 64, test_examples: 16, features: 8, classes: 3, center_scale: 2, spread: 1,\n"
      "                   seed: 5}}\n";
  const std::string steps = "training: {steps: 20}\n";
  const std::string csr = "sparsity: {density: 0.5, rules: [{name: fc1.weight, format: csr}]}\n";
  return {
      // Identity, device, every section of the run, sgd, a step schedule, rigl.
      "name: all\nseed: 7\ndevice: cpu\n" + model + data +
          "sparsity:\n"
          "  density: 0.5\n"
          "  distribution: er\n"
          "  overrides: {fc1.weight: 0.25}\n"
          "  dense: [fc2.weight]\n"
          "  rules: [{regex: 'fc.\\.weight', format: csr}]\n"
          "  outputs:\n"
          "    - name: fc1\n"
          "      forward: [{inline: {name: magnitude, sparsity: 0.5}, temporary_format: coo,\n"
          "                 external: {name: keep_all}, format: csr}]\n"
          "      backward: [{inline: {name: magnitude, sparsity: 0.5}, temporary_format: coo,\n"
          "                  external: {name: keep_all}, format: coo}]\n"
          "optimizer: {name: sgd, lr: 0.1, momentum: 0.9, dampening: 0, nesterov: true, weight_decay: 0.0001,\n"
          "            grad_clip: 1}\n"
          "lr_schedule: {name: step, step_size: 5, gamma: 0.5, warmup_steps: 2, warmup_start_factor: 0.1}\n"
          "mask_update: {method: rigl, start_step: 1, end_step: 10, interval: 2, drop_fraction: 0.2,\n"
          "              drop_schedule: linear, prune: magnitude, growth: gradient, allow_regrow_dropped: true}\n"
          "training: {steps: 20, cuda_graph: false, on_nonfinite: skip_step, max_consecutive_skips: 3}\n"
          "evaluation: {every_steps: 5, split: validation, max_batches: 2}\n"
          "checkpoint: {dir: '" +
          (dir / "ckpt").string() +
          "', every_steps: 10, keep_last: 1, allow_changes: [optimizer.lr]}\n"
          "logging: {metrics: '" +
          (dir / "metrics.jsonl").string() +
          "', progress: false, every_steps: 5}\n"
          "precision: {allow_tf32: false, dtype: f32, loss_scale: 128}\n"
          "distributed: {world_size: 2, backend: inproc, timeout_s: 60, bucket_mb: 4, sparse_exchange: dense,\n"
          "              topk_fraction: 0.5}\n",
      // Adam, a cosine schedule, gmp, then dense.
      model + data + steps + csr +
          "optimizer: {name: adam, beta1: 0.8, beta2: 0.99, eps: 0.0001}\n"
          "lr_schedule: {name: cosine, t_max: 10, eta_min: 0}\n"
          "mask_update: {method: gmp, end_step: 10, initial_density: 0.9, frequency: 2, densify_step: 15,\n"
          "              densify_warmup_steps: 3}\n",
      // Adagrad's own keys.
      model + data + steps + "optimizer: {name: adagrad, lr_decay: 0.01, initial_accumulator_value: 0.1, eps: 1e-9}\n",
      // A format declared by its levels, blocked, with its dtypes, named by a rule.
      model + data + steps +
          "sparsity: {formats: {keys_test_levels: {block: [2, 2], index: i64, values: f32,\n"
          "                                       levels: [dense, compressed, dense, dense]}},\n"
          "           rules: [{name: fc1.weight, format: keys_test_levels, density: 0.5}]}\n",
      // sr_ste over an n:m rule, with its sparsifier.
      model + data + steps +
          "sparsity: {rules: [{name: fc1.weight, format: nm, n: 2, m: 4, transposable: false,\n"
          "                    sparsifier: {name: nm, n: 2, m: 4}, density: 0.5}]}\n"
          "mask_update: {method: sr_ste, interval: 2, decay: 0.001}\n",
      // Block rules, outputs by regex, training by epochs.
      model + data + "training: {epochs: 1}\n" +
          "sparsity: {rules: [{name: fc1.weight, format: bsr, block_rows: 2, block_cols: 2, density: 0.5}],\n"
          "           outputs: [{regex: 'fc.', forward: [{format: dense}]}]}\n"
          "mask_update: {method: static}\n",
      // Text, and Fashion-MNIST (whose files the machine may not have).
      "model: {name: char_lm, options: {vocab_size: 256, context: 8}}\n"
      "data: {dataset: text, path: '" +
          corpus + "', seq_len: 4, stride: 2, vocab: bytes, validation_split: 0.25}\n" + steps,
      "model: {name: mlp}\ndata: {dataset: fashion_mnist, flatten: true, normalize: true, mean: 0.3, std: 0.3}\n" +
          steps,
      // The document graph (the Linux documentation tools/setup installs).
      "model: {name: gcn, options: {sizes: '100,8,10'}}\n"
      "data: {dataset: docgraph, docgraph: {suffix: .rst.txt, vocabulary: 100, min_class_documents: 50,\n"
      "                                     train_fraction: 0.5, validation_fraction: 0.25, seed: 3, toctree: "
      "true}}\n" +
          steps,
  };
}

TEST(JobKeys, EveryDeclaredKeyIsReadAndEveryKeyReadIsDeclared) {
  KeyReadLog log;
  for (const std::string& job : jobs_reading_every_key()) {
    const absl::StatusOr<JobConfig> c = parse_job_config(job);
    EXPECT_NE(c.status().code(), absl::StatusCode::kInternal) << c.status().message() << "\n" << job;
  }
  std::set<std::string> declared;
  for (const SchemaKey& k : job_schema())
    if (!k.path.empty()) declared.insert(k.path);
  for (const std::string& read : log.keys())
    EXPECT_TRUE(declared.count(read)) << read << " is read but not declared in train/job_keys.cc";
  for (const std::string& k : declared)
    EXPECT_TRUE(log.keys().count(k)) << k << " is declared in train/job_keys.cc but no reader reads it";
}

// The log notes only while it is open.
TEST(JobKeys, TheLogListensOnlyWhileOpen) {
  const std::string job = "model: {name: mlp}\ndata: {dataset: synthetic}\ntraining: {steps: 1}\n";
  (void)parse_job_config(job);
  KeyReadLog log;
  EXPECT_TRUE(log.keys().empty());
  (void)parse_job_config(job);
  EXPECT_TRUE(log.keys().count("data.batch_size"));
  EXPECT_TRUE(log.keys().count("optimizer.lr"));
}

}  // namespace
}  // namespace coppice
