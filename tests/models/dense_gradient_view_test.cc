// The dense-gradient view (models/dense_gradient_view.h): a swapped weight's
// growth signal is its dense gradient; a block-format weight probed instead
// gives block scores (with its block size) of the gradient the swap gives,
// unscaled, and the same compact gradient for the optimizer; a weight whose
// gradient the probe cannot see is refused by name.
#include "models/dense_gradient_view.h"

#include <map>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "gtest/gtest.h"
#include "models/zoo.h"
#include "sparse/convert.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

// MLP 12-8-6 in f64 whose fc1.weight [8, 12] is BSR in 2x3 blocks (half of them).
std::shared_ptr<MLP> model_with_bsr(const std::string& format) {
  Generator gen(11);
  LayerOptions lo;
  lo.dtype = DType::kF64;
  auto m = std::make_shared<MLP>(std::vector<int64_t>{12, 8, 6}, lo, gen);
  const Tensor w = m->parameter("fc1.weight").value();
  std::vector<double> keep(96, 0.0);
  for (int64_t q = 0; q < 96; ++q) keep[static_cast<size_t>(q)] = ((q / 12 / 2) + (q % 12 / 3)) % 2;
  const Tensor masked = mul(w, from_vector(keep, {8, 12}, TensorOptions(DType::kF64)));
  const FormatOptions fo = format == "bsr" ? FormatOptions::block(2, 3) : FormatOptions::block(2);
  m->set_parameter("fc1.weight", Variable(to_format(masked, format, fo), true, "fc1.weight"));
  return m;
}

// One forward and backward of a loss scaled by `scale` through the view.
std::map<std::string, GrowthSignal> view_step(MLP& m, bool probe, double scale, Tensor* compact) {
  DenseGradientView view;
  std::vector<std::string> swapped;
  view.open(
      m, {"fc1.weight"}, [&](const std::string& n) { swapped.push_back(n); }, probe);
  EXPECT_EQ(swapped.size(), probe ? 0u : 1u);
  EXPECT_EQ(m.parameter("fc1.weight").value().is_sparse(), probe);
  Generator gen(5);
  const Tensor x = randn({4, 12}, DType::kF64, gen), up = randn({4, 6}, DType::kF64, gen);
  mul(sum(mul(m(Variable(x)), Variable(up))), scale).backward();
  std::map<std::string, GrowthSignal> out = view.close(scale);
  EXPECT_TRUE(m.parameter("fc1.weight").value().is_sparse());
  *compact = m.parameter("fc1.weight").grad();
  m.zero_grad();
  return out;
}

TEST(DenseGradientViewTest, ProbedBlockWeightsGiveTheSwapsBlockScores) {
  for (const std::string format : {"bsr", "blocked_ell"}) {
    const int64_t bw = format == "bsr" ? 3 : 2;
    auto m = model_with_bsr(format);
    Tensor compact_swap, compact_probe;
    const GrowthSignal swapped = view_step(*m, false, 4.0, &compact_swap).at("fc1.weight");
    const GrowthSignal probed = view_step(*m, true, 4.0, &compact_probe).at("fc1.weight");
    ASSERT_TRUE(swapped.is_dense_gradient()) << format;
    ASSERT_TRUE(probed.is_block_scores()) << format;
    EXPECT_EQ(probed.block_rows(), 2) << format;
    EXPECT_EQ(probed.block_cols(), bw) << format;
    const Tensor& dense = swapped.tensor();
    const Tensor& scores = probed.tensor();
    EXPECT_EQ(dense.shape(), (Shape{8, 12})) << format;
    EXPECT_EQ(scores.shape(), (Shape{4, 12 / bw})) << format;
    EXPECT_TRUE(allclose(scores, sparsify::block_scores(dense, 2, bw, false, "t"), 1e-12, 1e-15)) << format;
    EXPECT_TRUE(allclose(to_dense(compact_probe), to_dense(compact_swap), 1e-12, 1e-15)) << format;
  }
}

TEST(DenseGradientViewTest, RefusesAGradientTheProbeCannotSee) {
  auto m = model_with_bsr("bsr");
  DenseGradientView view;
  view.open(*m, {"fc1.weight"}, nullptr, true);
  // A gradient from values(), not from a product with the weight.
  sum(coppice::values(m->parameter("fc1.weight"))).backward();
  EXPECT_TRUE(testing::throws_with([&] { view.close(1.0); }, {"fc1.weight", "linear or matmul"}));
  // Unused: zero scores.
  DenseGradientView unused;
  m->zero_grad();
  unused.open(*m, {"fc1.weight"}, nullptr, true);
  const GrowthSignal unused_signal = unused.close(1.0).at("fc1.weight");
  ASSERT_TRUE(unused_signal.is_block_scores());
  const Tensor& z = unused_signal.tensor();
  EXPECT_EQ(z.shape(), (Shape{4, 4}));
  EXPECT_EQ(sum(z).item(), 0.0);
}

}  // namespace
}  // namespace coppice
