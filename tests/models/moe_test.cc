// The mixture-of-experts layer (models/moe.h): its grouped block-sparse path
// against Scorch's einsum formulation (values and every gradient), float64
// gradchecks of both, the experts a token did not pick untouched, empty
// experts, the load-balancing loss and its gradient, errors.
#include "models/moe.h"

#include <gtest/gtest.h>

#include <vector>

#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tests/models/test_util.h"

namespace coppice {
namespace {

using testing::gradcheck_module;

MoEOptions small(int64_t top_k) {
  MoEOptions o;
  o.dim = 6;
  o.hidden = 8;
  o.experts = 4;
  o.top_k = top_k;
  o.block = 4;
  return o;
}

LayerOptions f64() { return {DType::kF64, Device::cpu()}; }

Tensor input(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, DType::kF64, gen);
}

// Gradients of <layer(x), g> for x and every parameter.
std::vector<Tensor> gradients(MoE& m, const Tensor& x0, const Tensor& g, bool einsum_form) {
  m.zero_grad();
  Variable x(x0, true);
  Variable y = einsum_form ? m.forward_einsum(x) : m.forward(x);
  sum(mul(y, Variable(g))).backward();
  std::vector<Tensor> out = {x.grad()};
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.grad());
  return out;
}

class MoETest : public ::testing::TestWithParam<int64_t> {};

TEST_P(MoETest, GroupedBlockSparseEqualsTheEinsumTwin) {
  Generator gen(3);
  MoE m(small(GetParam()), f64(), gen);
  const Tensor x = input({2, 5, 6}, 11);
  Variable y = m.forward(Variable(x));
  Variable y_twin = m.forward_einsum(Variable(x));
  ASSERT_EQ(y.shape(), (Shape{2, 5, 6}));
  EXPECT_TRUE(allclose(y.value(), y_twin.value(), 1e-12, 1e-12)) << max_abs_diff(y.value(), y_twin.value());
  const Tensor g = input({2, 5, 6}, 12);
  Dispatcher::instance().set_fallback_is_error(true);  // the grouped path runs on sparse kernels throughout
  std::vector<Tensor> a = gradients(m, x, g, false);
  Dispatcher::instance().set_fallback_is_error(false);
  std::vector<Tensor> b = gradients(m, x, g, true);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << i;
    EXPECT_TRUE(allclose(a[i], b[i], 1e-11, 1e-11)) << i << ": " << max_abs_diff(a[i], b[i]);
  }
}

TEST_P(MoETest, Gradchecks) {
  Generator gen(5);
  MoE m(small(GetParam()), f64(), gen);
  m.eval();  // the routing is piecewise constant; the aux loss is checked apart
  Variable x(input({7, 6}, 21), true);
  GradcheckResult r = gradcheck_module(m, x);
  EXPECT_TRUE(r.passed) << r.message;
}

INSTANTIATE_TEST_SUITE_P(TopK, MoETest, ::testing::Values(1, 2, 4));

TEST(MoE, UnpickedExpertsGetNoGradient) {
  // One token and top-1: one expert's rows of w1 and w2 move, no other's.
  Generator gen(7);
  MoEOptions o = small(1);
  MoE m(o, f64(), gen);
  Variable x(input({1, 6}, 31), true);
  sum(m.forward(x)).backward();
  const Tensor gw1 = m.parameter("w1").grad().reshape({o.experts, o.hidden * o.dim});
  int nonzero_experts = 0;
  for (int64_t e = 0; e < o.experts; ++e) nonzero_experts += max(abs(gw1.select(0, e))).item() > 0.0 ? 1 : 0;
  EXPECT_EQ(nonzero_experts, 1);
}

TEST(MoE, LoadBalancingLoss) {
  Generator gen(9);
  MoEOptions o = small(2);
  o.aux_loss = 0.5;
  MoE m(o, f64(), gen);
  const Tensor x = input({10, 6}, 41);
  m.forward(Variable(x));
  std::vector<Variable> aux = m.auxiliary_losses();
  ASSERT_EQ(aux.size(), 1u);
  // E * sum_e f_e P_e * coefficient, recomputed here.
  Tensor p = softmax(linear(x, m.parameter("router.weight").value()), 1);
  Tensor idx = topk(p, 2, 1).indices;
  std::vector<double> f(4, 0.0);
  for (int64_t i = 0; i < idx.numel(); ++i) f[idx.contiguous().data<int64_t>()[i]] += 1.0 / 20.0;
  double want = 0.0;
  Tensor pm = mean(p, {0});
  for (int64_t e = 0; e < 4; ++e) want += f[e] * pm.data<double>()[e];
  EXPECT_NEAR(aux[0].item(), 4 * want * 0.5, 1e-12);
  // It reaches the router, and only in training.
  aux[0].backward();
  EXPECT_TRUE(m.parameter("router.weight").grad().defined());
  m.eval();
  m.forward(Variable(x));
  EXPECT_TRUE(m.auxiliary_losses().empty());
}

// The grouped path and the einsum twin on the GPU against the CPU: the
// SDDMM at a BSR topology, the BSR and CSR products, the remapped sparse
// gate, and their backward passes (f32, and the forward in bf16).
TEST(MoE, CudaMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  MoEOptions o;
  o.dim = 64;
  o.hidden = 128;
  o.experts = 4;
  o.top_k = 2;
  o.block = 32;
  Generator gen(13);
  MoE cpu(o, {DType::kF32, Device::cpu()}, gen);
  Generator gen2(13);
  MoE gpu(o, {DType::kF32, Device::cpu()}, gen2);
  gpu.to(Device::cuda());
  Generator xg(17);
  const Tensor x = randn({3, 40, 64}, DType::kF32, xg);
  const Tensor g = randn({3, 40, 64}, DType::kF32, xg);
  for (bool einsum_form : {false, true}) {
    SCOPED_TRACE(einsum_form ? "einsum" : "grouped");
    std::vector<Tensor> a = gradients(cpu, x, g, einsum_form);
    std::vector<Tensor> b = gradients(gpu, x.to(Device::cuda()), g.to(Device::cuda()), einsum_form);
    for (size_t i = 0; i < a.size(); ++i) {
      Tensor bi = b[i].to(Device::cpu());
      EXPECT_TRUE(allclose(bi, a[i], 1e-3, 1e-4)) << i << ": " << max_abs_diff(bi, a[i]);
    }
  }
  Variable y_cpu = cpu.forward(Variable(x));
  MoE& half = gpu;
  for (const auto& [name, p] : half.named_parameters())
    half.set_parameter(name, Variable(p.value().to(DType::kBF16), true));
  Variable y16 = half.forward(Variable(x.to(Device::cuda()).to(DType::kBF16)));
  // bf16 may route a near tie to another expert: most rows, not all, agree.
  Tensor diff = abs(sub(y16.value().to(Device::cpu()).to(DType::kF32), y_cpu.value())).reshape({120, 64});
  Tensor row_max = max(diff, 1).values;
  int64_t close = 0;
  for (int64_t r = 0; r < 120; ++r) close += row_max.data<float>()[r] < 5e-2 ? 1 : 0;
  EXPECT_GE(close, 108) << "rows within 5e-2 of the f32 CPU result";
}

TEST(MoE, ErrorsNameTheOption) {
  MoEOptions o = small(1);
  o.top_k = 5;
  EXPECT_ERROR_NAMING(MoE(o, f64()), "top_k must be in [1, experts = 4], got 5");
  o = small(1);
  o.block = 3;
  EXPECT_ERROR_NAMING(MoE(o, f64()), "block 3 must divide hidden 8");
  Generator gen(1);
  MoE m(small(1), f64(), gen);
  EXPECT_ERROR_NAMING(m.forward(Variable(input({2, 5}, 1))), "input's last dim is 5, expected dim = 6");
}

}  // namespace
}  // namespace coppice
