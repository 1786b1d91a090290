// Sparse to dense (optim/densify.h): in every built-in format the stored
// values land where they were, bit for bit, each with the slot it came
// from and zeros elsewhere; through a ParameterStore the optimizer's state
// follows (Adam's moments and a bf16 weight's f32 master weights carried
// for the kept entries, zero for the others, the step count kept) and the
// next step trains every entry; a dense parameter is refused.
#include "optim/densify.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/adam.h"
#include "optim/mask_change.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/nm.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

using testing_mask::random_dense;
using testing_mask::throws_with;

// The bits of a floating tensor's elements (widened to f32: exact for bf16).
std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = to_dense(t).to(DType::kF32).contiguous().to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// An 8 x 16 weight with zeros to leave out: every third entry and the 4x4
// block at block row 1, block column 2.
Tensor weight_with_holes(uint64_t seed, DType dtype = DType::kF32) {
  std::vector<float> w = random_dense({8, 16}, seed).to_vector<float>();
  for (int64_t q = 0; q < 8 * 16; ++q) {
    const int64_t r = q / 16, c = q % 16;
    if (q % 3 == 0 || (r / 4 == 1 && c / 4 == 2)) w[static_cast<size_t>(q)] = 0.0f;
  }
  return from_vector(w, {8, 16}).to(dtype);
}

Tensor in_format(const Tensor& dense, const std::string& format) {
  if (format == "nm") return nm_compress(dense, 2, 4);
  const bool blocks = format == "bsr" || format == "blocked_ell";
  return to_format(dense, format, blocks ? FormatOptions::block(4, 4) : FormatOptions());
}

TEST(Densify, EveryFormatKeepsItsValuesWhereTheyWere) {
  const Tensor dense = weight_with_holes(5);
  for (const std::string& format : builtin_sparse_format_names()) {
    SCOPED_TRACE(format);
    const Tensor p = in_format(dense, format);
    const Densified d = densify(p);
    ASSERT_TRUE(d.param.is_dense());
    EXPECT_EQ(d.param.shape(), p.shape());
    EXPECT_EQ(d.param.dtype(), p.dtype());
    EXPECT_EQ(bits(d.param), bits(p));
    ASSERT_EQ(d.keep_from.dtype(), DType::kI64);
    const std::vector<int64_t> keep = d.keep_from.to_vector<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(keep.size()), p.numel());
    // Each stored entry names its own slot, each once; the others -1 and zero.
    const std::vector<uint32_t> stored = bits(values(p).reshape({-1}));
    const std::vector<uint32_t> now = bits(d.param);
    std::set<int64_t> slots;
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i] < 0) {
        EXPECT_EQ(now[i], 0u) << "position " << i;
        continue;
      }
      EXPECT_TRUE(slots.insert(keep[i]).second) << "slot " << keep[i] << " twice";
      EXPECT_EQ(stored[static_cast<size_t>(keep[i])], now[i]) << "position " << i;
    }
    EXPECT_EQ(static_cast<int64_t>(slots.size()), nnz(p));
    if (format != "nm") {  // pattern_view walks the formats whose patterns mask updates change
      const PatternView view = pattern_view(p, "test");
      for (size_t i = 0; i < view.positions.size(); ++i)
        EXPECT_EQ(keep[static_cast<size_t>(view.positions[i])], view.slots[i]) << "position " << view.positions[i];
    }
  }
}

// The parameters of one optimizer by name, rebound as the trainer's store does.
class OptimizerStore : public ParameterStore {
 public:
  explicit OptimizerStore(Optimizer& optimizer) : optimizer_(optimizer) {}
  Tensor value(const std::string& name) const override { return params.at(name).value(); }
  Tensor unscaled_gradient(const std::string&, double) const override { return Tensor(); }
  Tensor dense_momentum(const std::string&) const override { return Tensor(); }
  void add_to_gradient(const std::string&, const Tensor&) override {}
  void replace(const std::string& name, const Tensor& new_param, const Tensor& keep_from) override {
    params[name] = optimizer_.replace_value(params.at(name), new_param, keep_from);
  }
  std::map<std::string, Variable> params;

 private:
  Optimizer& optimizer_;
};

TEST(Densify, OptimizerStateFollowsAndTheNextStepTrainsEveryEntry) {
  // A bf16 BSR weight (f32 master weights) and a dense bias, both with Adam.
  const Variable w(in_format(weight_with_holes(9, DType::kBF16), "bsr"), true, "w");
  const Variable b(zeros({16}, TensorOptions(DType::kF32)), true, "b");
  AdamW adam({w, b}, AdamWOptions{});
  for (uint64_t step = 0; step < 3; ++step) {
    w.set_grad(with_values(
        w.value(),
        optim_test::random_tensor({nnz(w.value())}, 20 + step).reshape(values(w.value()).shape()).to(DType::kBF16)));
    b.set_grad(optim_test::random_tensor({16}, 30 + step));
    adam.step();
  }
  const ParamState before = *adam.state(w);
  ASSERT_EQ(before.tensors.count(kMasterWeightsState), 1u);

  OptimizerStore store(adam);
  store.params = {{"w", w}, {"b", b}};
  const std::map<std::string, int64_t> gained = densify_parameters(store, {"w", "b"});
  EXPECT_EQ(gained, (std::map<std::string, int64_t>{{"w", 8 * 16 - nnz(w.value())}}));  // b was dense
  EXPECT_TRUE(store.params.at("b").is_same(b));
  const Variable& dense = store.params.at("w");
  ASSERT_TRUE(dense.value().is_dense());
  EXPECT_EQ(dense.name(), "w");
  EXPECT_TRUE(dense.requires_grad());
  EXPECT_EQ(dense.dtype(), DType::kBF16);
  EXPECT_EQ(bits(dense.value()), bits(w.value()));

  const ParamState* after = adam.state(dense);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->step, 3);
  ASSERT_EQ(after->tensors.size(), before.tensors.size());
  for (const auto& [name, t] : before.tensors) {
    SCOPED_TRACE(name);
    const Tensor& now = after->tensors.at(name);
    EXPECT_EQ(now.shape(), (Shape{8, 16}));
    EXPECT_EQ(now.dtype(), DType::kF32);
    // The kept entries' state where they were, zeros elsewhere (a new
    // entry's master weight starts at its value, zero).
    EXPECT_EQ(bits(now), bits(to_dense(with_values(w.value(), t))));
  }

  // The next step trains every entry, the unstored ones included.
  dense.set_grad(full({8, 16}, 0.5, TensorOptions(DType::kBF16)));
  adam.step();
  const std::vector<float> stepped = dense.value().to(DType::kF32).to_vector<float>();
  const std::vector<int64_t> keep = densify(w.value()).keep_from.to_vector<int64_t>();
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i] < 0) { EXPECT_NE(stepped[i], 0.0f) << "position " << i << " did not train"; }
}

TEST(Densify, RefusesADenseParameter) {
  EXPECT_TRUE(throws_with(
      [] {
        densify(random_dense({4, 4}, 1), "densify (parameter 'fc1.weight')");
      },
      {"densify (parameter 'fc1.weight')", "dense already"}));
  EXPECT_TRUE(throws_with([] { densify(Tensor()); }, {"densify", "undefined"}));
}

}  // namespace
}  // namespace coppice
