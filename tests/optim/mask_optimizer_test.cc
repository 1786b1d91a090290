// The mask updater wired to an optimizer as the trainer wires them: RigL
// updates on a CSR weight trained by AdamW, the StateRemapFn forwarding
// keep_from to Optimizer::replace_value. Survivors keep their weights and
// Adam moments bit for bit, grown entries start at zero, training goes on
// with the new pattern. (Depends on //optim:optimizers; the updater's own
// suites do not.)
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "gtest/gtest.h"
#include "optim/adam.h"
#include "optim/mask_updater.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/optim/mask_test_util.h"

namespace coppice {
namespace {

using testing_mask::positions;
using testing_mask::random_dense;
using testing_mask::random_param;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(MaskOptimizer, RigLWithAdamWRemapsStateThroughTheHook) {
  Variable w(random_param({16, 16}, 64, 1, "csr"), true, "fc.weight");
  AdamW opt({w}, AdamWOptions{});
  MaskUpdaterConfig c;
  c.start_step = 5;
  c.end_step = 50;
  c.interval = 5;
  c.drop_fraction = 0.3;
  c.growth = "gradient";
  MaskUpdater u(c);
  u.add_layer("fc.weight", w.value());
  int hooks = 0;
  u.set_state_remap([&](const std::string& name, const Tensor& new_param, const Tensor& keep_from) {
    EXPECT_EQ(name, "fc.weight");
    w = opt.replace_value(w, new_param, keep_from);
    ++hooks;
  });
  int updates = 0;
  for (int64_t step = 0; step < 60; ++step) {
    // The full gradient exists only in this test; training sees its stored part.
    const Tensor dense_grad = random_dense({16, 16}, 700 + step);
    const Tensor stored = index_select(dense_grad.reshape({-1}), 0, from_vector(positions(w.value())));
    w.set_grad(with_values(w.value(), stored));
    opt.step();
    if (!u.needs_dense_gradient(step)) {
      EXPECT_FALSE(u.is_update_step(step));
      continue;
    }
    const Tensor old_value = w.value();
    const ParamState before = *opt.state(w);
    const MaskUpdateResult r =
        u.update(step, {{"fc.weight", {w.value(), GrowthSignal::dense_gradient(dense_grad), Tensor()}}});
    const LayerUpdate& l = r.layers[0];
    if (!l.changed) continue;
    ++updates;
    EXPECT_TRUE(w.value().is_same(l.param));
    EXPECT_EQ(nnz(w.value()), 64);
    const ParamState* after = opt.state(w);
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(after->pattern_version, pattern_version(w.value()));
    EXPECT_EQ(after->step, before.step);
    const std::vector<int64_t> keep = l.keep_from.to_vector<int64_t>();
    const std::vector<float> old_w = values(old_value).to_vector<float>();
    const std::vector<float> new_w = values(w.value()).to_vector<float>();
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      const std::vector<float> old_s = before.tensors.at(name).to_vector<float>();
      const std::vector<float> new_s = after->tensors.at(name).to_vector<float>();
      ASSERT_EQ(new_s.size(), keep.size());
      for (size_t j = 0; j < keep.size(); ++j) {
        const float expect_s = keep[j] < 0 ? 0.0f : old_s[static_cast<size_t>(keep[j])];
        const float expect_w = keep[j] < 0 ? 0.0f : old_w[static_cast<size_t>(keep[j])];
        EXPECT_TRUE(same_bits(new_s[j], expect_s)) << name << " slot " << j << " step " << step;
        EXPECT_TRUE(same_bits(new_w[j], expect_w)) << "weight slot " << j << " step " << step;
      }
    }
  }
  EXPECT_EQ(updates, 9);
  EXPECT_EQ(hooks, updates);
  EXPECT_GT(u.itop_rate("fc.weight"), 0.25);
}

}  // namespace
}  // namespace coppice
