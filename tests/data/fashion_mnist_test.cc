#include "data/fashion_mnist.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/data/test_util.h"

namespace coppice {
namespace {

using testing::gzip;
using testing::idx_bytes;
using testing::temp_dir;
using testing::write_file;

void expect_error(const absl::Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

// The mean and standard deviation of all values of an f32 tensor (a plain loop:
// tensor ops over 47M values in f64 take seconds).
std::pair<double, double> stats(const Tensor& t) {
  Tensor c = t.contiguous();
  const float* p = c.data<float>();
  const int64_t n = c.numel();
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  const double m = s / static_cast<double>(n);
  double v = 0.0;
  for (int64_t i = 0; i < n; ++i) v += (p[i] - m) * (p[i] - m);
  return {m, std::sqrt(v / static_cast<double>(n))};
}

// Loads both splits once: each costs a few hundred milliseconds.
class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::shared_ptr<TensorDataset>> train = load_fashion_mnist(FashionMnistSplit::kTrain);
    absl::StatusOr<std::shared_ptr<TensorDataset>> test = load_fashion_mnist(FashionMnistSplit::kTest);
    ASSERT_TRUE(train.ok()) << train.status();
    ASSERT_TRUE(test.ok()) << test.status();
    train_ = new std::shared_ptr<TensorDataset>(*train);
    test_ = new std::shared_ptr<TensorDataset>(*test);
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
    train_ = test_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(train_, nullptr) << "loading failed"; }
  static const TensorDataset& train() { return **train_; }
  static const TensorDataset& test() { return **test_; }

 private:
  static std::shared_ptr<TensorDataset>* train_;
  static std::shared_ptr<TensorDataset>* test_;
};
std::shared_ptr<TensorDataset>* FashionMnist::train_ = nullptr;
std::shared_ptr<TensorDataset>* FashionMnist::test_ = nullptr;

TEST_F(FashionMnist, SizesAndShapes) {
  EXPECT_EQ(train().size(), 60000);
  EXPECT_EQ(test().size(), 10000);
  EXPECT_EQ(train().inputs().shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(test().inputs().shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(train().inputs().dtype(), DType::kF32);
  EXPECT_EQ(train().targets().shape(), (Shape{60000}));
  EXPECT_EQ(train().targets().dtype(), DType::kI64);
  EXPECT_EQ(train().name(), "Fashion-MNIST train of 60000");
}

TEST_F(FashionMnist, FirstLabelsAsInTheFiles) {
  // The first label bytes of train-labels-idx1-ubyte and t10k-labels-idx1-ubyte.
  std::vector<int64_t> train_first = train().targets().slice(0, 0, 12).to_vector<int64_t>();
  EXPECT_EQ(train_first, (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}));
  std::vector<int64_t> test_first = test().targets().slice(0, 0, 12).to_vector<int64_t>();
  EXPECT_EQ(test_first, (std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}));
  EXPECT_STREQ(kFashionMnistClassNames[9], "Ankle boot");
}

TEST_F(FashionMnist, BalancedClasses) {
  std::vector<int64_t> train_counts(10, 0), test_counts(10, 0);
  for (int64_t y : train().targets().to_vector<int64_t>()) ++train_counts.at(static_cast<size_t>(y));
  for (int64_t y : test().targets().to_vector<int64_t>()) ++test_counts.at(static_cast<size_t>(y));
  EXPECT_EQ(train_counts, std::vector<int64_t>(10, 6000));
  EXPECT_EQ(test_counts, std::vector<int64_t>(10, 1000));
}

TEST_F(FashionMnist, NormalizedStatistics) {
  // After (x - 0.2860) / 0.3530 the training set has mean ~0 and std ~1.
  auto [m, sd] = stats(train().inputs());
  EXPECT_NEAR(m, 0.0, 2e-3);
  EXPECT_NEAR(sd, 1.0, 1e-2);
  // Pixel 0 of image 0 is 0, so it maps to -mean/std.
  EXPECT_FLOAT_EQ(train().inputs().data<float>()[0], static_cast<float>(-0.2860 / 0.3530));
}

TEST(FashionMnistOptions, RawFlattenedAndCustomNormalization) {
  FashionMnistOptions raw;
  raw.normalize = false;
  raw.flatten = true;
  absl::StatusOr<std::shared_ptr<TensorDataset>> ds = load_fashion_mnist(FashionMnistSplit::kTest, raw);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Tensor& x = (*ds)->inputs();
  EXPECT_EQ(x.shape(), (Shape{10000, 784}));
  EXPECT_GE(min(x).item(), 0.0);
  EXPECT_LE(max(x).item(), 1.0);
  // The first test image's pixels sum to 33456 / 255 (from the file's bytes).
  EXPECT_NEAR(sum(x.select(0, 0).to(DType::kF64)).item(), 33456.0 / 255.0, 1e-4);

  FashionMnistOptions custom;
  custom.mean = 0.5;
  custom.std = 0.25;
  ds = load_fashion_mnist(FashionMnistSplit::kTest, custom);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_NEAR(min((*ds)->inputs()).item(), -2.0, 1e-6);
  EXPECT_NEAR(max((*ds)->inputs()).item(), 2.0, 1e-6);

  // Raw training-set statistics match the documented defaults.
  raw.flatten = false;
  ds = load_fashion_mnist(FashionMnistSplit::kTrain, raw);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto [m, sd] = stats((*ds)->inputs());
  EXPECT_NEAR(m, kFashionMnistMean, 5e-4);
  EXPECT_NEAR(sd, kFashionMnistStd, 5e-4);

  FashionMnistOptions bad_std;
  bad_std.std = 0.0;
  expect_error(load_fashion_mnist(FashionMnistSplit::kTest, bad_std).status(), {"std > 0"});
}

// Small crafted image/label files in the Fashion-MNIST layout.
struct Crafted {
  std::string dir = temp_dir();
  std::string images(uint32_t n, uint32_t h = 2, uint32_t w = 3) {
    return write_file(dir + "/images.gz", gzip(idx_bytes(0x08, {n, h, w}, std::string(n * h * w, '\x33'))));
  }
  std::string labels(const std::string& values) {
    return write_file(dir + "/labels.gz", gzip(idx_bytes(0x08, {static_cast<uint32_t>(values.size())}, values)));
  }
};

TEST(FashionMnistFiles, LoadsCraftedFiles) {
  Crafted c;
  FashionMnistOptions raw;
  raw.normalize = false;
  absl::StatusOr<std::shared_ptr<TensorDataset>> ds =
      load_idx_classification(c.images(4), c.labels(std::string("\x00\x09\x03\x01", 4)), raw);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->inputs().shape(), (Shape{4, 1, 2, 3}));
  EXPECT_EQ((*ds)->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 9, 3, 1}));
  EXPECT_FLOAT_EQ((*ds)->inputs().data<float>()[5], 0x33 / 255.0f);
}

TEST(FashionMnistFiles, BadFiles) {
  Crafted c;
  const std::string d = c.dir;
  // Mismatched counts.
  expect_error(load_idx_classification(c.images(5), c.labels(std::string(4, '\x01'))).status(),
               {"labels.gz", "4 labels for the 5 images", "images.gz"});
  // A label outside 0..9.
  expect_error(load_idx_classification(c.images(3), c.labels(std::string("\x01\x0a\x02", 3))).status(),
               {"labels.gz", "label 10 of example 1", "[0, 10)"});
  // Images and labels swapped: wrong magic (dimensions) for each role.
  expect_error(load_idx_classification(c.labels(std::string(3, '\x01')), d + "/labels.gz").status(),
               {"labels.gz", "expected an images file", "u8 [3]"});
  c.images(3);
  expect_error(load_idx_classification(d + "/images.gz", d + "/images.gz").status(),
               {"images.gz", "expected a labels file", "u8 [3, 2, 3]"});
  write_file(d + "/l.gz", gzip(idx_bytes(0x08, {3}, "\x01\x01\x01")));
  write_file(d + "/i32.gz", gzip(idx_bytes(0x0C, {1, 1, 3}, std::string(12, '\0'))));
  expect_error(load_idx_classification(d + "/i32.gz", d + "/l.gz").status(),
               {"i32.gz", "expected an images file", "i32 [1, 1, 3]"});
  // Wrong magic bytes.
  write_file(d + "/magic.gz", gzip(std::string("\x08\x03\x00\x00", 4) + std::string(20, '\x00')));
  expect_error(load_idx_classification(d + "/magic.gz", d + "/l.gz").status(), {"magic.gz", "bad magic number"});
  // Truncated gzip, truncated data, not gzip at all.
  const std::string full = gzip(idx_bytes(0x08, {3, 2, 3}, std::string(18, '\x10')));
  write_file(d + "/trunc.gz", full.substr(0, full.size() - 9));
  expect_error(load_idx_classification(d + "/trunc.gz", d + "/l.gz").status(), {"trunc.gz", "truncated gzip stream"});
  write_file(d + "/short.gz", gzip(idx_bytes(0x08, {3, 2, 3}, std::string(17, '\x10'))));
  expect_error(load_idx_classification(d + "/short.gz", d + "/l.gz").status(),
               {"short.gz", "truncated data", "needs 18 bytes", "has 17"});
  write_file(d + "/plain.gz", idx_bytes(0x08, {3, 2, 3}, std::string(18, '\x10')));
  expect_error(load_idx_classification(d + "/plain.gz", d + "/l.gz").status(), {"plain.gz", "not a gzip file"});
  // A directory without the files, and the official size check.
  FashionMnistOptions o;
  o.dir = d;
  expect_error(load_fashion_mnist(FashionMnistSplit::kTrain, o).status(),
               {d + "/train-labels-idx1-ubyte.gz", "cannot open"});
  write_file(d + "/t10k-images-idx3-ubyte.gz", gzip(idx_bytes(0x08, {3, 28, 28}, std::string(3 * 784, '\0'))));
  write_file(d + "/t10k-labels-idx1-ubyte.gz", gzip(idx_bytes(0x08, {3}, "\x01\x02\x03")));
  expect_error(load_fashion_mnist(FashionMnistSplit::kTest, o).status(), {"expected 10000 images of 28x28, got 3"});
}

}  // namespace
}  // namespace coppice
