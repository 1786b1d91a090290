#include "tools/bench/train_step_util.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <random>

#include "optim/growth.h"
#include "sparse/convert.h"
#include "sparse/nm_transposable.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

// The masks' seed (bench dp's since it was written; purpose tells the weights apart).
constexpr uint64_t kMaskSeed = 0xC0991CEull;

std::vector<uint8_t> random_nm_pattern(int64_t rows, int64_t cols, int64_t n, int64_t m, uint64_t seed) {
  COPPICE_CHECK(n >= 1 && n <= m && cols % m == 0, "random_nm_pattern: ", n, ":", m, " does not fit ", cols,
                " columns");
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * cols), 0);
  std::vector<int64_t> slots(static_cast<size_t>(m));
  for (int64_t g = 0; g < rows * cols; g += m) {
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t i = 0; i < n; ++i) {  // the first n of a partial Fisher-Yates shuffle
      std::uniform_int_distribution<int64_t> pick(i, m - 1);
      std::swap(slots[static_cast<size_t>(i)], slots[static_cast<size_t>(pick(rng))]);
      mask[static_cast<size_t>(g + slots[static_cast<size_t>(i)])] = 1;
    }
  }
  return mask;
}

}  // namespace

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t bsr_block_for(int64_t rows, int64_t cols, int64_t wanted) {
  int64_t b = 1;
  while (b * 2 <= wanted && rows % (b * 2) == 0 && cols % (b * 2) == 0) b *= 2;
  return b;
}

Tensor weight_mask(const WeightPattern& pattern, int64_t rows, int64_t cols, uint64_t purpose) {
  if (pattern.format == "csr") {
    return random_mask({rows, cols}, pattern_nnz(rows * cols, pattern.sparsity), kMaskSeed, purpose);
  }
  if (pattern.format == "bsr") {
    const int64_t b = bsr_block_for(rows, cols, pattern.block);
    return mask_tensor(random_block_pattern(rows, cols, b, b, pattern.sparsity, kMaskSeed + purpose), rows, cols,
                       Device::cpu());
  }
  if (pattern.format == "nm" && pattern.n == 2 && pattern.m == 4 && rows % 4 == 0) {
    // Transposable (W and W^T both 2:4), as a job with `transposable: true`
    // trains: the pattern the 2:4 tensor-core path runs dx = dy W on.
    std::mt19937_64 rng(kMaskSeed + purpose);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> w(static_cast<size_t>(rows * cols));
    for (double& v : w) v = u(rng);
    return transposable_nm_mask(from_vector(w, {rows, cols}));
  }
  if (pattern.format == "nm") {
    return mask_tensor(random_nm_pattern(rows, cols, pattern.n, pattern.m, kMaskSeed + purpose), rows, cols,
                       Device::cpu());
  }
  fail("weight_mask: unknown format '", pattern.format, "' (expected csr, bsr, nm)");
}

int64_t sparsify_parameter(Module& model, const std::string& name, const WeightPattern& pattern, uint64_t purpose,
                           MaskCache* cache) {
  const Variable p = model.parameter(name);
  COPPICE_CHECK(p.dim() == 2, "sparsify_parameter: ", name, " is not a matrix");
  const int64_t rows = p.shape()[0], cols = p.shape()[1];
  const std::string key = str_cat(pattern.format, " ", pattern.sparsity, " ", pattern.block, " ", pattern.n, ":",
                                  pattern.m, " [", rows, ", ", cols, "] ", purpose);
  Tensor mask;
  if (cache != nullptr && cache->count(key) != 0) mask = cache->at(key);
  if (!mask.defined()) {
    mask = weight_mask(pattern, rows, cols, purpose).to(p.value().device());
    if (cache != nullptr) (*cache)[key] = mask;
  }
  FormatOptions fo;
  if (pattern.format == "bsr") fo = FormatOptions::block(bsr_block_for(rows, cols, pattern.block));
  if (pattern.format == "nm") fo = FormatOptions::nm(pattern.n, pattern.m);
  const Tensor sparse = sparse_from_mask(p.value(), mask, pattern.format, fo);
  model.set_parameter(name, Variable(sparse, p.requires_grad(), name));
  return sparse_impl(sparse, "sparsify_parameter").nnz();
}

std::vector<Variable> trainable_parameters(const Module& model) {
  std::vector<Variable> out;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::vector<double> time_steps(const std::function<void()>& step, Device device, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) step();
  synchronize(device);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const double t0 = now_ms();
    step();
    synchronize(device);
    samples.push_back(now_ms() - t0);
  }
  return samples;
}

void fill_step_timing(const std::vector<double>& samples_ms, Result* r) {
  r->median_ms = median(samples_ms);
  if (!samples_ms.empty()) {
    r->min_ms = *std::min_element(samples_ms.begin(), samples_ms.end());
    r->max_ms = *std::max_element(samples_ms.begin(), samples_ms.end());
  }
  r->reps = static_cast<int>(samples_ms.size());
  r->inner = 1;
}

double training_state_bytes(const std::vector<Variable>& params, const Optimizer& optimizer) {
  std::map<const void*, int64_t> buffers;
  auto add = [&buffers](const Tensor& t) {
    if (!t.defined()) return;
    auto add_dense = [&buffers](const Tensor& d) {
      if (d.numel() > 0) buffers[d.data_ptr()] = d.numel() * static_cast<int64_t>(dtype_size(d.dtype()));
    };
    if (!t.is_sparse()) return add_dense(t);
    for (const auto& [part, d] : sparse_impl(t, "training_state_bytes").parts()) add_dense(d);
  };
  for (const Variable& p : params) {
    add(p.value());
    add(p.grad());
    if (const ParamState* st = optimizer.state(p)) {
      for (const auto& [name, t] : st->tensors) add(t);
    }
  }
  double total = 0;
  for (const auto& [ptr, bytes] : buffers) total += static_cast<double>(bytes);
  return total;
}

double extra_value(const Result& r, const std::string& key) {
  for (const auto& [k, v] : r.extra) {
    if (k == key) return v;
  }
  return kNaN;
}

}  // namespace coppice::bench
