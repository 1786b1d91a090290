// Tests for tensor/factories.cc: constants, ranges and random tensors.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/philox.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

TEST(Factories, ZerosOnesFull) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::kF32);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0));

  Tensor o = ones({4}, DType::kI64);
  EXPECT_EQ(o.dtype(), DType::kI64);
  EXPECT_EQ(o.to_vector<int64_t>(), std::vector<int64_t>(4, 1));

  Tensor f = full({2, 2}, 2.5, DType::kBF16);
  EXPECT_EQ(f.dtype(), DType::kBF16);
  EXPECT_EQ(f.to_vector<double>(), std::vector<double>(4, 2.5));

  // bf16 rounds 1/3 to its nearest value, 0x3eab.
  Tensor third = full({1}, 1.0 / 3.0, DType::kBF16);
  EXPECT_EQ(third.data<BFloat16>()[0].bits, 0x3eab);

  Tensor b = full({3}, 1.0, DType::kBool);
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 1, 1}));

  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.numel(), 0);
}

TEST(Factories, Like) {
  Tensor x = ones({2, 5}, DType::kF64);
  Tensor z = zeros_like(x);
  EXPECT_EQ(z.shape(), x.shape());
  EXPECT_EQ(z.dtype(), DType::kF64);
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(10, 0.0));
  EXPECT_EQ(ones_like(z).to_vector<double>(), std::vector<double>(10, 1.0));
  Tensor f = full_like(x.t(), -7.0);
  EXPECT_EQ(f.shape(), (Shape{5, 2}));
  EXPECT_TRUE(f.is_contiguous());
  EXPECT_EQ(f.to_vector<double>(), std::vector<double>(10, -7.0));
}

TEST(Factories, ScalarTensor) {
  Tensor s = scalar_tensor(3.25, DType::kF64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 3.25);
  EXPECT_EQ(scalar_tensor(-4, DType::kI32).item<int>(), -4);
}

TEST(Factories, Arange) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::kI64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));

  Tensor f = arange(1.0, 2.0, 0.25, DType::kF32);
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{1.0, 1.25, 1.5, 1.75}));

  EXPECT_EQ(arange(5.0, 0.0, -2.0).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(arange(3.0, 3.0).numel(), 0);
  EXPECT_EQ(arange(3.0, 1.0).numel(), 0);                    // empty, not negative
  EXPECT_EQ(arange(0.0, 1.0, 0.3, DType::kF64).numel(), 4);  // 0, 0.3, 0.6, 0.9

  // Integer ranges stay exact beyond 2^53, where doubles have gaps.
  const double big = 9007199254740992.0;  // 2^53
  Tensor exact = arange(big, big + 4.0);
  const int64_t* p = exact.data<int64_t>();
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(p[i], (int64_t{1} << 53) + i);

  Tensor h = arange(0.0, 3.0, 1.0, DType::kF16);
  EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{0, 1, 2}));
}

TEST(Factories, Errors) {
  EXPECT_ERROR_NAMING(zeros({2, -1}), "zeros");
  EXPECT_ERROR_NAMING(empty({-3}), "empty");
  EXPECT_ERROR_NAMING(arange(0.0, 5.0, 0.0), "arange: step");
  EXPECT_ERROR_NAMING(arange(0.0, INFINITY), "arange");
  EXPECT_ERROR_NAMING(full({2}, NAN, DType::kI32), "full");
  EXPECT_ERROR_NAMING(rand({2}, DType::kI64), "rand: dtype must be floating-point, got i64");
  EXPECT_ERROR_NAMING(randn({2}, DType::kBool), "randn");
  EXPECT_ERROR_NAMING(randint(3, 3, {2}), "randint: low (3) must be less than high (3)");
  EXPECT_ERROR_NAMING(randint(0, 10, {2}, DType::kF32), "randint: dtype must be an integer type");
  EXPECT_ERROR_NAMING(randint(0, 300, {2}, DType::kU8), "randint");
  EXPECT_ERROR_NAMING(bernoulli({2}, 1.5), "bernoulli: probability p must be in [0, 1], got 1.5");
  EXPECT_ERROR_NAMING(bernoulli({2}, -0.1), "bernoulli");
}

TEST(Factories, RandMatchesPhiloxAndAdvances) {
  Generator gen(1234, 7);
  Tensor r = rand({1000}, DType::kF32, gen);
  EXPECT_EQ(gen.offset(), 8u);  // one draw, whatever its size
  const float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    ASSERT_EQ(p[i], philox::uniform_f32(philox::word(1234, 7, static_cast<uint64_t>(i)))) << i;
    ASSERT_GE(p[i], 0.0f);
    ASSERT_LT(p[i], 1.0f);
  }
  // The next draw uses the next offset, so it differs.
  Tensor r2 = rand({1000}, DType::kF32, gen);
  EXPECT_GT(max_abs_diff(r, r2), 0.1);

  // The same state gives the same numbers.
  Generator again(1234, 7);
  EXPECT_EQ(max_abs_diff(rand({1000}, DType::kF32, again), r), 0.0);

  Generator g64(5);
  Tensor d = rand({100}, DType::kF64, g64);
  for (int64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(d.data<double>()[i], philox::uniform_f64(philox::word(5, 0, static_cast<uint64_t>(i))));
  }
}

TEST(Factories, RandStatistics) {
  Generator gen(99);
  std::vector<double> v = rand({20000}, DType::kF64, gen).to_vector<double>();
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  EXPECT_NEAR(mean, 0.5, 0.01);

  Tensor h = rand({256}, DType::kBF16, gen);
  EXPECT_EQ(h.dtype(), DType::kBF16);
  for (double x : h.to_vector<double>()) {
    EXPECT_GE(x, 0.0);
    EXPECT_LE(x, 1.0);  // bf16 rounding may reach 1
  }
}

TEST(Factories, Randn) {
  Generator gen(3, 2);
  Tensor n = randn({20000}, DType::kF64, gen);
  EXPECT_EQ(gen.offset(), 3u);
  std::vector<double> v = n.to_vector<double>();
  double mean = 0, sq = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_DOUBLE_EQ(v[i], philox::normal(3, 2, i)) << i;
    mean += v[i];
    sq += v[i] * v[i];
  }
  mean /= static_cast<double>(v.size());
  double var = sq / static_cast<double>(v.size()) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.04);

  Generator g32(3, 2);
  Tensor f = randn({100}, DType::kF32, g32);
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(f.data<float>()[i], static_cast<float>(philox::normal(3, 2, static_cast<uint64_t>(i))));
  }
}

TEST(Factories, Randint) {
  Generator gen(11);
  Tensor r = randint(-3, 4, {5000}, DType::kI64, gen);
  EXPECT_EQ(r.dtype(), DType::kI64);
  std::vector<int64_t> v = r.to_vector<int64_t>();
  std::vector<int> seen(7, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_GE(v[i], -3);
    ASSERT_LT(v[i], 4);
    ++seen[v[i] + 3];
    ASSERT_EQ(v[i], -3 + static_cast<int64_t>(philox::word(11, 0, i) % 7u));
  }
  for (int c : seen) EXPECT_GT(c, 500);

  Tensor u = randint(0, 256, {100}, DType::kU8, gen);
  EXPECT_EQ(u.dtype(), DType::kU8);
  Tensor i32 = randint(10, 12, {100}, DType::kI32, gen);
  for (int x : i32.to_vector<int>()) EXPECT_TRUE(x == 10 || x == 11);
}

TEST(Factories, Bernoulli) {
  Generator gen(21);
  EXPECT_EQ(sum(bernoulli({1000}, 0.0, {}, gen)).item(), 0.0);
  EXPECT_EQ(sum(bernoulli({1000}, 1.0, {}, gen)).item(), 1000.0);
  Tensor m = bernoulli({20000}, 0.3, DType::kF32, gen);
  EXPECT_EQ(m.dtype(), DType::kF32);
  for (double x : m.to_vector<double>()) ASSERT_TRUE(x == 0.0 || x == 1.0);
  EXPECT_NEAR(sum(m).item() / 20000.0, 0.3, 0.015);

  // One generator state gives one mask whatever the dtype.
  Generator a(5), b(5);
  Tensor mb = bernoulli({500}, 0.5, DType::kBool, a);
  Tensor mh = bernoulli({500}, 0.5, DType::kBF16, b);
  EXPECT_EQ(mb.dtype(), DType::kBool);
  EXPECT_EQ(mb.to_vector<double>(), mh.to_vector<double>());
}

TEST(Factories, FromVector) {
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor c = from_vector<int64_t>({1, 2}, {}, DType::kF64);
  EXPECT_EQ(c.dtype(), DType::kF64);
  EXPECT_ERROR_NAMING(from_vector<float>({1, 2, 3}, {2, 2}), "from_vector");
}

TEST(Factories, SameNumbersOnTheGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda(0);
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16}) {
    Generator a(77, 3), b(77, 3);
    EXPECT_EQ(max_abs_diff(rand({1000}, t, a), rand({1000}, TensorOptions(t, gpu), b)), 0.0) << dtype_name(t);
    // Box-Muller's log/sin/cos may differ by an ulp of f64 between the CPU's libm and CUDA's
    // (measured on an H100: 4.4e-16), which can also move an f32 or bf16 result by one of its ulps.
    double tol = t == DType::kF64 ? 1e-14 : (t == DType::kF32 ? 1e-6 : 0.04);
    EXPECT_LE(max_abs_diff(randn({1001}, t, a), randn({1001}, TensorOptions(t, gpu), b)), tol) << dtype_name(t);
  }
  Generator a(5), b(5);
  EXPECT_EQ(max_abs_diff(randint(-7, 100, {999}, DType::kI64, a),
                         randint(-7, 100, {999}, TensorOptions(DType::kI64, gpu), b)),
            0.0);
  EXPECT_EQ(
      max_abs_diff(bernoulli({999}, 0.3, DType::kBool, a), bernoulli({999}, 0.3, TensorOptions(DType::kBool, gpu), b)),
      0.0);
  Tensor z = zeros({2, 3}, gpu);
  EXPECT_EQ(z.device(), gpu);
  EXPECT_EQ(full({4}, 2.5, TensorOptions(DType::kBF16, gpu)).to_vector<double>(), std::vector<double>(4, 2.5));
  EXPECT_EQ(arange(0.0, 5.0, 1.0, TensorOptions(DType::kI32, gpu)).to_vector<int>(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ones_like(z).device(), gpu);
}

}  // namespace
}  // namespace coppice
