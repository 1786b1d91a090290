// Density distributions over layers (optim/density.h): uniform, ER and ERK
// against hand computations for LeNet-300-100 and a LeNet-5-like CNN at 90%
// overall sparsity, the capping procedure, overrides, dense layers, errors.
#include "optim/density.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/error.h"

namespace coppice {
namespace {

const std::vector<LayerShape> kLeNet300 = {{"fc1", {300, 784}}, {"fc2", {100, 300}}, {"fc3", {10, 100}}};
const std::vector<LayerShape> kCnn = {
    {"conv1", {6, 1, 5, 5}}, {"conv2", {16, 6, 5, 5}}, {"fc1", {120, 256}}, {"fc2", {84, 120}}, {"fc3", {10, 84}}};

double total_nnz(const std::vector<LayerDensity>& d) {
  double t = 0;
  for (const LayerDensity& l : d) t += l.density * static_cast<double>(l.numel);
  return t;
}

DensityOptions opts(DensityDistribution dist, double density = 0.1) {
  DensityOptions o;
  o.distribution = dist;
  o.density = density;
  return o;
}

// 266200 weights, 26620 kept. Raw ERK: 1084/235200, 400/30000, 110/1000.
// First eps = 26620/1594 makes fc3 1.84 > 1, so fc3 is dense; then
// eps = (26620 - 1000) / (1084 + 400).
TEST(Density, ErkLeNet300100ByHand) {
  const auto d = layer_densities(kLeNet300, opts(DensityDistribution::kErdosRenyiKernel));
  ASSERT_EQ(d.size(), 3u);
  const double eps = 25620.0 / 1484.0;
  EXPECT_NEAR(d[0].density, eps * 1084.0 / 235200.0, 1e-12);
  EXPECT_NEAR(d[1].density, eps * 400.0 / 30000.0, 1e-12);
  EXPECT_DOUBLE_EQ(d[2].density, 1.0);
  EXPECT_TRUE(d[2].made_dense);
  EXPECT_FALSE(d[0].made_dense);
  EXPECT_NEAR(d[0].density, 0.0795678, 1e-6);
  EXPECT_NEAR(d[1].density, 0.230189, 1e-6);
  EXPECT_NEAR(total_nnz(d), 26620.0, 1e-6);
  EXPECT_EQ(d[0].nnz, 18714);  // round(0.0795678 * 235200)
  EXPECT_EQ(d[1].nnz, 6906);
  EXPECT_EQ(d[2].nnz, 1000);
  // For 2-D weights ER is ERK.
  const auto er = layer_densities(kLeNet300, opts(DensityDistribution::kErdosRenyi));
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(er[i].density, d[i].density, 1e-12);
}

// 44190 weights, 4419 kept. Raw ERK: 17/150, 32/2400, 376/30720, 204/10080,
// 94/840 (sum of raw * numel: 723); the largest, 17/150 * 4419/723 = 0.69,
// needs no capping.
TEST(Density, ErkSmallCnnByHand) {
  const auto d = layer_densities(kCnn, opts(DensityDistribution::kErdosRenyiKernel));
  const double eps = 4419.0 / 723.0;
  const std::vector<double> raw = {17.0 / 150, 32.0 / 2400, 376.0 / 30720, 204.0 / 10080, 94.0 / 840};
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_NEAR(d[i].density, eps * raw[i], 1e-12) << d[i].name;
    EXPECT_FALSE(d[i].made_dense);
  }
  EXPECT_NEAR(total_nnz(d), 4419.0, 1e-6);
}

// ER on the CNN uses the channels only: conv1's raw (1 + 6) / 6 makes it
// dense; then eps = (4419 - 150) / (22/96 * 2400 + 376 + 204 + 94).
TEST(Density, ErSmallCnnCapsAndRedistributes) {
  const auto d = layer_densities(kCnn, opts(DensityDistribution::kErdosRenyi));
  EXPECT_DOUBLE_EQ(d[0].density, 1.0);
  EXPECT_TRUE(d[0].made_dense);
  const double eps = 4269.0 / 1224.0;
  EXPECT_NEAR(d[1].density, eps * 22.0 / 96.0, 1e-12);
  EXPECT_NEAR(d[2].density, eps * 376.0 / 30720.0, 1e-12);
  EXPECT_NEAR(d[4].density, eps * 94.0 / 840.0, 1e-12);
  EXPECT_NEAR(total_nnz(d), 4419.0, 1e-6);
}

TEST(Density, UniformOverridesAndDenseLayers) {
  auto d = layer_densities(kLeNet300, opts(DensityDistribution::kUniform));
  for (const LayerDensity& l : d) EXPECT_NEAR(l.density, 0.1, 1e-12);
  DensityOptions o = opts(DensityDistribution::kUniform);
  o.dense = {"fc3"};
  d = layer_densities(kLeNet300, o);
  EXPECT_DOUBLE_EQ(d[2].density, 1.0);
  EXPECT_FALSE(d[2].made_dense);  // asked for, not capped
  EXPECT_NEAR(d[0].density, 25620.0 / 265200.0, 1e-12);
  EXPECT_NEAR(d[1].density, 25620.0 / 265200.0, 1e-12);
  o.overrides = {{"fc2", 0.5}};
  d = layer_densities(kLeNet300, o);
  EXPECT_DOUBLE_EQ(d[1].density, 0.5);
  EXPECT_NEAR(d[0].density, (26620.0 - 1000.0 - 15000.0) / 235200.0, 1e-12);
  EXPECT_NEAR(total_nnz(d), 26620.0, 1e-6);
  // Density 1 makes everything dense.
  d = layer_densities(kCnn, opts(DensityDistribution::kErdosRenyiKernel, 1.0));
  for (const LayerDensity& l : d) EXPECT_NEAR(l.density, 1.0, 1e-12);
}

TEST(Density, Refusals) {
  auto throws = [](const std::vector<LayerShape>& layers, const DensityOptions& o, const std::string& part) {
    try {
      layer_densities(layers, o);
    } catch (const Error& e) { return std::string(e.what()).find(part) != std::string::npos; }
    return false;
  };
  EXPECT_TRUE(throws(kLeNet300, opts(DensityDistribution::kUniform, 1.5), "density must be in [0, 1]"));
  DensityOptions o = opts(DensityDistribution::kUniform);
  o.overrides = {{"fc9", 0.5}};
  EXPECT_TRUE(throws(kLeNet300, o, "'fc9', which names no layer"));
  o.overrides = {{"fc1", 0.5}};
  EXPECT_TRUE(throws(kLeNet300, o, "more than the target"));
  o.overrides = {};
  o.dense = {"fc0"};
  EXPECT_TRUE(throws(kLeNet300, o, "dense layer 'fc0'"));
  EXPECT_TRUE(throws({{"a", {2, 2}}, {"a", {3, 3}}}, opts(DensityDistribution::kUniform), "appears twice"));
  EXPECT_EQ(parse_density_distribution("erk"), DensityDistribution::kErdosRenyiKernel);
  EXPECT_EQ(parse_density_distribution("er"), DensityDistribution::kErdosRenyi);
  try {
    parse_density_distribution("gaussian");
    FAIL();
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("known: er, erk, uniform"), std::string::npos); }
}

}  // namespace
}  // namespace coppice
