// Tests for tensor/ops_nn.cc: softmax, cross-entropy, layer norm, embedding,
// dropout, convolution, pooling and im2col/col2im, against double-precision
// reference loops.
#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor values(const Shape& shape, double seed, double scale = 1.0, DType dtype = DType::kF64) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(seed + 1.3 * static_cast<double>(i));
  return from_vector<double>(v, shape, dtype);
}

// Softmax of each row of a [rows, n] matrix, in double.
std::vector<double> ref_softmax_rows(const std::vector<double>& x, int64_t rows, int64_t n, bool log_form) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[r * n + j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * n + j] - m);
    for (int64_t j = 0; j < n; ++j) {
      out[r * n + j] = log_form ? x[r * n + j] - m - std::log(s) : std::exp(x[r * n + j] - m) / s;
    }
  }
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(Softmax, RowsAgainstReference) {
  Tensor x = values({4, 5}, 1, 3.0);
  expect_near(vals(softmax(x, 1)), ref_softmax_rows(vals(x), 4, 5, false), 1e-14);
  expect_near(vals(log_softmax(x, -1)), ref_softmax_rows(vals(x), 4, 5, true), 1e-13);
  // Along dim 0: the softmax of the transpose, transposed.
  expect_near(vals(softmax(x, 0).t()), ref_softmax_rows(vals(x.t()), 5, 4, false), 1e-14);
  expect_near(vals(log_softmax(x.t(), 1)), ref_softmax_rows(vals(x.t()), 5, 4, true), 1e-13);
  // A middle dim of a 3-D tensor sums to one.
  Tensor s3 = softmax(values({2, 3, 4}, 2, 5.0), 1);
  EXPECT_LT(max_abs_diff(sum(s3, {1}), ones({2, 4}, DType::kF64)), 1e-14);
}

TEST(Softmax, NumericallyStable) {
  Tensor x = from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  std::vector<double> want = ref_softmax_rows(vals(x), 2, 3, false);
  expect_near(vals(softmax(x, 1)), want, 1e-6);
  std::vector<double> lwant = ref_softmax_rows(vals(x), 2, 3, true);
  expect_near(vals(log_softmax(x, 1)), lwant, 1e-5);
  for (double v : vals(log_softmax(from_vector<float>({0, -200}), 0))) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(vals(log_softmax(from_vector<float>({0, -200}), 0))[1], -200.0, 1e-4);
}

TEST(Softmax, SixteenBitComputesInF32) {
  Tensor x = values({3, 50}, 3, 4.0);
  for (DType t : {DType::kBF16, DType::kF16}) {
    Tensor x16 = x.to(t);
    Tensor s = softmax(x16, 1);
    EXPECT_EQ(s.dtype(), t);
    std::vector<double> want = ref_softmax_rows(vals(x16), 3, 50, false);
    // One rounding of the result: relative error below 2^-8 (bf16) or 2^-11 (f16),
    // or half a unit of f16's subnormals (2^-25) below 2^-14.
    std::vector<double> got = vals(s);
    double rel = t == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
    double floor = t == DType::kBF16 ? 0.0 : std::ldexp(1.0, -25);
    for (size_t i = 0; i < got.size(); ++i) { EXPECT_NEAR(got[i], want[i], want[i] * rel + floor) << dtype_name(t); }
  }
  EXPECT_ERROR_NAMING(softmax(zeros({2}, DType::kI64), 0), "softmax: input must be floating-point, got i64");
  EXPECT_ERROR_NAMING(log_softmax(zeros({2, 3}), 2), "log_softmax: dim 2 is out of range");
  EXPECT_EQ(softmax(zeros({0, 3}), 1).shape(), (Shape{0, 3}));
}

// Cross-entropy in double, as PyTorch defines it.
double ref_cross_entropy(const std::vector<double>& logits, const std::vector<int64_t>& target, int64_t c, double eps,
                         int64_t ignore, Reduction reduction, std::vector<double>* per_row) {
  int64_t n = static_cast<int64_t>(target.size());
  std::vector<double> lp = ref_softmax_rows(logits, n, c, true);
  double total = 0;
  int64_t count = 0;
  per_row->assign(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore) continue;
    double smooth = 0;
    for (int64_t j = 0; j < c; ++j) smooth -= lp[i * c + j] / static_cast<double>(c);
    double loss = (1 - eps) * -lp[i * c + target[i]] + eps * smooth;
    (*per_row)[i] = loss;
    total += loss;
    ++count;
  }
  if (reduction == Reduction::kSum) return total;
  return total / static_cast<double>(count);
}

TEST(CrossEntropy, HandComputed) {
  // Row 0: logits [0, 0] -> loss log 2. Row 1: [ln 3, 0] target 0 -> -log(3/4).
  Tensor logits = from_vector<double>({0, 0, std::log(3.0), 0}, {2, 2});
  Tensor target = from_vector<int64_t>({1, 0});
  EXPECT_NEAR(cross_entropy(logits, target).item(), (std::log(2.0) - std::log(0.75)) / 2, 1e-14);
  CrossEntropyOptions sum_opts;
  sum_opts.reduction = Reduction::kSum;
  EXPECT_NEAR(cross_entropy(logits, target, sum_opts).item(), std::log(2.0) - std::log(0.75), 1e-14);
}

TEST(CrossEntropy, AgainstReferenceWithSmoothingIgnoreAndReductions) {
  const int64_t n = 6, c = 5;
  Tensor logits = values({n, c}, 4, 3.0);
  std::vector<int64_t> t = {0, 4, -100, 2, 3, -100};
  Tensor target = from_vector<int64_t>(t);
  for (double eps : {0.0, 0.1, 1.0}) {
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      CrossEntropyOptions o;
      o.label_smoothing = eps;
      o.reduction = r;
      std::vector<double> rows;
      double want = ref_cross_entropy(vals(logits), t, c, eps, -100, r, &rows);
      Tensor got = cross_entropy(logits, target, o);
      EXPECT_EQ(got.dtype(), DType::kF64);
      if (r == Reduction::kNone) {
        ASSERT_EQ(got.shape(), (Shape{n}));
        expect_near(vals(got), rows, 1e-13);  // ignored rows are 0
      } else {
        EXPECT_EQ(got.dim(), 0);
        EXPECT_NEAR(got.item(), want, 1e-13) << "eps " << eps;
      }
    }
  }
  // A custom ignore_index; mean divides by the 5 rows not ignored.
  CrossEntropyOptions o;
  o.ignore_index = 4;
  std::vector<int64_t> t2 = {0, 4, 1, 2, 3, 1};
  std::vector<double> rows;
  double want = ref_cross_entropy(vals(logits), t2, c, 0.0, 4, Reduction::kMean, &rows);
  EXPECT_NEAR(cross_entropy(logits, from_vector<int64_t>(t2), o).item(), want, 1e-13);
  // Every target ignored: mean is 0 / 0.
  EXPECT_TRUE(std::isnan(cross_entropy(logits, full({n}, -100, DType::kI64)).item()));
  // 16-bit logits give a 16-bit loss computed in f32.
  Tensor lb = cross_entropy(logits.to(DType::kBF16), from_vector<int64_t>({0, 4, 1, 2, 3, 1}));
  EXPECT_EQ(lb.dtype(), DType::kBF16);
  double wb = ref_cross_entropy(vals(logits.to(DType::kBF16)), {0, 4, 1, 2, 3, 1}, c, 0, -100, Reduction::kMean, &rows);
  EXPECT_NEAR(lb.item(), wb, std::abs(wb) / 128);
}

TEST(CrossEntropy, Errors) {
  Tensor logits = zeros({3, 4});
  EXPECT_ERROR_NAMING(cross_entropy(logits, zeros({3})), "cross_entropy: target must be i64, got f32");
  EXPECT_ERROR_NAMING(cross_entropy(logits, zeros({2}, DType::kI64)), "cross_entropy: target must be [3]");
  EXPECT_ERROR_NAMING(cross_entropy(zeros({3}), zeros({3}, DType::kI64)), "cross_entropy: logits must be 2-D");
  EXPECT_ERROR_NAMING(cross_entropy(zeros({3, 4}, DType::kI32), zeros({3}, DType::kI64)),
                      "cross_entropy: logits must be floating-point");
  EXPECT_ERROR_NAMING(cross_entropy(logits, from_vector<int64_t>({0, 4, 1})),
                      "cross_entropy: a target is not a class index in [0, 4)");
  EXPECT_ERROR_NAMING(cross_entropy(logits, from_vector<int64_t>({0, -1, 1})), "cross_entropy");
  CrossEntropyOptions o;
  o.label_smoothing = 1.5;
  EXPECT_ERROR_NAMING(cross_entropy(logits, zeros({3}, DType::kI64), o),
                      "cross_entropy: label_smoothing must be in [0, 1], got 1.5");
}

TEST(LayerNorm, AgainstReference) {
  Tensor x = values({2, 3, 4}, 5, 2.0);
  Tensor w = values({3, 4}, 6), b = values({3, 4}, 7);
  std::vector<double> xv = vals(x), wv = vals(w), bv = vals(b);
  for (int variant = 0; variant < 3; ++variant) {
    Tensor y = variant == 0 ? layer_norm(x, {3, 4}, w, b, 1e-5)
                            : (variant == 1 ? layer_norm(x, {3, 4}) : layer_norm(x, {3, 4}, w, Tensor(), 0.1));
    double eps = variant == 2 ? 0.1 : 1e-5;
    std::vector<double> got = vals(y);
    for (int64_t i = 0; i < 2; ++i) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < 12; ++j) mu += xv[i * 12 + j] / 12;
      for (int64_t j = 0; j < 12; ++j) var += (xv[i * 12 + j] - mu) * (xv[i * 12 + j] - mu) / 12;  // biased
      for (int64_t j = 0; j < 12; ++j) {
        double want = (xv[i * 12 + j] - mu) / std::sqrt(var + eps);
        if (variant != 1) want *= wv[j];
        if (variant == 0) want += bv[j];
        EXPECT_NEAR(got[i * 12 + j], want, 1e-12) << variant;
      }
    }
  }
  // Over the last dim only, with a non-contiguous input.
  Tensor xt = values({4, 3}, 8).t();
  Tensor y = layer_norm(xt, {4});
  EXPECT_LT(max_abs_diff(mean(y, {1}), zeros({3}, DType::kF64)), 1e-12);
  EXPECT_LT(max_abs_diff(mean(mul(y, y), {1}), full({3}, 1.0, DType::kF64)), 1e-4);
  // bf16 runs in f32 and keeps its dtype.
  Tensor yb = layer_norm(x.to(DType::kBF16), {4}, w.select(0, 0).to(DType::kBF16), b.select(0, 0).to(DType::kBF16));
  EXPECT_EQ(yb.dtype(), DType::kBF16);
  Tensor yr = layer_norm(x.to(DType::kBF16).to(DType::kF64), {4}, w.select(0, 0).to(DType::kBF16).to(DType::kF64),
                         b.select(0, 0).to(DType::kBF16).to(DType::kF64));
  EXPECT_LT(max_abs_diff(yb, yr), 0.02);
}

TEST(LayerNorm, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_ERROR_NAMING(layer_norm(x, {4}), "layer_norm: input [2, 3] does not end in normalized_shape [4]");
  EXPECT_ERROR_NAMING(layer_norm(x, {1, 2, 3}), "layer_norm: input [2, 3] does not end in normalized_shape");
  EXPECT_ERROR_NAMING(layer_norm(x, {}), "layer_norm: normalized_shape must not be empty");
  EXPECT_ERROR_NAMING(layer_norm(x, {3}, zeros({4})), "layer_norm: weight must have shape [3], got [4]");
  EXPECT_ERROR_NAMING(layer_norm(x, {3}, Tensor(), zeros({3}, DType::kF64)), "layer_norm: bias has dtype f64");
  EXPECT_ERROR_NAMING(layer_norm(x, {3}, Tensor(), Tensor(), -1), "layer_norm: eps must be non-negative");
  EXPECT_ERROR_NAMING(layer_norm(zeros({2, 3}, DType::kI64), {3}), "layer_norm: input must be floating-point");
}

// add_layer_norm on the CPU is add then layer_norm: the same values, bit for
// bit, in f64 and bf16, affine or not; h is the sum.
TEST(AddLayerNorm, IsAddThenLayerNorm) {
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16}) {
    Tensor x = values({2, 3, 8}, 30, 2.0, t), r = values({2, 3, 8}, 31, 1.5, t);
    Tensor w = values({8}, 32, 1.0, t), b = values({8}, 33, 1.0, t);
    const Tensor h = add(x, r);
    for (bool affine : {true, false}) {
      AddLayerNormResult got = affine ? add_layer_norm(x, r, {8}, w, b, 1e-3) : add_layer_norm(x, r, {8});
      const Tensor want = affine ? layer_norm(h, {8}, w, b, 1e-3) : layer_norm(h, {8});
      EXPECT_EQ(got.h.dtype(), t);
      EXPECT_EQ(vals(got.h), vals(h)) << dtype_name(t);
      EXPECT_EQ(vals(got.y), vals(want)) << dtype_name(t) << (affine ? " affine" : "");
    }
    // Over two trailing dims, with a non-contiguous residual.
    Tensor rt = values({2, 8, 3}, 34, 1.0, t).transpose(1, 2);
    AddLayerNormResult two = add_layer_norm(x, rt, {3, 8});
    EXPECT_EQ(vals(two.y), vals(layer_norm(add(x, rt), {3, 8}))) << dtype_name(t);
  }
}

// Its gradient is dh + layer_norm's dx: exactly in f64 (the same sums), and
// within one rounding in bf16, where the fused form rounds the sum once.
TEST(AddLayerNorm, BackwardIsDhPlusLayerNormBackward) {
  Tensor h = values({4, 6}, 40, 2.0), w = values({6}, 41), dy = values({4, 6}, 42), dh = values({4, 6}, 43);
  LayerNormGrads plain = layer_norm_backward(h, {6}, w, dy, true, true);
  LayerNormGrads fused = add_layer_norm_backward(h, {6}, w, dh, dy, true, true);
  EXPECT_EQ(vals(fused.dx), vals(add(dh, plain.dx)));
  EXPECT_EQ(vals(fused.dweight), vals(plain.dweight));
  EXPECT_EQ(vals(fused.dbias), vals(plain.dbias));
  // No dh: layer_norm_backward's; no weight: no dweight.
  EXPECT_EQ(vals(add_layer_norm_backward(h, {6}, w, Tensor(), dy, false, false).dx), vals(plain.dx));
  LayerNormGrads unscaled = add_layer_norm_backward(h, {6}, Tensor(), dh, dy, true, true);
  EXPECT_FALSE(unscaled.dweight.defined());
  EXPECT_EQ(vals(unscaled.dx), vals(add(dh, layer_norm_backward(h, {6}, Tensor(), dy, false, false).dx)));
  const DType bf = DType::kBF16;
  LayerNormGrads low = add_layer_norm_backward(h.to(bf), {6}, w.to(bf), dh.to(bf), dy.to(bf), true, true);
  EXPECT_EQ(low.dx.dtype(), bf);
  Tensor ref = add_layer_norm_backward(h.to(bf).to(DType::kF64), {6}, w.to(bf).to(DType::kF64),
                                       dh.to(bf).to(DType::kF64), dy.to(bf).to(DType::kF64), false, false)
                   .dx;
  EXPECT_LT(max_abs_diff(low.dx, ref), 0.05);
}

TEST(AddLayerNorm, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_ERROR_NAMING(add_layer_norm(x, zeros({3, 2}), {3}),
                      "add_layer_norm: residual [3, 2] f32 must have the input's shape [2, 3] and dtype f32");
  EXPECT_ERROR_NAMING(add_layer_norm(x, zeros({2, 3}, DType::kF64), {3}),
                      "add_layer_norm: residual [2, 3] f64 must have the input's shape");
  EXPECT_ERROR_NAMING(add_layer_norm(x, zeros({2, 3}), {4}),
                      "add_layer_norm: input [2, 3] does not end in normalized_shape [4]");
  EXPECT_ERROR_NAMING(add_layer_norm(x, zeros({2, 3}), {3}, zeros({4})),
                      "add_layer_norm: weight must have shape [3], got [4]");
  EXPECT_ERROR_NAMING(add_layer_norm_backward(x, {3}, Tensor(), zeros({2}), x, true, true),
                      "add_layer_norm_backward: dh [2] f32 must have the input's shape [2, 3]");
  EXPECT_ERROR_NAMING(add_layer_norm_backward(x, {3}, Tensor(), x, zeros({3, 2}), true, true),
                      "add_layer_norm_backward: grad must have the input's shape [2, 3]");
}

TEST(Embedding, PicksRows) {
  Tensor w = values({5, 3}, 9);
  std::vector<double> wv = vals(w);
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2}, {2, 2});
  Tensor e = embedding(w, idx);
  EXPECT_EQ(e.shape(), (Shape{2, 2, 3}));
  std::vector<double> ev = vals(e);
  int64_t rows[4] = {4, 0, 4, 2};
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(ev[i * 3 + j], wv[rows[i] * 3 + j]);
  EXPECT_EQ(vals(embedding(w, from_vector<int32_t>({1}, {1}))), std::vector<double>(wv.begin() + 3, wv.begin() + 6));
  EXPECT_EQ(embedding(w, zeros({0}, DType::kI64)).shape(), (Shape{0, 3}));
  EXPECT_EQ(embedding(w, scalar_tensor(3, DType::kI64)).shape(), (Shape{3}));
  EXPECT_EQ(vals(embedding(w.t().contiguous().t(), idx)), ev);  // non-contiguous weight
  EXPECT_ERROR_NAMING(embedding(w, from_vector<int64_t>({5})), "embedding: an index is out of range for 5 embeddings");
  EXPECT_ERROR_NAMING(embedding(w, from_vector<int64_t>({-1})), "embedding");
  EXPECT_ERROR_NAMING(embedding(w, zeros({2})), "embedding: indices must be an integer tensor, got f32");
  EXPECT_ERROR_NAMING(embedding(zeros({5}), idx), "embedding: weight must be 2-D");
}

TEST(Embedding, BackwardSumsRowsByIndex) {
  Tensor g = values({2, 2, 3}, 4);  // four rows of 3
  std::vector<double> gv = vals(g);
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2}, {2, 2});
  Tensor d = embedding_backward(g, idx, 6);
  EXPECT_EQ(d.shape(), (Shape{6, 3}));
  std::vector<double> dv = vals(d);
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(dv[0 * 3 + j], gv[1 * 3 + j]);
    EXPECT_EQ(dv[1 * 3 + j], 0.0);  // no index names row 1 (nor 3 and 5)
    EXPECT_EQ(dv[2 * 3 + j], gv[3 * 3 + j]);
    EXPECT_DOUBLE_EQ(dv[4 * 3 + j], gv[0 * 3 + j] + gv[2 * 3 + j]);
  }
  EXPECT_ERROR_NAMING(embedding_backward(g, from_vector<int64_t>({4, 0, 6, 2}, {2, 2}), 6),
                      "embedding_backward: index 6 (at position 2) is out of range for dim 0 of size 6");
  EXPECT_ERROR_NAMING(embedding_backward(g, from_vector<int64_t>({4, 0, 1}), 6), "is not indices [3] plus a row");
}

TEST(Dropout, MaskAndScale) {
  Tensor x = ones({20000}, DType::kF32);
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(dropout(x, 0.7, false).is_same(x));
  Generator g1(17), g2(17);
  Tensor y = dropout(x, 0.25, true, g1);
  std::vector<double> yv = vals(y);
  int64_t kept = 0;
  for (double v : yv) {
    ASSERT_TRUE(v == 0.0 || std::abs(v - 1.0 / 0.75) < 1e-6) << v;
    kept += v != 0.0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / 20000, 0.75, 0.015);
  EXPECT_NEAR(mean(y).item(), 1.0, 0.03);           // the scale keeps the expectation
  EXPECT_EQ(vals(dropout(x, 0.25, true, g2)), yv);  // same generator state, same mask
  // 16-bit inputs are scaled in f32 and rounded once.
  Tensor xb = values({1000}, 18, 3.0, DType::kBF16);
  Tensor z = dropout(xb, 0.1, true, g1);
  EXPECT_EQ(z.dtype(), DType::kBF16);
  std::vector<double> xv = vals(xb), zv = vals(z);
  int64_t zeros_seen = 0;
  for (size_t i = 0; i < zv.size(); ++i) {
    if (zv[i] == 0.0 && xv[i] != 0.0) {
      ++zeros_seen;
      continue;
    }
    ASSERT_EQ(zv[i], static_cast<float>(BFloat16(static_cast<float>(xv[i]) * static_cast<float>(1.0 / 0.9)))) << i;
  }
  EXPECT_GT(zeros_seen, 50);
  EXPECT_LT(zeros_seen, 150);
  EXPECT_ERROR_NAMING(dropout(x, 1.0, true), "dropout: p must be in [0, 1), got 1");
  EXPECT_ERROR_NAMING(dropout(x, -0.1, false), "dropout: p must be in [0, 1)");
}

// Direct convolution in double.
std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t sh, int64_t sw, int64_t ph,
                             int64_t pw, int64_t dh, int64_t dw, int64_t* oh_out, int64_t* ow_out) {
  int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  int64_t o = w.size(0), kh = w.size(2), kw = w.size(3);
  int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  std::vector<double> xv = vals(x), wv = vals(w), bv = bias.defined() ? vals(bias) : std::vector<double>(o, 0.0);
  std::vector<double> out(static_cast<size_t>(n * o * oh * ow));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t q = 0; q < o; ++q)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = bv[q];
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                int64_t y = i * sh - ph + u * dh, xx = j * sw - pw + v * dw;
                if (y < 0 || y >= h || xx < 0 || xx >= wd) continue;
                s += xv[((b * c + ch) * h + y) * wd + xx] * wv[((q * c + ch) * kh + u) * kw + v];
              }
          out[((b * o + q) * oh + i) * ow + j] = s;
        }
  *oh_out = oh;
  *ow_out = ow;
  return out;
}

TEST(Conv2d, AgainstDirectConvolution) {
  struct Case {
    Shape x, w;
    int64_t sh, sw, ph, pw, dh, dw;
    bool bias;
  };
  std::vector<Case> cases = {
      {{1, 1, 4, 4}, {1, 1, 3, 3}, 1, 1, 0, 0, 1, 1, false}, {{2, 3, 7, 6}, {4, 3, 3, 2}, 1, 1, 0, 0, 1, 1, true},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, 2, 1, 1, 2, 1, 1, true},  {{1, 2, 9, 9}, {3, 2, 3, 3}, 2, 2, 2, 1, 2, 3, true},
      {{3, 1, 5, 5}, {2, 1, 1, 1}, 3, 3, 0, 0, 1, 1, false},
  };
  for (const Case& k : cases) {
    Tensor x = values(k.x, 10), w = values(k.w, 11);
    Tensor bias = k.bias ? values({k.w[0]}, 12) : Tensor();
    Conv2dOptions o;
    o.stride = {k.sh, k.sw};
    o.padding = {k.ph, k.pw};
    o.dilation = {k.dh, k.dw};
    int64_t oh = 0, ow = 0;
    std::vector<double> want = ref_conv(x, w, bias, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw, &oh, &ow);
    Tensor y = conv2d(x, w, bias, o);
    ASSERT_EQ(y.shape(), (Shape{k.x[0], k.w[0], oh, ow})) << shape_to_string(k.x);
    expect_near(vals(y), want, 1e-12);
  }
  // Hand-computed: a 2x2 box filter over [[1,2,3],[4,5,6],[7,8,9]].
  Tensor img = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  EXPECT_EQ(vals(conv2d(img, ones({1, 1, 2, 2}))), (std::vector<double>{12, 16, 24, 28}));
  // Non-contiguous input, and bf16.
  Tensor x = values({2, 3, 6, 5}, 13), w = values({2, 3, 2, 2}, 14);
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);
  EXPECT_LT(max_abs_diff(conv2d(xt, w), conv2d(x, w)), 1e-12);
  Tensor yb = conv2d(x.to(DType::kBF16), w.to(DType::kBF16));
  EXPECT_EQ(yb.dtype(), DType::kBF16);
  EXPECT_LT(max_abs_diff(yb, conv2d(x.to(DType::kBF16).to(DType::kF64), w.to(DType::kBF16).to(DType::kF64))), 0.05);
}

TEST(Conv2d, Errors) {
  Tensor x = zeros({1, 3, 5, 5}), w = zeros({2, 3, 3, 3});
  EXPECT_ERROR_NAMING(conv2d(zeros({3, 5, 5}), w), "conv2d: input must be 4-D [n, c, h, w], got [3, 5, 5]");
  EXPECT_ERROR_NAMING(conv2d(x, zeros({2, 4, 3, 3})), "conv2d: input has 3 channels but weight expects 4");
  EXPECT_ERROR_NAMING(conv2d(x, zeros({2, 3, 3})), "conv2d: weight must be 4-D");
  EXPECT_ERROR_NAMING(conv2d(x, w, zeros({3})), "conv2d: bias must be [2], got [3]");
  EXPECT_ERROR_NAMING(conv2d(x, zeros({2, 3, 6, 6})), "conv2d: the [6, 6] window");
  EXPECT_ERROR_NAMING(conv2d(x, w, Tensor(), Conv2dOptions{{0, 1}, {0, 0}, {1, 1}}), "conv2d: stride must be positive");
  EXPECT_ERROR_NAMING(conv2d(x, w, Tensor(), Conv2dOptions{{1, 1}, {-1, 0}, {1, 1}}),
                      "conv2d: padding must be non-negative");
  EXPECT_ERROR_NAMING(conv2d(x, w, Tensor(), Conv2dOptions{{1, 1, 1}, {0, 0}, {1, 1}}),
                      "conv2d: stride must have 1 or 2 values");
  EXPECT_ERROR_NAMING(conv2d(x, w.to(DType::kF64)), "conv2d: weight has dtype f64, expected f32");
}

// Max pooling in double: values and flat h*w indices (padding never wins).
void ref_pool(const Tensor& x, int64_t k0, int64_t k1, int64_t s0, int64_t s1, int64_t p0, int64_t p1,
              std::vector<double>* values, std::vector<double>* indices, Shape* shape) {
  int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  int64_t oh = (h + 2 * p0 - k0) / s0 + 1, ow = (w + 2 * p1 - k1) / s1 + 1;
  std::vector<double> xv = vals(x);
  values->clear();
  indices->clear();
  for (int64_t b = 0; b < n * c; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -INFINITY;
        int64_t at = -1;
        for (int64_t u = 0; u < k0; ++u)
          for (int64_t v = 0; v < k1; ++v) {
            int64_t y = i * s0 - p0 + u, z = j * s1 - p1 + v;
            if (y < 0 || y >= h || z < 0 || z >= w) continue;
            double val = xv[(b * h + y) * w + z];
            if (at < 0 || val > best) best = val, at = y * w + z;
          }
        values->push_back(best);
        indices->push_back(static_cast<double>(at));
      }
  *shape = {n, c, oh, ow};
}

TEST(MaxPool2d, AgainstReference) {
  Tensor x = values({2, 3, 7, 6}, 15);
  struct Case {
    std::vector<int64_t> kernel, stride, padding;
    int64_t k0, k1, s0, s1, p0, p1;
  };
  std::vector<Case> cases = {
      {{2, 2}, {}, {0, 0}, 2, 2, 2, 2, 0, 0},  // stride defaults to the kernel
      {{3, 3}, {1, 1}, {1, 1}, 3, 3, 1, 1, 1, 1},
      {{3, 2}, {2, 1}, {1, 0}, 3, 2, 2, 1, 1, 0},
      {{3}, {2}, {1}, 3, 3, 2, 2, 1, 1},  // one value for both dims
  };
  for (const Case& k : cases) {
    std::vector<double> want_v, want_i;
    Shape shape;
    ref_pool(x, k.k0, k.k1, k.s0, k.s1, k.p0, k.p1, &want_v, &want_i, &shape);
    ValuesIndices got = max_pool2d_with_indices(x, k.kernel, k.stride, k.padding);
    ASSERT_EQ(got.values.shape(), shape);
    EXPECT_EQ(got.indices.dtype(), DType::kI64);
    EXPECT_EQ(vals(got.values), want_v);
    EXPECT_EQ(vals(got.indices), want_i);
    EXPECT_EQ(vals(max_pool2d(x, k.kernel, k.stride, k.padding)), want_v);
  }
  Tensor img = from_vector<float>({1, 5, 2, 0, 3, 4, 9, 8, 7, 6, 1, 2, 0, 0, 3, 3}, {1, 1, 4, 4});
  ValuesIndices p = max_pool2d_with_indices(img, {2, 2});
  EXPECT_EQ(vals(p.values), (std::vector<double>{5, 9, 7, 3}));
  EXPECT_EQ(vals(p.indices), (std::vector<double>{1, 6, 8, 14}));
  EXPECT_EQ(max_pool2d(x.to(DType::kBF16), {2, 2}).dtype(), DType::kBF16);
  EXPECT_EQ(vals(max_pool2d(x.transpose(2, 3).contiguous().transpose(2, 3), {2, 2})), vals(max_pool2d(x, {2, 2})));
}

TEST(MaxPool2d, Errors) {
  Tensor x = zeros({1, 1, 4, 4});
  EXPECT_ERROR_NAMING(max_pool2d(zeros({4, 4}), {2, 2}), "max_pool2d: input must be 4-D");
  EXPECT_ERROR_NAMING(max_pool2d(x, {2, 2}, {1, 1}, {2, 2}), "max_pool2d: padding [2, 2] must be at most half");
  EXPECT_ERROR_NAMING(max_pool2d(x, {5, 5}), "max_pool2d: the [5, 5] window");
  EXPECT_ERROR_NAMING(max_pool2d(x, {0, 2}), "max_pool2d: kernel must be positive");
  EXPECT_ERROR_NAMING(max_pool2d(x, {}), "max_pool2d: kernel must have 1 or 2 values");
}

TEST(Im2Col, LayoutAndAdjointCol2Im) {
  Tensor img = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor cols = im2col(img, {2, 2}, {});
  EXPECT_EQ(cols.shape(), (Shape{1, 4, 4}));
  // Row r = (kernel row, kernel col); column = output position.
  EXPECT_EQ(vals(cols), (std::vector<double>{1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9}));
  // col2im sums overlaps: each pixel counted once per window covering it.
  Tensor back = col2im(ones({1, 4, 4}), {1, 1, 3, 3}, {2, 2}, {});
  EXPECT_EQ(vals(back), (std::vector<double>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  EXPECT_EQ(vals(col2im(ones({1, 4, 4}), {3, 3}, {2, 2}, {})), vals(back));
  // col2im is im2col's adjoint: <im2col(x), y> = <x, col2im(y)>.
  Conv2dOptions o;
  o.stride = {2, 1};
  o.padding = {1, 2};
  o.dilation = {2, 1};
  Tensor x = values({2, 3, 7, 6}, 16);
  Tensor c = im2col(x, {3, 2}, o);
  Tensor y = values(c.shape(), 17);
  Tensor xt = col2im(y, x.shape(), {3, 2}, o);
  EXPECT_EQ(xt.shape(), x.shape());
  EXPECT_NEAR(sum(mul(c, y)).item(), sum(mul(x, xt)).item(), 1e-10);
  EXPECT_ERROR_NAMING(col2im(y, {2, 4, 7, 6}, {3, 2}, o), "col2im: cols");
  EXPECT_ERROR_NAMING(col2im(y, {7, 5}, {3, 2}, o), "col2im: cols");
  EXPECT_ERROR_NAMING(col2im(zeros({2, 3}), {3, 3}, {2, 2}, {}), "col2im: cols must be 3-D");
  EXPECT_ERROR_NAMING(im2col(zeros({1, 3, 3}), {2, 2}, {}), "im2col: input must be 4-D");
}

TEST(NnOnGpu, CompositesMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda(0);
  auto on_gpu = [&](const Tensor& t) { return t.to(gpu); };
  for (DType t : {DType::kF32, DType::kBF16}) {
    double tol = t == DType::kF32 ? 1e-5 : 0.05;
    Tensor x = values({4, 7}, 20, 3.0, t);
    EXPECT_LT(max_abs_diff(softmax(x, 1), softmax(on_gpu(x), 1)), tol) << dtype_name(t);
    EXPECT_LT(max_abs_diff(log_softmax(x, 0), log_softmax(on_gpu(x), 0)), tol) << dtype_name(t);
    Tensor target = from_vector<int64_t>({0, 6, -100, 3});
    CrossEntropyOptions o;
    o.label_smoothing = 0.1;
    Tensor ce = cross_entropy(on_gpu(x), on_gpu(target), o);
    EXPECT_EQ(ce.device(), gpu);
    EXPECT_LT(max_abs_diff(cross_entropy(x, target, o), ce), tol) << dtype_name(t);
    Tensor w = values({7}, 21, 1.0, t), b = values({7}, 22, 1.0, t);
    EXPECT_LT(max_abs_diff(layer_norm(x, {7}, w, b), layer_norm(on_gpu(x), {7}, on_gpu(w), on_gpu(b))), tol);
    Tensor img = values({2, 3, 9, 8}, 23, 1.0, t), k = values({4, 3, 3, 3}, 24, 1.0, t), kb = values({4}, 25, 1.0, t);
    Conv2dOptions co;
    co.stride = {2, 1};
    co.padding = {1, 1};
    EXPECT_LT(max_abs_diff(conv2d(img, k, kb, co), conv2d(on_gpu(img), on_gpu(k), on_gpu(kb), co)), tol * 10);
    ValuesIndices pc = max_pool2d_with_indices(img, {3, 3}, {2, 2}, {1, 1});
    ValuesIndices pg = max_pool2d_with_indices(on_gpu(img), {3, 3}, {2, 2}, {1, 1});
    EXPECT_EQ(max_abs_diff(pc.values, pg.values), 0.0);
    EXPECT_EQ(max_abs_diff(pc.indices, pg.indices), 0.0);
    Tensor emb = values({10, 4}, 26, 1.0, t);
    Tensor ids = from_vector<int64_t>({9, 0, 3, 3}, {2, 2});
    EXPECT_EQ(max_abs_diff(embedding(emb, ids), embedding(on_gpu(emb), on_gpu(ids))), 0.0);
  }
  // Dropout draws the same mask on both devices.
  Generator a(8), b(8);
  Tensor x = values({3000}, 27);
  EXPECT_EQ(max_abs_diff(dropout(x, 0.4, true, a), dropout(on_gpu(x), 0.4, true, b)), 0.0);
  // Operands on different devices are errors naming the op.
  EXPECT_ERROR_NAMING(cross_entropy(on_gpu(zeros({2, 3})), zeros({2}, DType::kI64)),
                      "cross_entropy: operands are on different devices");
  EXPECT_ERROR_NAMING(conv2d(zeros({1, 1, 3, 3}), on_gpu(zeros({1, 1, 2, 2}))),
                      "conv2d: operands are on different devices");
  EXPECT_ERROR_NAMING(embedding(zeros({3, 2}), on_gpu(zeros({1}, DType::kI64))),
                      "embedding: operands are on different devices");
  // Read back at the next synchronization (tensor/cuda/deferred_checks.h).
  EXPECT_ERROR_NAMING(embedding(on_gpu(zeros({3, 2})), on_gpu(from_vector<int64_t>({3}))).to(Device::cpu()),
                      "embedding: an index is out of range");
}

}  // namespace
}  // namespace coppice
