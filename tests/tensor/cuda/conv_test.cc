// CPU parity of im2col, col2im and max_pool2d.
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

struct Geometry {
  std::vector<int64_t> kernel, stride, padding, dilation;
};

const std::vector<Geometry> kGeometries = {
    {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, {{2, 3}, {2, 1}, {0, 1}, {1, 1}}, {{3, 2}, {2, 3}, {1, 0}, {2, 1}},
    {{1, 1}, {1, 1}, {0, 0}, {1, 1}}, {{5, 5}, {3, 3}, {2, 2}, {1, 2}}, {{4, 4}, {4, 4}, {0, 0}, {1, 1}},
};

Attrs conv_attrs(const Geometry& g) {
  Attrs a;
  a.set("kernel", g.kernel).set("stride", g.stride).set("padding", g.padding).set("dilation", g.dilation);
  return a;
}

std::string describe(const Geometry& g) {
  return str_cat("k", g.kernel[0], "x", g.kernel[1], " s", g.stride[0], "x", g.stride[1], " p", g.padding[0], "x",
                 g.padding[1], " d", g.dilation[0], "x", g.dilation[1]);
}

TEST(CudaConvTest, Im2colEveryDtype) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    for (const Geometry& g : kGeometries) {
      expect_parity("im2col", {random({2, 3, 11, 13}, t, 61)}, conv_attrs(g), 0, 0,
                    str_cat(dtype_name(t), " ", describe(g)));
    }
  }
  // A non-contiguous input and an empty batch.
  expect_parity("im2col", {random({3, 2, 9, 8}, DType::kF32, 62)}, conv_attrs(kGeometries[0]), 0, 0, "permuted",
                [](size_t, const Tensor& x) { return x.transpose(0, 1); });
  expect_parity("im2col", {Tensor::empty({0, 3, 5, 5})}, conv_attrs(kGeometries[0]), 0, 0, "empty");
}

TEST(CudaConvTest, Col2imSumsInTheCpuOrder) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    for (const Geometry& g : kGeometries) {
      const int64_t h = 11, w = 13;
      const int64_t oh = (h + 2 * g.padding[0] - g.dilation[0] * (g.kernel[0] - 1) - 1) / g.stride[0] + 1;
      const int64_t ow = (w + 2 * g.padding[1] - g.dilation[1] * (g.kernel[1] - 1) - 1) / g.stride[1] + 1;
      Attrs a = conv_attrs(g);
      a.set("size", std::vector<int64_t>{h, w});
      Tensor cols = random({2, 3 * g.kernel[0] * g.kernel[1], oh * ow}, t, 63);
      // Same additions in the same order in the compute type: bit-exact.
      expect_parity("col2im", {cols}, a, 0, 0, str_cat(dtype_name(t), " ", describe(g)));
    }
  }
  Attrs a = conv_attrs(kGeometries[0]);
  a.set("size", std::vector<int64_t>{4, 4});
  expect_error([&] { dispatch("col2im", {Tensor::empty({1, 9, 5}, TensorOptions(gpu()))}, a); }, "col2im");
}

TEST(CudaPoolTest, MaxPoolWithTiesNaNAndPadding) {
  COPPICE_REQUIRE_GPU();
  struct Pool {
    std::vector<int64_t> kernel, stride, padding;
  };
  const std::vector<Pool> pools = {{{2, 2}, {2, 2}, {0, 0}},
                                   {{3, 3}, {1, 1}, {1, 1}},
                                   {{3, 2}, {2, 1}, {1, 0}},
                                   {{1, 1}, {1, 1}, {0, 0}},
                                   {{4, 3}, {3, 2}, {2, 1}}};
  for (DType t : floating_dtypes()) {
    std::vector<double> v = noise(2 * 3 * 10 * 9, 64, 0, 4);
    for (double& x : v) x = std::floor(x);  // many ties
    v[5] = kNaN;
    v[6] = kNaN;
    v[100] = -kInf;
    v[200] = kInf;
    Tensor x = make({2, 3, 10, 9}, v, t);
    for (const Pool& p : pools) {
      Attrs a;
      a.set("kernel", p.kernel).set("stride", p.stride).set("padding", p.padding);
      expect_parity("max_pool2d", {x}, a, 0, 0, str_cat(dtype_name(t), " k", p.kernel[0], "x", p.kernel[1]));
    }
    // All -inf planes: the first in-image position wins.
    Attrs a;
    a.set("kernel", std::vector<int64_t>{3, 3})
        .set("stride", std::vector<int64_t>{2, 2})
        .set("padding", std::vector<int64_t>{1, 1});
    expect_parity("max_pool2d", {make({1, 1, 4, 4}, std::vector<double>(16, -kInf), t)}, a, 0, 0, "all -inf");
  }
  Attrs bad;
  bad.set("kernel", std::vector<int64_t>{2, 2})
      .set("stride", std::vector<int64_t>{1, 1})
      .set("padding", std::vector<int64_t>{2, 0});
  expect_error([&] { dispatch("max_pool2d", {Tensor::empty({1, 1, 5, 5}, TensorOptions(gpu()))}, bad); }, "padding");
}

}  // namespace
}  // namespace coppice
