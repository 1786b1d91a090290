// uniform_, normal_, randint_: the exact Philox stream of tensor/philox.h.
#include <cmath>

#include "tensor/philox.h"
#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::call1;
using testing::expect_error;
using testing::values;

Attrs rng(int64_t seed, int64_t offset, const char* a, double va, const char* b, double vb) {
  Attrs attrs;
  attrs.set("seed", seed);
  attrs.set("offset", offset);
  attrs.set(a, va);
  attrs.set(b, vb);
  return attrs;
}

TEST(UniformTest, ExactStreamF32AndF64) {
  const int64_t n = 10007;
  const uint64_t seed = 0x123456789abcdefull, offset = 42;
  Tensor f = Tensor::empty({n}, DType::kF32);
  call1("uniform_", {f}, rng(static_cast<int64_t>(seed), offset, "low", -2.0, "high", 3.0));
  Tensor d = Tensor::empty({n}, DType::kF64);
  call1("uniform_", {d}, rng(static_cast<int64_t>(seed), offset, "low", -2.0, "high", 3.0));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w = philox::word(seed, offset, static_cast<uint64_t>(i));
    ASSERT_EQ(f.data<float>()[i], static_cast<float>(-2.0 + 5.0 * static_cast<double>(philox::uniform_f32(w)))) << i;
    ASSERT_EQ(d.data<double>()[i], -2.0 + 5.0 * philox::uniform_f64(w)) << i;
  }
}

TEST(UniformTest, RangeMomentsAndSixteenBitTypes) {
  const int64_t n = 200000;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
    Tensor x = Tensor::empty({n}, t);
    call1("uniform_", {x}, rng(7, 0, "low", 0.0, "high", 1.0));
    double sum = 0, sq = 0, lo = 1, hi = 0;
    for (double v : values(x)) {
      sum += v;
      sq += v * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GE(lo, 0.0) << dtype_name(t);
    EXPECT_LT(hi, 1.0) << dtype_name(t);  // never `high`, even after rounding to bf16
    EXPECT_NEAR(sum / n, 0.5, 0.01) << dtype_name(t);
    EXPECT_NEAR(sq / n - 0.25, 1.0 / 12, 0.01) << dtype_name(t);
  }
  // bf16 takes the f32 draw, rounded (or `low` where that rounding reaches `high`).
  Tensor b = Tensor::empty({1000}, DType::kBF16);
  call1("uniform_", {b}, rng(9, 3, "low", 0.0, "high", 1.0));
  for (int64_t i = 0; i < 1000; ++i) {
    float u = philox::uniform_f32(philox::word(9, 3, static_cast<uint64_t>(i)));
    float want = static_cast<float>(BFloat16(u));
    if (want == 1.0f) want = 0.0f;
    ASSERT_EQ(static_cast<float>(b.data<BFloat16>()[i]), want) << i;
  }
}

TEST(UniformTest, DependsOnlyOnSeedOffsetAndIndex) {
  Tensor a = Tensor::empty({100});
  Tensor b = Tensor::empty({10, 10});
  call1("uniform_", {a}, rng(1, 5, "low", 0.0, "high", 1.0));
  call1("uniform_", {b}, rng(1, 5, "low", 0.0, "high", 1.0));
  EXPECT_EQ(values(a), values(b));
  call1("uniform_", {b}, rng(1, 6, "low", 0.0, "high", 1.0));
  EXPECT_NE(values(a), values(b));
  // A non-contiguous output gets element i at its row-major position i.
  Tensor store = Tensor::empty({10, 10});
  call1("uniform_", {store.t()}, rng(1, 5, "low", 0.0, "high", 1.0));
  EXPECT_EQ(values(store.t()), values(a));
}

TEST(NormalTest, ExactStreamAndMoments) {
  const int64_t n = 100000;
  Tensor d = Tensor::empty({n}, DType::kF64);
  call1("normal_", {d}, rng(11, 2, "mean", 3.0, "std", 2.0));
  Tensor f = Tensor::empty({n}, DType::kF32);
  call1("normal_", {f}, rng(11, 2, "mean", 3.0, "std", 2.0));
  Tensor h = Tensor::empty({n}, DType::kF16);
  call1("normal_", {h}, rng(11, 2, "mean", 3.0, "std", 2.0));
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double z = philox::normal(11, 2, static_cast<uint64_t>(i)) * 2.0 + 3.0;
    ASSERT_EQ(d.data<double>()[i], z) << i;
    ASSERT_EQ(f.data<float>()[i], static_cast<float>(z)) << i;
    ASSERT_EQ(static_cast<float>(h.data<Half>()[i]), static_cast<float>(Half(static_cast<float>(z)))) << i;
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / n, 3.0, 0.03);
  EXPECT_NEAR(sq / n - (sum / n) * (sum / n), 4.0, 0.08);
}

TEST(RandintTest, ExactStreamAndRange) {
  for (DType t : {DType::kI64, DType::kI32, DType::kU8}) {
    Tensor x = Tensor::empty({5000}, t);
    const int64_t low = t == DType::kU8 ? 3 : -5, high = t == DType::kU8 ? 250 : 12;
    Attrs a;
    a.set("seed", int64_t{77}).set("offset", int64_t{1}).set("low", low).set("high", high);
    call1("randint_", {x}, a);
    std::vector<double> v = values(x);
    std::vector<int> seen(static_cast<size_t>(high - low), 0);
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t w = philox::word(77, 1, i);
      ASSERT_EQ(v[i], static_cast<double>(low + static_cast<int64_t>(w % static_cast<uint64_t>(high - low))));
      ++seen[static_cast<size_t>(v[i] - low)];
    }
    for (int s : seen) EXPECT_GT(s, 0);
  }
}

TEST(RandomTest, BadInputsThrow) {
  expect_error([] { dispatch("uniform_", {Tensor::empty({2}, DType::kI64)}, rng(0, 0, "low", 0, "high", 1)); },
               "uniform_");
  expect_error([] { dispatch("normal_", {Tensor::empty({2}, DType::kBool)}, rng(0, 0, "mean", 0, "std", 1)); },
               "normal_");
  Attrs a;
  a.set("seed", int64_t{0}).set("offset", int64_t{0}).set("low", int64_t{0}).set("high", int64_t{300});
  expect_error([&] { dispatch("randint_", {Tensor::empty({2}, DType::kU8)}, a); }, "randint_");
  expect_error([&] { dispatch("randint_", {Tensor::empty({2}, DType::kF32)}, a); }, "randint_");
  a.set("high", int64_t{0});
  expect_error([&] { dispatch("randint_", {Tensor::empty({2}, DType::kI64)}, a); }, "randint_");
}

}  // namespace
}  // namespace coppice
