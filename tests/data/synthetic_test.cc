#include "data/synthetic.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

TEST(Blobs, ShapesAndDeterminism) {
  BlobsOptions o;
  o.n = 600;
  o.features = 4;
  o.classes = 3;
  o.seed = 11;
  Blobs a = make_blobs(o), b = make_blobs(o);
  EXPECT_EQ(a.dataset->size(), 600);
  EXPECT_EQ(a.dataset->inputs().shape(), (Shape{600, 4}));
  EXPECT_EQ(a.dataset->inputs().dtype(), DType::kF32);
  EXPECT_EQ(a.dataset->targets().dtype(), DType::kI64);
  EXPECT_EQ(a.centers.shape(), (Shape{3, 4}));
  EXPECT_TRUE(allclose(a.dataset->inputs(), b.dataset->inputs(), 0, 0));
  EXPECT_EQ(a.dataset->targets().to_vector<int64_t>(), b.dataset->targets().to_vector<int64_t>());
  o.seed = 12;
  EXPECT_FALSE(allclose(make_blobs(o).dataset->inputs(), a.dataset->inputs()));
}

TEST(Blobs, ExamplesSitAroundTheirCenters) {
  BlobsOptions o;
  o.n = 3000;
  o.features = 2;
  o.classes = 3;
  o.spread = 0.5;
  o.seed = 3;
  Blobs blobs = make_blobs(o);
  std::vector<int64_t> y = blobs.dataset->targets().to_vector<int64_t>();
  std::vector<double> x = blobs.dataset->inputs().to_vector<double>();
  std::vector<double> c = blobs.centers.to_vector<double>();
  std::vector<double> sum(6, 0.0), sq(6, 0.0);
  std::vector<int> count(3, 0);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_GE(y[i], 0);
    ASSERT_LT(y[i], 3);
    const size_t k = static_cast<size_t>(y[i]);
    ++count[k];
    for (size_t f = 0; f < 2; ++f) {
      const double d = x[2 * i + f] - c[2 * k + f];
      sum[2 * k + f] += d;
      sq[2 * k + f] += d * d;
    }
  }
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(count[k], 1000, 120) << k;  // labels drawn uniformly
    for (size_t f = 0; f < 2; ++f) {
      EXPECT_NEAR(sum[2 * k + f] / count[k], 0.0, 0.06);
      EXPECT_NEAR(std::sqrt(sq[2 * k + f] / count[k]), 0.5, 0.05);
    }
  }
  BlobsOptions bad;
  bad.classes = 0;
  EXPECT_THROW(make_blobs(bad), Error);
  bad = BlobsOptions();
  bad.spread = -1;
  EXPECT_THROW(make_blobs(bad), Error);
}

TEST(Regression, TeacherExplainsTargets) {
  RegressionOptions o;
  o.n = 2000;
  o.features = 5;
  o.outputs = 2;
  o.noise = 0.1;
  o.seed = 9;
  Regression r = make_regression(o);
  EXPECT_EQ(r.dataset->inputs().shape(), (Shape{2000, 5}));
  EXPECT_EQ(r.dataset->targets().shape(), (Shape{2000, 2}));
  EXPECT_EQ(r.weight.shape(), (Shape{2, 5}));
  EXPECT_EQ(r.bias.shape(), (Shape{2}));
  Tensor residual = sub(r.dataset->targets(), linear(r.dataset->inputs(), r.weight, r.bias));
  const double rms = std::sqrt(mean(mul(residual, residual)).item());
  EXPECT_NEAR(rms, 0.1, 0.01);
  EXPECT_NEAR(mean(residual).item(), 0.0, 0.01);
  Regression again = make_regression(o);
  EXPECT_TRUE(allclose(again.dataset->targets(), r.dataset->targets(), 0, 0));
  EXPECT_TRUE(allclose(again.weight, r.weight, 0, 0));
  o.noise = -0.1;
  EXPECT_THROW(make_regression(o), Error);
}

TEST(Blobs, BytesAreKnownBeforeTheDraw) {
  BlobsOptions o;
  o.n = 100;
  o.features = 8;
  o.classes = 3;
  EXPECT_EQ(blobs_bytes(o), 100 * (8 * 4 + 8) + 3 * 8 * 4);
  const Blobs b = make_blobs(o);
  EXPECT_EQ(blobs_bytes(o), b.dataset->inputs().storage().nbytes() + b.dataset->targets().storage().nbytes() +
                                b.centers.storage().nbytes());
  o.n = int64_t{1} << 40;
  o.features = int64_t{1} << 24;
  EXPECT_THROW(blobs_bytes(o), Error);
  // The data.synthetic.examples: 2305843009213693952 reached randint and wrapped.
  o.n = int64_t{2305843009213693952};
  o.features = 2;
  EXPECT_THROW(make_blobs(o), Error);
}

}  // namespace
}  // namespace coppice
