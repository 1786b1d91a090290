// SR-STE (optim/sr_ste.h): the masks are nm_compress's selection (or the
// transposable one, n:m along rows and columns); the gradient the optimizer
// sees is the dense product plus decay * (1 - mask) * W, exactly, whatever
// the loss scale, with the optimizer's weight decay on top; the masks follow
// the weights every `interval` steps and not between; the masks are the
// checkpointed state.
#include "optim/sr_ste.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "optim/sgd.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

// The weights as leaf Variables, their gradients added to as the trainer's store does.
class VariableStore : public ParameterStore {
 public:
  Tensor value(const std::string& name) const override { return params.at(name).value(); }
  Tensor unscaled_gradient(const std::string& name, double scale) const override {
    const Tensor& g = params.at(name).grad();
    return g.defined() ? mul(g, 1.0 / scale) : Tensor();
  }
  Tensor dense_momentum(const std::string& name) const override { return zeros_like(params.at(name).value()); }
  void add_to_gradient(const std::string& name, const Tensor& delta) override {
    const Variable& w = params.at(name);
    w.set_grad(w.grad().defined() ? add(w.grad(), delta) : delta);
  }
  void replace(const std::string&, const Tensor&, const Tensor&) override {
    ADD_FAILURE() << "sr_ste rebinds no parameter";
  }

  std::map<std::string, Variable> params;
};

// Integers in [-k, k] from a fixed stream, as f64 [rows, cols].
std::vector<double> ints(int64_t count, int64_t k, uint64_t seed) {
  std::vector<double> v;
  uint64_t s = seed * 2654435761u + 7;
  for (int64_t i = 0; i < count; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v.push_back(static_cast<double>(static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(2 * k + 1)) - k));
  }
  return v;
}

// A weight with distinct magnitudes and fractional values.
std::vector<double> weight_values(int64_t count, uint64_t seed) {
  std::vector<double> w;
  const std::vector<double> r = ints(count, 1000, seed);
  for (int64_t i = 0; i < count; ++i) w.push_back(r[i] / 997.0 + (r[i] >= 0 ? 1e-6 : -1e-6) * static_cast<double>(i));
  return w;
}

std::vector<int> mask_of(const SrSte& sr, const std::string& name) {
  return sr.projection(name).mask().to_vector<int>();
}

// Kept per group of m along rows (stride 1) or columns (stride cols) of a [rows, cols] mask.
void expect_n_per_group(const std::vector<int>& mask, int64_t rows, int64_t cols, int64_t n, int64_t m, bool columns) {
  const int64_t lines = columns ? cols : rows, len = columns ? rows : cols;
  for (int64_t l = 0; l < lines; ++l)
    for (int64_t g = 0; g < len / m; ++g) {
      int64_t kept = 0;
      for (int64_t j = g * m; j < g * m + m; ++j) kept += mask[columns ? j * cols + l : l * cols + j];
      EXPECT_EQ(kept, n) << (columns ? "column " : "row ") << l << " group " << g;
    }
}

TEST(SrSte, MaskIsTheNmSelection) {
  // Ties go to the lower index, as nm_compress.
  const std::vector<double> v = {1, -1, 1, 0.5, 5, 0, 3, -3, 0, 0, 0, 0, 2, 1, -4, 0.1};
  const Tensor w = from_vector<double>(v, {2, 8});
  SrSte sr(SrSteConfig{});
  sr.add_layer("w", w, 2, 4);
  EXPECT_EQ(nm_impl(sr.projection("w").pattern(), "test").indices().to_vector<int>(),
            nm_impl(nm_compress(w, 2, 4), "test").indices().to_vector<int>());
  EXPECT_EQ(mask_of(sr, "w"), (std::vector<int>{1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0}));
  // 3:8 too.
  SrSte sr38(SrSteConfig{});
  sr38.add_layer("w", w, 3, 8);
  expect_n_per_group(mask_of(sr38, "w"), 2, 8, 3, 8, false);
}

TEST(SrSte, TransposableMaskIsNmAlongRowsAndColumns) {
  const Tensor w = from_vector<double>(weight_values(8 * 12, 1), {8, 12});
  SrSte sr(SrSteConfig{});
  sr.add_layer("w", w, 2, 4, /*transposable=*/true);
  const std::vector<int> mask = mask_of(sr, "w");
  EXPECT_EQ(mask, transposable_nm_mask(w, 2, 4).to_vector<int>());
  expect_n_per_group(mask, 8, 12, 2, 4, /*columns=*/false);  // W is 2:4
  expect_n_per_group(mask, 8, 12, 2, 4, /*columns=*/true);   // so is W^T
  // W^T's projection is an n:m tensor as well.
  const Tensor wt_proj = nm_compress(w.t().contiguous(), sr.projection("w").mask().t().contiguous(), 2, 4);
  EXPECT_EQ(wt_proj.layout(), Layout::kNm);
  EXPECT_ERROR_NAMING(
      SrSte(SrSteConfig{}).add_layer("v", from_vector<double>(weight_values(6 * 8, 2), {6, 8}), 2, 4, true),
      "a transposable mask needs");
}

// A linear layer in f64 on integer inputs and gradients: W's gradient, as
// the optimizer sees it, is dy^T x at every position plus decay * (1 - mask) * W.
struct LinearCase {
  int64_t n = 6, in = 8, out = 4;
  std::vector<double> x = ints(6 * 8, 3, 11), dy = ints(6 * 4, 2, 12), w = weight_values(4 * 8, 13);

  // dy^T x + lambda (1 - mask) w, by loops.
  std::vector<double> expected_grad(const std::vector<int>& mask, double lambda) const {
    std::vector<double> g(static_cast<size_t>(out * in), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < out; ++i)
        for (int64_t j = 0; j < in; ++j) g[i * in + j] += dy[r * out + i] * x[r * in + j];
    for (size_t k = 0; k < g.size(); ++k) g[k] = g[k] + (mask[k] ? 0.0 : lambda * w[k]);
    return g;
  }
};

// One forward and backward of the case through the projection, then the
// schedule's term; returns the output.
Tensor run_step(const LinearCase& c, SrSte& sr, VariableStore& store, MaskSchedule& schedule, double scale) {
  const Variable& w = store.params.at("w");
  const Variable y = linear(Variable(from_vector<double>(c.x, {c.n, c.in})), sr.projection("w").project(w), Variable());
  y.backward(mul(from_vector<double>(c.dy, {c.n, c.out}), scale));
  schedule.before_optimizer_step(scale);
  return y.value();
}

TEST(SrSte, GradientIsTheDenseProductPlusTheSparseRefinedTerm) {
  const LinearCase c;
  for (double lambda : {2e-4, 0.0, 0.5}) {
    SrSteConfig config;
    config.decay = lambda;
    SrSte sr(config);
    auto store = std::make_shared<VariableStore>();
    store->params["w"] = Variable(from_vector<double>(c.w, {c.out, c.in}), true, "w");
    sr.add_layer("w", store->params["w"].value(), 2, 4);
    const std::unique_ptr<MaskSchedule> schedule = make_sr_ste_schedule(sr, store);
    const Tensor y = run_step(c, sr, *store, *schedule, 1.0);
    // Forward is linear with the projected weight.
    const Tensor projected = nm_decompress(nm_compress(store->params["w"].value(), 2, 4));
    EXPECT_TRUE(allclose(y, linear(from_vector<double>(c.x, {c.n, c.in}), projected, Tensor()), 0.0, 1e-12));
    const Tensor& g = store->params["w"].grad();
    ASSERT_TRUE(g.defined() && g.is_dense());
    EXPECT_EQ(g.to_vector<double>(), c.expected_grad(mask_of(sr, "w"), lambda)) << "decay " << lambda;
  }
}

// Backward under a loss scale S: the term is scaled with the gradient, so
// the optimizer, dividing S out, takes the same step as without scaling.
TEST(SrSte, TheTermCarriesTheLossScale) {
  const LinearCase c;
  std::vector<std::vector<double>> after;
  for (double scale : {1.0, 1024.0}) {
    SrSte sr(SrSteConfig{});
    auto store = std::make_shared<VariableStore>();
    store->params["w"] = Variable(from_vector<double>(c.w, {c.out, c.in}), true, "w");
    sr.add_layer("w", store->params["w"].value(), 2, 4);
    const std::unique_ptr<MaskSchedule> schedule = make_sr_ste_schedule(sr, store);
    run_step(c, sr, *store, *schedule, scale);
    const std::vector<double> expected = c.expected_grad(mask_of(sr, "w"), 2e-4);
    const std::vector<double> g = store->params["w"].grad().to_vector<double>();
    for (size_t k = 0; k < g.size(); ++k) EXPECT_EQ(g[k], expected[k] * scale) << k;
    SgdOptions o;
    o.lr = 0.1;
    Sgd sgd({store->params["w"]}, o);
    sgd.step(scale);
    after.push_back(store->params["w"].value().to_vector<double>());
  }
  EXPECT_EQ(after[0], after[1]);
}

// The optimizer's own weight decay applies on top of the SR-STE gradient:
// w - lr * (dy^T x + lambda (1 - mask) w + wd * w).
TEST(SrSte, OptimizerWeightDecayAppliesOnTop) {
  const LinearCase c;
  SrSte sr(SrSteConfig{});
  auto store = std::make_shared<VariableStore>();
  store->params["w"] = Variable(from_vector<double>(c.w, {c.out, c.in}), true, "w");
  sr.add_layer("w", store->params["w"].value(), 2, 4);
  const std::unique_ptr<MaskSchedule> schedule = make_sr_ste_schedule(sr, store);
  run_step(c, sr, *store, *schedule, 1.0);
  const std::vector<double> g = c.expected_grad(mask_of(sr, "w"), 2e-4);
  SgdOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  Sgd sgd({store->params["w"]}, o);
  sgd.step();
  const std::vector<double> w = store->params["w"].value().to_vector<double>();
  for (size_t k = 0; k < w.size(); ++k) EXPECT_DOUBLE_EQ(w[k], c.w[k] - 0.1 * (g[k] + 0.01 * c.w[k])) << k;
}

// The masks follow the weights after the optimizer step of every
// interval-th step, and between they stay, the values following the weights.
TEST(SrSte, MasksChangeEveryIntervalStepsAndNotBetween) {
  SrSteConfig config;
  config.interval = 3;
  SrSte sr(config);
  auto store = std::make_shared<VariableStore>();
  store->params["w"] = Variable(from_vector<double>({4, 3, 2, 1, 1, 2, 3, 4}, {2, 4}), true, "w");
  sr.add_layer("w", store->params["w"].value(), 2, 4);
  const std::unique_ptr<MaskSchedule> schedule = make_sr_ste_schedule(sr, store);
  EXPECT_FALSE(schedule->needs_dense_gradient(2));
  for (int64_t t = 0; t < 9; ++t) EXPECT_EQ(schedule->changes_masks(t, false), t % 3 == 2) << t;
  EXPECT_TRUE(schedule->changes_masks(5, /*optimizer_step_skipped=*/true));

  const std::vector<int> first = {1, 1, 0, 0, 0, 0, 1, 1};
  ASSERT_EQ(mask_of(sr, "w"), first);
  const uint64_t version = pattern_version(sr.projection("w").pattern());
  // The optimizer reverses row 0's order: the mask stays until the update...
  Tensor w = store->params["w"].value();
  w.copy_(from_vector<double>({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4}));
  EXPECT_EQ(mask_of(sr, "w"), first);
  // ...while the projection reads the new values at the old positions.
  EXPECT_EQ(to_dense(sr.projection("w").project(store->params["w"]).value()).to_vector<double>(),
            (std::vector<double>{1, 2, 0, 0, 0, 0, 3, 4}));
  // The update recomputes it from the weights: two positions of row 0 left, two entered.
  const MaskUpdateStats stats = schedule->update(2, {});
  EXPECT_EQ(stats.step, 2);
  EXPECT_EQ(stats.dropped.at("w"), 2);
  EXPECT_EQ(stats.grown.at("w"), 2);
  EXPECT_EQ(mask_of(sr, "w"), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_NE(pattern_version(sr.projection("w").pattern()), version);
  // Unchanged weights: an unchanged mask keeps its pattern version (kernels' caches stay).
  const uint64_t kept = pattern_version(sr.projection("w").pattern());
  EXPECT_EQ(schedule->update(5, {}).dropped.at("w"), 0);
  EXPECT_EQ(pattern_version(sr.projection("w").pattern()), kept);
}

// The view a module takes keeps the layer's projection, and sees its updates.
TEST(SrSte, TheViewIsTheLayersProjection) {
  SrSte sr(SrSteConfig{});
  const Variable w(from_vector<double>({4, 3, 2, 1}, {1, 4}), true, "w");
  sr.add_layer("w", w.value(), 2, 4);
  const auto view = sr.view("w");
  EXPECT_EQ(to_dense(view(w).value()).to_vector<double>(), (std::vector<double>{4, 3, 0, 0}));
  Tensor values = w.value();
  values.copy_(from_vector<double>({1, 2, 3, 4}, {1, 4}));
  sr.projection("w").refresh(w.value());
  EXPECT_EQ(to_dense(view(w).value()).to_vector<double>(), (std::vector<double>{0, 0, 3, 4}));
  EXPECT_ERROR_NAMING(sr.view("v"), "no layer 'v'");
}

TEST(SrSte, MasksAreTheStateAndAreChecked) {
  const Tensor w = from_vector<double>(weight_values(4 * 8, 21), {4, 8});
  SrSte sr(SrSteConfig{});
  sr.add_layer("w", w, 2, 4);
  const std::map<std::string, Tensor> state = sr.state_tensors();
  ASSERT_EQ(state.size(), 1u);
  ASSERT_EQ(state.count("w.mask"), 1u);
  // Into a layer that started from other weights.
  SrSte other(SrSteConfig{});
  other.add_layer("w", from_vector<double>(weight_values(4 * 8, 22), {4, 8}), 2, 4);
  ASSERT_NE(mask_of(other, "w"), mask_of(sr, "w"));
  other.load_state_tensors(state);
  EXPECT_EQ(mask_of(other, "w"), mask_of(sr, "w"));
  EXPECT_EQ(to_dense(other.projection("w").project(Variable(w)).value()).to_vector<double>(),
            to_dense(sr.projection("w").project(Variable(w)).value()).to_vector<double>());

  std::vector<int> three = mask_of(sr, "w");
  three[0] = three[1] = three[2] = 1;  // group 0 of row 0 keeps 3
  three[3] = 0;
  std::vector<uint8_t> bytes(three.begin(), three.end());
  Tensor bad = Tensor::empty({4, 8}, TensorOptions(DType::kBool));
  for (size_t i = 0; i < bytes.size(); ++i) bad.data<bool>()[i] = bytes[i] != 0;
  EXPECT_ERROR_NAMING(other.load_state_tensors({{"w.mask", bad}}), "group 0 of row 0 keeps 3 of 4, expected 2");
  EXPECT_ERROR_NAMING(other.load_state_tensors({}), "missing 'w.mask'");
  EXPECT_ERROR_NAMING(other.load_state_tensors({{"w.mask", state.at("w.mask")}, {"v.mask", state.at("w.mask")}}),
                      "entry 'v.mask' belongs to no layer");
  EXPECT_ERROR_NAMING(other.load_state_tensors({{"w.mask", ones({4, 8}, TensorOptions(DType::kF32))}}),
                      "must be a bool tensor of shape [4, 8]");
  EXPECT_EQ(mask_of(other, "w"), mask_of(sr, "w"));  // a refused state changed nothing
}

TEST(SrSte, ConfigIsChecked) {
  SrSteConfig c;
  c.interval = 0;
  EXPECT_ERROR_NAMING(SrSte{c}, "interval must be >= 1, got 0");
  c = SrSteConfig{};
  c.decay = -1e-4;
  EXPECT_ERROR_NAMING(SrSte{c}, "decay must be finite and >= 0");
  c.decay = std::numeric_limits<double>::quiet_NaN();
  EXPECT_ERROR_NAMING(SrSte{c}, "decay must be finite and >= 0");
  SrSte sr(SrSteConfig{});
  EXPECT_ERROR_NAMING(sr.add_layer("w", zeros({4, 6}, TensorOptions(DType::kF32)), 2, 4), "does not divide");
  sr.add_layer("w", zeros({4, 8}, TensorOptions(DType::kF32)), 2, 4);
  EXPECT_ERROR_NAMING(sr.add_layer("w", zeros({4, 8}, TensorOptions(DType::kF32)), 2, 4), "added twice");
}

}  // namespace
}  // namespace coppice
