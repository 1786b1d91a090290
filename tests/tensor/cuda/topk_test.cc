// CPU parity of topk: values and indices equal, ties by lower index, NaN largest.
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Attrs topk_attrs(int64_t k, bool largest) {
  Attrs a;
  a.set("k", k).set("largest", largest);
  return a;
}

TEST(CudaTopkTest, EveryDtypeWithTies) {
  COPPICE_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{1, 1}, {1, 1000}, {7, 33}, {64, 5}, {3, 4097}, {1, 100000}};
  for (DType t : all_dtypes()) {
    for (const Shape& s : shapes) {
      // Few distinct values: ties everywhere.
      std::vector<double> v = noise(shape_numel(s), 101, -4, 4);
      for (double& x : v) x = t == DType::kBool ? (x > 0) : (t == DType::kU8 ? std::floor(std::abs(x)) : std::floor(x));
      Tensor x = make(s, v, t);
      for (int64_t k : {int64_t{0}, int64_t{1}, std::min<int64_t>(5, s[1]), s[1]}) {
        for (bool largest : {true, false}) {
          expect_parity("topk", {x}, topk_attrs(k, largest), 0, 0,
                        str_cat(dtype_name(t), " ", shape_to_string(s), " k=", k, " largest=", largest));
        }
      }
    }
  }
}

TEST(CudaTopkTest, NaNInfAndSignedZeros) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    Tensor x = make({2, 10}, {0.0,  -0.0, kNaN, 1, kInf,  -kInf, kNaN, -0.0, 0.0,  1,  //
                              -0.0, 0.0,  2,    2, -kInf, 5,     0.0,  -0.0, kInf, kNaN},
                    t);
    for (int64_t k : {1, 4, 10}) {
      for (bool largest : {true, false}) {
        expect_parity("topk", {x}, topk_attrs(k, largest), 0, 0, str_cat(dtype_name(t), " k=", k, " l=", largest));
      }
    }
  }
}

TEST(CudaTopkTest, RandomFloatsNonContiguousAndErrors) {
  COPPICE_REQUIRE_GPU();
  Tensor x = random({300, 200}, DType::kF32, 102);
  expect_parity("topk", {x}, topk_attrs(17, true), 0, 0, "transposed", [](size_t, const Tensor& a) { return a.t(); });
  expect_parity("topk", {random({0, 5}, DType::kF32, 103)}, topk_attrs(2, true), 0, 0, "no rows");
  Tensor g = Tensor::empty({2, 3}, TensorOptions(gpu()));
  expect_error([&] { dispatch("topk", {g}, topk_attrs(4, true)); }, "out of range");
}

}  // namespace
}  // namespace coppice
