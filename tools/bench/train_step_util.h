// What the training-step suites (dp: dp_bench.cc, train: train_bench.cc)
// share: sparse weights from seeded patterns, timing whole steps, and the
// bytes of the training state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "models/module.h"
#include "optim/optimizer.h"
#include "tensor/tensor.h"
#include "tools/bench/bench_util.h"

namespace coppice::bench {

// The pattern a weight is made sparse with.
struct WeightPattern {
  std::string format = "csr";  // "csr" (uniform random), "bsr" (block-uniform random), "nm"
  double sparsity = 0.9;       // csr and bsr: fraction of zeros; nm: ignored (1 - n / m)
  int64_t block = 32;          // bsr: the largest power of two <= block that divides the shape
  int64_t n = 2, m = 4;        // nm: n kept of every m along the last dim (weight_mask says how)
};

// The BSR block used for a [rows, cols] weight: the largest power of two
// <= `wanted` that divides both (LeNet-300-100's [300, 784] gets 4).
int64_t bsr_block_for(int64_t rows, int64_t cols, int64_t wanted);

// A bool CPU mask [rows, cols] of `pattern`, the same for the same `purpose`
// (csr: optim/growth.h's random_mask, as the trainer's initial masks; bsr:
// random_block_pattern; nm: n random slots of every group of m, except 2:4
// with rows of 4, which is transposable, from random weights).
Tensor weight_mask(const WeightPattern& pattern, int64_t rows, int64_t cols, uint64_t purpose);

// Masks already drawn, by pattern, shape and purpose: drawing one for a
// 4096² weight takes seconds on the CPU, and bench train reuses each for
// every numeric mode.
using MaskCache = std::map<std::string, Tensor>;

// Replaces the 2-D parameter `name` of `model` by its values at
// weight_mask(pattern, ..., purpose) in pattern.format (on the parameter's
// device), taking the mask from `cache` when it holds it (and adding it
// there otherwise; null: no cache); returns the stored entries.
int64_t sparsify_parameter(Module& model, const std::string& name, const WeightPattern& pattern, uint64_t purpose,
                           MaskCache* cache = nullptr);

// The parameters that require a gradient, in the model's order.
std::vector<Variable> trainable_parameters(const Module& model);

// A steady clock in milliseconds.
double now_ms();

// Runs `step` `warmup` times, then `steps` times, each timed on its own with
// `device` synchronized after it (no inner repetition: a step is long, and a
// data-parallel one must issue the same collectives on every rank).
// Returns the per-step milliseconds.
std::vector<double> time_steps(const std::function<void()>& step, Device device, int warmup, int steps);
// Median, min, max and reps (inner = 1) of per-step samples into `r`.
void fill_step_timing(const std::vector<double>& samples_ms, Result* r);

// Bytes of the training state: the parameters (a sparse one with its index
// arrays), their gradients and the optimizer's state, each distinct buffer
// counted once (a compact gradient shares its parameter's index arrays).
double training_state_bytes(const std::vector<Variable>& params, const Optimizer& optimizer);

// A numeric extra field of `r` (NaN when absent).
double extra_value(const Result& r, const std::string& key);

}  // namespace coppice::bench
