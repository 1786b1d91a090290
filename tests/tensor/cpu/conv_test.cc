// im2col, col2im and max_pool2d against direct reference loops.
#include <cmath>

#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::call1;
using testing::expect_error;
using testing::expect_values;
using testing::iota;
using testing::kInf;
using testing::kNaN;
using testing::make;
using testing::noise;
using testing::values;

struct Geo {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

Attrs conv_attrs(const Geo& g) {
  Attrs a;
  a.set("kernel", std::vector<int64_t>{g.kh, g.kw});
  a.set("stride", std::vector<int64_t>{g.sh, g.sw});
  a.set("padding", std::vector<int64_t>{g.ph, g.pw});
  a.set("dilation", std::vector<int64_t>{g.dh, g.dw});
  return a;
}

std::vector<double> im2col_reference(const std::vector<double>& x, int64_t n, int64_t c, int64_t h, int64_t w,
                                     const Geo& g, int64_t* oh_out, int64_t* ow_out) {
  const int64_t oh = (h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  const int64_t ow = (w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  std::vector<double> cols;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              int64_t y = oy * g.sh - g.ph + i * g.dh, xx = ox * g.sw - g.pw + j * g.dw;
              bool in = y >= 0 && y < h && xx >= 0 && xx < w;
              cols.push_back(in ? x[((b * c + ch) * h + y) * w + xx] : 0.0);
            }
  *oh_out = oh;
  *ow_out = ow;
  return cols;
}

const Geo kGeos[] = {
    {3, 3, 1, 1, 1, 1, 1, 1}, {2, 3, 2, 1, 0, 1, 1, 1}, {3, 2, 2, 3, 2, 1, 2, 1}, {1, 1, 1, 1, 0, 0, 1, 1}};

TEST(Im2colTest, MatchesReference) {
  const int64_t n = 2, c = 3, h = 7, w = 6;
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16, DType::kI64}) {
    for (const Geo& g : kGeos) {
      Tensor x = make({n, c, h, w}, noise(n * c * h * w, 31, -4, 4), t);
      if (t == DType::kI64) x = make({n, c, h, w}, values(iota({n, c, h, w})), t);
      int64_t oh = 0, ow = 0;
      std::vector<double> want = im2col_reference(values(x), n, c, h, w, g, &oh, &ow);
      Tensor cols = call1("im2col", {x}, conv_attrs(g));
      EXPECT_EQ(cols.shape(), (Shape{n, c * g.kh * g.kw, oh * ow}));
      EXPECT_EQ(cols.dtype(), t);
      expect_values(cols, want, 0, 0, str_cat(dtype_name(t), " kernel ", g.kh, "x", g.kw));
    }
  }
}

TEST(Im2colTest, HandExample) {
  // 1x1x3x3 image 0..8, 2x2 kernel, stride 1, no padding: four 2x2 windows.
  Tensor cols = call1("im2col", {iota({1, 1, 3, 3})}, conv_attrs({2, 2, 1, 1, 0, 0, 1, 1}));
  expect_values(cols, {0, 1, 3, 4, 1, 2, 4, 5, 3, 4, 6, 7, 4, 5, 7, 8});
}

TEST(Col2imTest, IsTheAdjointOfIm2col) {
  const int64_t n = 2, c = 3, h = 7, w = 6;
  for (const Geo& g : kGeos) {
    Tensor x = make({n, c, h, w}, noise(n * c * h * w, 32), DType::kF64);
    Tensor cols = call1("im2col", {x}, conv_attrs(g));
    Tensor y = make(cols.shape(), noise(cols.numel(), 33), DType::kF64);
    Attrs a = conv_attrs(g);
    a.set("size", std::vector<int64_t>{h, w});
    Tensor back = call1("col2im", {y}, a);
    EXPECT_EQ(back.shape(), (Shape{n, c, h, w}));
    // <im2col(x), y> == <x, col2im(y)>
    std::vector<double> cv = values(cols), yv = values(y), xv = values(x), bv = values(back);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < cv.size(); ++i) lhs += cv[i] * yv[i];
    for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * bv[i];
    EXPECT_NEAR(lhs, rhs, 1e-10);
  }
}

TEST(Col2imTest, SumsOverlapsInEveryFloatingDtype) {
  // 3x3 image, 2x2 kernel, stride 1: the centre pixel is in all four windows.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor ones = make({1, 4, 4}, std::vector<double>(16, 1.0), t);
    Attrs a = conv_attrs({2, 2, 1, 1, 0, 0, 1, 1});
    a.set("size", std::vector<int64_t>{3, 3});
    Tensor x = call1("col2im", {ones}, a);
    EXPECT_EQ(x.dtype(), t);
    expect_values(x, {1, 2, 1, 2, 4, 2, 1, 2, 1});
  }
}

TEST(Col2imTest, BadShapesThrow) {
  Attrs a = conv_attrs({2, 2, 1, 1, 0, 0, 1, 1});
  a.set("size", std::vector<int64_t>{3, 3});
  expect_error([&] { dispatch("col2im", {Tensor::empty({1, 4, 5})}, a); }, "col2im");
  expect_error([&] { dispatch("col2im", {Tensor::empty({1, 3, 4})}, a); }, "col2im");
  expect_error([&] { dispatch("im2col", {Tensor::empty({1, 1, 1, 1})}, a); }, "im2col");
  expect_error([&] { dispatch("im2col", {Tensor::empty({1, 3, 3})}, a); }, "im2col");
}

Attrs pool_attrs(int64_t k, int64_t s, int64_t p) {
  Attrs a;
  a.set("kernel", std::vector<int64_t>{k, k});
  a.set("stride", std::vector<int64_t>{s, s});
  a.set("padding", std::vector<int64_t>{p, p});
  return a;
}

TEST(MaxPoolTest, MatchesReference) {
  const int64_t n = 2, c = 2, h = 9, w = 8;
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (auto [k, s, p] : {std::tuple<int64_t, int64_t, int64_t>{2, 2, 0}, {3, 2, 1}, {3, 1, 1}, {2, 1, 1}}) {
      Tensor x = make({n, c, h, w}, noise(n * c * h * w, 41, -5, 5), t);
      std::vector<double> xv = values(x);
      const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
      std::vector<double> wv, wi;
      for (int64_t pl = 0; pl < n * c; ++pl)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            double best = -kInf;
            int64_t at = -1;
            for (int64_t i = 0; i < k; ++i)
              for (int64_t j = 0; j < k; ++j) {
                int64_t y = oy * s - p + i, xx = ox * s - p + j;
                if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
                double v = xv[pl * h * w + y * w + xx];
                if (at < 0 || v > best) {
                  best = v;
                  at = y * w + xx;
                }
              }
            wv.push_back(best);
            wi.push_back(static_cast<double>(at));
          }
      std::vector<Tensor> out = dispatch("max_pool2d", {x}, pool_attrs(k, s, p));
      ASSERT_EQ(out.size(), 2u);
      EXPECT_EQ(out[0].shape(), (Shape{n, c, oh, ow}));
      EXPECT_EQ(out[1].dtype(), DType::kI64);
      expect_values(out[0], wv);
      expect_values(out[1], wi);
    }
  }
}

TEST(MaxPoolTest, TiesNaNAndPaddingNeverWins) {
  Tensor x = make({1, 1, 2, 2}, {-7, -7, -7, -7});
  std::vector<Tensor> out = dispatch("max_pool2d", {x}, pool_attrs(2, 1, 1));  // padding 1: 3x3 windows
  expect_values(out[0], std::vector<double>(9, -7));
  expect_values(out[1], {0, 0, 1, 0, 0, 1, 2, 2, 3});  // first in-image position of each window
  Tensor y = make({1, 1, 2, 2}, {1, kNaN, 3, 2});
  std::vector<Tensor> o2 = dispatch("max_pool2d", {y}, pool_attrs(2, 2, 0));
  expect_values(o2[0], {kNaN});
  expect_values(o2[1], {1});
  Tensor z = make({1, 1, 1, 2}, {-kInf, -kInf});
  std::vector<Tensor> o3 = dispatch("max_pool2d", {z}, pool_attrs(2, 1, 1));
  for (double i : values(o3[1])) EXPECT_GE(i, 0);
}

TEST(MaxPoolTest, BadInputsThrow) {
  expect_error([] { dispatch("max_pool2d", {Tensor::empty({1, 1, 4, 4})}, pool_attrs(2, 2, 2)); }, "max_pool2d");
  expect_error(
      [] {
        dispatch("max_pool2d", {Tensor::empty({1, 1, 4, 4}, DType::kI64)}, pool_attrs(2, 2, 0));
      },
      "max_pool2d");
  expect_error([] { dispatch("max_pool2d", {Tensor::empty({1, 4, 4})}, pool_attrs(2, 2, 0)); }, "max_pool2d");
  expect_error([] { dispatch("max_pool2d", {Tensor::empty({1, 1, 1, 1})}, pool_attrs(3, 1, 0)); }, "max_pool2d");
}

}  // namespace
}  // namespace coppice
