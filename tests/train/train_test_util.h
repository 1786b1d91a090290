// Small models and components for the train/ tests: an MLP on seeded
// Gaussian blobs, optionally with CSR weights at a given density.
#pragma once

#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "models/zoo.h"
#include "optim/growth.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/generator.h"

namespace coppice::testing_train {

// A tiny YAML job (an MLP 20-16-3 on synthetic blobs, 60 steps on the CPU),
// plus `extra` YAML lines (whole top-level sections).
inline std::string tiny_job(const std::string& extra) {
  return "seed: 3\n"
         "device: cpu\n"
         "model: {name: mlp, options: {sizes: [20, 16, 3]}}\n"
         "data:\n"
         "  dataset: synthetic\n"
         "  batch_size: 16\n"
         "  synthetic: {examples: 320, test_examples: 96, features: 20, classes: 3, center_scale: 1.0, spread: 1.0}\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "training: {steps: 60}\n"
         "logging: {progress: false, every_steps: 10}\n" +
         extra;
}

inline std::shared_ptr<MLP> make_mlp(const std::vector<int64_t>& sizes, uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<MLP>(sizes, LayerOptions{}, gen);
}

// Every weight of dim 2 as CSR with a random mask of `density` (seeded).
inline std::vector<std::string> sparsify_weights(Module& model, double density, uint64_t seed) {
  std::vector<std::string> names;
  uint64_t purpose = 1;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.dim() != 2) continue;
    const int64_t nnz = static_cast<int64_t>(density * static_cast<double>(p.numel()) + 0.5);
    const Tensor mask = random_mask(p.shape(), nnz, seed, purpose++);
    model.set_parameter(name, Variable(sparse_from_mask(p.value(), mask, "csr"), true, name));
    names.push_back(name);
  }
  return names;
}

inline DataLoader blob_loader(int64_t n, int64_t features, int64_t classes, int64_t batch, uint64_t seed,
                              bool shuffle = true, Device device = Device::cpu()) {
  BlobsOptions o;
  o.n = n;
  o.features = features;
  o.classes = classes;
  o.center_scale = 1.0;
  o.spread = 1.0;
  o.seed = seed;
  DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = shuffle;
  lo.seed = seed + 1;
  lo.drop_last = true;
  lo.device = device;
  return DataLoader(make_blobs(o).dataset, lo);
}

// Every parameter's bytes (formats' parts included) for bit-for-bit comparison.
inline std::vector<std::string> parameter_bits(const Module& model) {
  std::vector<std::string> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor& v = p.value();
    std::string s = name + ":" + std::string(v.format()) + ":";
    const std::vector<double> d = to_dense(v).to_vector<double>();
    s.append(reinterpret_cast<const char*>(d.data()), d.size() * sizeof(double));
    out.push_back(s);
  }
  return out;
}

// A fresh, empty directory under the test's temporary directory.
inline std::string temp_dir(const std::string& tag) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base != nullptr ? base : "/tmp") / tag;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The workspace's directory in the test's runfiles (its data files by their paths).
inline std::string runfiles_root() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return (std::filesystem::path(srcdir != nullptr ? srcdir : ".") / (ws != nullptr ? ws : "coppice")).string();
}

// The trainer binary in the test's runfiles (data = ["//tools/trainer"]).
inline std::string trainer_path() { return runfiles_root() + "/tools/trainer/trainer"; }

struct RunResult {
  int code = -1;
  std::string out, err;
};

// Runs `trainer ARGS` (ARGS already quoted for the shell), its output in
// DIR/stdout and DIR/stderr; `env` (NAME=VALUE ..., shell-quoted) is set for
// it; `cwd`, when given, is its working directory (a job's relative paths).
inline RunResult run_trainer(const std::string& args, const std::string& dir, const std::string& env = "",
                             const std::string& cwd = "") {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + (env.empty() ? "" : "env " + env + " ") + "'" +
                          trainer_path() + "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace coppice::testing_train
