// CPU parity of uniform_, normal_ and randint_: the same Philox stream on both.
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

// Runs `op` in place on a CPU tensor and on a GPU tensor (through `view`), compares.
void expect_fill_parity(
    std::string_view op, DType t, const Shape& shape, const Attrs& attrs, double rtol, double atol,
    const std::function<Tensor(const Tensor&)>& view = [](const Tensor& x) { return x; }) {
  Tensor c = Tensor::empty(shape, t), g = Tensor::empty(shape, TensorOptions(t, gpu()));
  c.zero_();
  g.zero_();
  dispatch(op, {view(c)}, attrs);
  dispatch(op, {view(g)}, attrs);
  expect_match(g, c, rtol, atol, str_cat(op, " ", dtype_name(t), " ", shape_to_string(shape)));
}

Attrs stream(int64_t seed, int64_t offset) {
  Attrs a;
  a.set("seed", seed).set("offset", offset);
  return a;
}

TEST(CudaRandomTest, UniformIsBitExact) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0, 1}, {-3, 5}, {0.999, 1}, {2, 2}}) {
      Attrs a = stream(12345, 7);
      a.set("low", lo).set("high", hi);
      expect_fill_parity("uniform_", t, {1001, 37}, a, 0, 0);
      expect_fill_parity("uniform_", t, {37, 41}, a, 0, 0, [](const Tensor& x) { return x.t(); });
    }
    // Seeds and offsets with the high words set (u64 held in i64).
    Attrs a = stream(-1, static_cast<int64_t>(0x8000000000000001ull));
    a.set("low", 0.0).set("high", 1.0);
    expect_fill_parity("uniform_", t, {5000}, a, 0, 0);
  }
}

TEST(CudaRandomTest, NormalMatchesToRounding) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    Attrs a = stream(99, 3);
    a.set("mean", 0.5).set("std", 2.0);
    // CUDA's f64 log/sin/cos are within an ulp or two of glibc's.
    const Tol tol = t == DType::kF64 ? Tol{1e-14, 1e-14} : math_tol(t);
    expect_fill_parity("normal_", t, {777, 13}, a, tol.rtol, tol.atol);
    expect_fill_parity("normal_", t, {13, 20}, a, tol.rtol, tol.atol, [](const Tensor& x) { return x.t(); });
  }
}

TEST(CudaRandomTest, RandintIsExact) {
  COPPICE_REQUIRE_GPU();
  for (DType t : {DType::kI32, DType::kI64, DType::kU8}) {
    for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{{0, 10}, {-5, 6}, {0, 256}, {3, 4}}) {
      if (t == DType::kU8 && lo < 0) continue;
      Attrs a = stream(4242, 1);
      a.set("low", lo).set("high", hi);
      expect_fill_parity("randint_", t, {3001, 3}, a, 0, 0);
    }
  }
  Attrs wide = stream(1, 2);
  wide.set("low", int64_t{-(int64_t{1} << 40)}).set("high", int64_t{1} << 40);
  expect_fill_parity("randint_", DType::kI64, {4096}, wide, 0, 0);
  Attrs bad = stream(1, 2);
  bad.set("low", int64_t{0}).set("high", int64_t{300});
  expect_error([&] { dispatch("randint_", {Tensor::empty({4}, TensorOptions(DType::kU8, gpu()))}, bad); },
               "does not fit");
}

TEST(CudaRandomTest, EmptyOutputs) {
  COPPICE_REQUIRE_GPU();
  Attrs a = stream(1, 1);
  a.set("low", 0.0).set("high", 1.0);
  expect_fill_parity("uniform_", DType::kF32, {0, 7}, a, 0, 0);
}

}  // namespace
}  // namespace coppice
