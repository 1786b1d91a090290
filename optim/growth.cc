// Growth policies and their registry (growth.h).
#include "optim/growth.h"

#include <map>
#include <mutex>
#include <utility>

#include "optim/finite_check.h"
#include "optim/mask_change.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/philox.h"

namespace coppice {

namespace {

std::vector<int64_t> chosen_positions(const Tensor& mask, const std::vector<int64_t>& candidates) {
  const std::vector<int> chosen = mask.to_vector<int>();
  std::vector<int64_t> out;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (chosen[i]) out.push_back(candidates[i]);
  }
  return out;
}

// Random growth's key of a flat position: 53 bits of the Philox block at
// that position, from the generator keyed by (seed, purpose, step, rank).
class PositionKeys {
 public:
  PositionKeys(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t rank) {
    Generator gen = Generator::keyed(seed, purpose, step, rank);
    offset_ = gen.advance();
    seed_ = gen.seed();
  }
  double operator()(int64_t position) const {
    const philox::U32x4 v = philox::block(seed_, offset_, static_cast<uint64_t>(position));
    const uint64_t bits = (static_cast<uint64_t>(v.x >> 5) << 26) | (v.y >> 6);  // 53 random bits
    return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
  }

 private:
  uint64_t seed_ = 0, offset_ = 0;
};

void check_k(const std::vector<int64_t>& candidates, int64_t k, const std::string& op) {
  COPPICE_CHECK(k >= 0 && k <= static_cast<int64_t>(candidates.size()), op, ": cannot grow ", k, " of ",
                candidates.size(), " candidate positions");
}

class RandomGrowth : public GrowthPolicy {
 public:
  std::string name() const override { return "random"; }
  std::vector<int64_t> grow(const GrowthInput& in) const override {
    return random_k_among(*in.candidates, in.k, in.seed, in.purpose, static_cast<uint64_t>(in.step), in.rank);
  }
  Tensor group_scores(const GrowthInput& in) const override {
    return random_keys(in.param.shape(), in.seed, in.purpose, static_cast<uint64_t>(in.step), in.rank);
  }
};

class GradientGrowth : public GrowthPolicy {
 public:
  std::string name() const override { return "gradient"; }
  bool needs_dense_gradient() const override { return true; }
  std::vector<int64_t> grow(const GrowthInput& in) const override {
    return top_k_among(in.growth_scores(name()), *in.candidates, in.k, "growth 'gradient' (layer " + in.layer + ")");
  }
  Tensor group_scores(const GrowthInput& in) const override { return abs(to_dense(in.growth_scores(name()))); }
};

class MomentumGrowth : public GrowthPolicy {
 public:
  std::string name() const override { return "momentum"; }
  bool needs_momentum() const override { return true; }
  bool redistributes_by_momentum() const override { return true; }
  std::vector<int64_t> grow(const GrowthInput& in) const override {
    COPPICE_CHECK(in.momentum.defined(), "growth 'momentum' (layer ", in.layer,
                  "): needs the dense momentum on update steps");
    return top_k_among(in.momentum, *in.candidates, in.k, "growth 'momentum' (layer " + in.layer + ")");
  }
  Tensor group_scores(const GrowthInput& in) const override {
    COPPICE_CHECK(in.momentum.defined(), "growth 'momentum' (layer ", in.layer,
                  "): needs the dense momentum on update steps");
    return abs(to_dense(in.momentum));
  }
};

struct Registry {
  std::mutex mu;
  std::map<std::string, GrowthPolicyFactory> factories;
  Registry() {
    factories["random"] = [] { return std::make_shared<RandomGrowth>(); };
    factories["gradient"] = [] { return std::make_shared<GradientGrowth>(); };
    factories["momentum"] = [] { return std::make_shared<MomentumGrowth>(); };
  }
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

const Tensor& GrowthInput::growth_scores(std::string_view policy) const {
  return expect_growth_scores(growth_signal, param.shape(), block_rows, block_cols,
                              str_cat("growth '", policy, "' (layer ", layer, ")"));
}

void register_growth_policy(const std::string& name, GrowthPolicyFactory factory) {
  COPPICE_CHECK(!name.empty(), "register_growth_policy: the name is empty");
  COPPICE_CHECK(factory != nullptr, "register_growth_policy: the factory for '", name, "' is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  COPPICE_CHECK(r.factories.count(name) == 0, "register_growth_policy: '", name, "' is already registered");
  r.factories[name] = std::move(factory);
}

std::vector<std::string> registered_growth_policies() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

bool is_growth_policy_registered(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.count(name) > 0;
}

GrowthPolicyPtr make_growth_policy(const std::string& name) {
  GrowthPolicyFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  COPPICE_CHECK(factory != nullptr, "growth policy: unknown name '", name,
                "'; known: ", str_join(registered_growth_policies(), ", "));
  GrowthPolicyPtr p = factory();
  COPPICE_CHECK(p != nullptr, "growth policy '", name, "': the factory returned null");
  return p;
}

std::vector<int64_t> top_k_among(const Tensor& scores, const std::vector<int64_t>& candidates, int64_t k,
                                 const std::string& op) {
  check_k(candidates, k, op);
  if (k == 0) return {};
  if (k == static_cast<int64_t>(candidates.size())) return candidates;
  COPPICE_CHECK(is_floating(scores.dtype()), op, ": scores must be floating, got ", dtype_name(scores.dtype()));
  const Tensor flat = to_dense(scores).contiguous().reshape({-1});
  for (int64_t p : candidates) {
    COPPICE_CHECK(p >= 0 && p < flat.numel(), op, ": candidate ", p, " is outside the scores' ", flat.numel(),
                  " elements");
  }
  const Tensor compact = index_select(flat, 0, from_vector(candidates).to(flat.device()));
  check_finite_scores(compact, op, "the growth scores");
  return chosen_positions(sparsify::topk_mask(compact, k, true, op), candidates);
}

std::vector<int64_t> random_k_among(const std::vector<int64_t>& candidates, int64_t k, uint64_t seed, uint64_t purpose,
                                    uint64_t step, uint64_t rank) {
  check_k(candidates, k, "growth 'random'");
  if (k == 0) return {};
  if (k == static_cast<int64_t>(candidates.size())) return candidates;
  const PositionKeys key(seed, purpose, step, rank);
  std::vector<double> keys(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) keys[i] = key(candidates[i]);
  return chosen_positions(sparsify::topk_mask(from_vector(keys), k, false, "growth 'random'"), candidates);
}

Tensor random_keys(const Shape& shape, uint64_t seed, uint64_t purpose, uint64_t step, uint64_t rank) {
  const PositionKeys key(seed, purpose, step, rank);
  Tensor out = Tensor::empty(shape, TensorOptions(DType::kF64, Device::cpu()));
  double* k = out.data<double>();
  for (int64_t p = 0; p < out.numel(); ++p) k[p] = key(p);
  return out;
}

Tensor random_mask(const Shape& shape, int64_t nnz, uint64_t seed, uint64_t purpose) {
  const int64_t numel = shape_numel(shape);
  COPPICE_CHECK(nnz >= 0 && nnz <= numel, "random_mask: cannot choose ", nnz, " of ", numel, " positions of ",
                shape_to_string(shape));
  std::vector<int64_t> all(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) all[static_cast<size_t>(i)] = i;
  return mask_from_positions(shape, random_k_among(all, nnz, seed, purpose, 0, 0));
}

}  // namespace coppice
