// The op parity harness's rows for tensor/'s dense ops (op_problems.h says
// how a row reads): products, reductions, selection and indexing, fills and
// random fills, nn ops. Shapes are small but off every tile and vector width
// (odd sizes, a row longer than reduce_sum's 4096-element blocks), and the
// values are drawn on the host, so every device sees the same ones.
#pragma once

#include <string>
#include <vector>

#include "tests/sparse/op_problems.h"

namespace coppice::parity {

// gemm: every transpose pair, and b broadcast over a's batch.
inline std::vector<OpCase> gemm_cases(const std::vector<std::string>&, DType t, const Device& d) {
  constexpr int64_t m = 9, k = 37, n = 11;
  std::vector<OpCase> out;
  for (int bt = 0; bt < 5; ++bt) {
    const bool ta = (bt & 1) != 0, tb = (bt & 2) != 0, broadcast = bt == 4;
    OpCase c;
    c.name =
        std::string("trans_a ") + (ta ? "1" : "0") + ", trans_b " + (tb ? "1" : "0") + (broadcast ? ", b [1]" : "");
    c.inputs = {on(full_values(ta ? Shape{2, k, m} : Shape{2, m, k}, 3), t, d),
                on(full_values(Shape{broadcast ? 1 : 2, tb ? n : k, tb ? k : n}, 4), t, d)};
    c.attrs.set("trans_a", ta).set("trans_b", tb);
    c.outputs = {near(wide_cell(op::kGemm, c)[0], k, wide_cell_of_abs(op::kGemm, c)[0])};
    out.push_back(c);
  }
  return out;
}

// A sum over rows of `shape` (reduce_sum: per row; reduce_sum_cols: per
// column), against f64 with its length's accumulation bound.
inline OpCase sum_case(std::string_view op, const Shape& shape, int64_t terms, DType t, const Device& d) {
  OpCase c;
  c.name = shape_to_string(shape);
  c.inputs = {on(full_values(shape, 5), t, d)};
  c.outputs = {near(wide_cell(op, c)[0], terms, wide_cell_of_abs(op, c)[0])};
  return c;
}

inline std::vector<OpCase> reduce_sum_cases(const std::vector<std::string>&, DType t, const Device& d) {
  // A long row runs in blocks (several threads on the CPU, then the block sums in order).
  return {sum_case(op::kReduceSum, {5, 300}, 300, t, d), sum_case(op::kReduceSum, {2, 9000}, 9000, t, d)};
}

inline std::vector<OpCase> reduce_sum_cols_cases(const std::vector<std::string>&, DType t, const Device& d) {
  // [batch, r, inner]: each slab's column sums (a sum over middle dims).
  return {sum_case(op::kReduceSumCols, {300, 7}, 300, t, d), sum_case(op::kReduceSumCols, {3, 130}, 3, t, d),
          sum_case(op::kReduceSumCols, {4, 70, 9}, 70, t, d)};
}

// reduce_max / reduce_min: the value and the first index of the extreme, bit
// for bit; 16-bit rounding makes ties, which both sides break to the first.
inline std::vector<OpCase> extreme_cases(std::string_view op, DType t, const Device& d) {
  OpCase c;
  c.name = "[6, 50]";
  c.inputs = {on(uniform_values({6, 50}, 6, -2.0, 2.0), t, d)};
  const std::vector<Tensor> want = wide_cell(op, c);
  c.outputs = {exact(want[0]), exact(want[1], DType::kI64)};
  return {c};
}
inline std::vector<OpCase> reduce_max_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return extreme_cases(op::kReduceMax, t, d);
}
inline std::vector<OpCase> reduce_min_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return extreme_cases(op::kReduceMin, t, d);
}

// relu_backward_col_sums (g, y): g where y > 0 (bit for bit) and its column sums.
inline std::vector<OpCase> relu_backward_col_sums_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[40, 9]";
  Tensor y = uniform_values({40, 9}, 8, -1.0, 1.0);
  y = where(gt(y, 0.5), zeros_like(y), y);  // zeros too: relu' (0) = 0
  c.inputs = {on(full_values({40, 9}, 7), t, d), on(y, t, d)};
  const std::vector<Tensor> want = wide_cell(op::kReluBackwardColSums, c);
  c.outputs = {exact(want[0]), near(want[1], 40, wide_cell_of_abs(op::kReluBackwardColSums, c)[1])};
  return {c};
}

// topk: the k largest (smallest) values and their indices, sorted, ties by
// the lower index (16-bit rounding makes some), bit for bit.
inline std::vector<OpCase> topk_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (bool largest : {true, false}) {
    OpCase c;
    c.name = largest ? "largest" : "smallest";
    c.inputs = {on(uniform_values({4, 30}, 9, -2.0, 2.0), t, d)};
    c.attrs.set("k", int64_t{5}).set("largest", largest);
    const std::vector<Tensor> want = wide_cell(op::kTopk, c);
    c.outputs = {exact(want[0]), exact(want[1], DType::kI64)};
    out.push_back(c);
  }
  return out;
}

// where (cond, a, b), b broadcast along rows.
inline std::vector<OpCase> where_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[4, 6] and [1, 6]";
  c.inputs = {on(gt(uniform_values({4, 6}, 10, -1.0, 1.0), 0.0), d), on(full_values({4, 6}, 11), t, d),
              on(full_values({1, 6}, 12), t, d)};
  c.outputs = {exact(wide_cell(op::kWhere, c)[0])};
  return {c};
}

inline std::vector<OpCase> index_select_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (int64_t dim : {0, 1}) {
    OpCase c;
    c.name = "dim " + std::to_string(dim);
    c.inputs = {on(full_values({5, 4, 3}, 13), t, d), index_tensor({2, 0, 3, 3, 1}, {5}, d)};
    c.attrs.set("dim", dim);
    c.outputs = {exact(wide_cell(op::kIndexSelect, c)[0])};
    out.push_back(c);
  }
  return out;
}

inline std::vector<OpCase> gather_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "dim 1, index [3, 4] of [4, 6]";
  c.inputs = {on(full_values({4, 6}, 14), t, d), index_tensor({5, 0, 0, 2, 1, 1, 3, 4, 0, 5, 5, 2}, {3, 4}, d)};
  c.attrs.set("dim", int64_t{1});
  c.outputs = {exact(wide_cell(op::kGather, c)[0])};
  return {c};
}

// scatter_add: duplicates add in index order (at most 4 terms a position).
inline std::vector<OpCase> scatter_add_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "dim 0, duplicates";
  c.inputs = {on(full_values({5, 4}, 15), t, d), index_tensor({0, 4, 2, 2, 0, 4, 2, 1, 0, 0, 2, 3}, {3, 4}, d),
              on(full_values({3, 4}, 16), t, d)};
  c.attrs.set("dim", int64_t{0});
  c.outputs = {near(wide_cell(op::kScatterAdd, c)[0], 4, wide_cell_of_abs(op::kScatterAdd, c)[0])};
  return {c};
}

// index_copy_ (in place): the chosen slices replaced, bit for bit, every
// other element kept; along dim 0 (an optimizer's rows) and dim 1.
inline std::vector<OpCase> index_copy_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (int64_t dim : {0, 1}) {
    OpCase c;
    c.name = "dim " + std::to_string(dim);
    const Shape src_shape = dim == 0 ? Shape{3, 4, 3} : Shape{5, 3, 3};
    c.inputs = {on(full_values({5, 4, 3}, 18), t, d), index_tensor({3, 0, 2}, {3}, d),
                on(full_values(src_shape, 19), t, d)};
    c.attrs.set("dim", dim);
    c.written = {0};
    c.outputs = all_exact(same_cell(op::kIndexCopy, c), t);
    out.push_back(c);
  }
  return out;
}

// fill_ and copy_ (in place): the CPU cell in the run's dtype, bit for bit
// (a value rounded once to the dtype); copy_ broadcasts and converts.
inline std::vector<OpCase> fill_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[3, 5] = 1.7";
  c.inputs = {on(zeros({3, 5}, TensorOptions(DType::kF64)), t, d)};
  c.attrs.set("value", 1.7);
  c.written = {0};
  c.outputs = all_exact(same_cell(op::kFill, c), t);
  return {c};
}

inline std::vector<OpCase> copy_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (DType src : {t, DType::kF64, DType::kI32}) {
    OpCase c;
    c.name = std::string("from ") + std::string(dtype_name(src)) + " [1, 5]";
    c.inputs = {on(zeros({3, 5}, TensorOptions(DType::kF64)), t, d),
                mul(full_values({1, 5}, 17), src == DType::kI32 ? 8.0 : 1.0).to(src).to(d)};
    c.written = {0};
    c.outputs = all_exact(same_cell(op::kCopy, c), t);
    out.push_back(c);
  }
  return out;
}

// uniform_, normal_, randint_ (in place): the Philox stream of
// tensor/philox.h, the same numbers on every device (tensor/cpu/random.cc:
// uniform_ and randint_ bit for bit; normal_ to f64's log/sin/cos, an ulp or
// two, tests/tensor/cuda/random_test.cc). Each draw is checked against the
// CPU cell in the run's dtype; the CPU draw itself lies in range and depends
// on the seed.
inline Attrs stream_attrs(int64_t seed, int64_t offset) { return Attrs().set("seed", seed).set("offset", offset); }

inline OpCase fill_case(std::string name, const Shape& shape, DType t, const Device& d, Attrs attrs) {
  OpCase c;
  c.name = std::move(name);
  c.inputs = {on(zeros(shape, TensorOptions(DType::kF64)), t, d)};
  if (!is_floating(t)) c.inputs = {zeros(shape, TensorOptions(t, d))};
  c.attrs = std::move(attrs);
  c.written = {0};
  return c;
}

// Every element of `x` in [lo, hi), and `x` not equal to `other` (another seed's draw).
inline void expect_draw(const Tensor& x, double lo, double hi, const Tensor& other, std::string_view what) {
  const std::vector<double> v = host_f64(x), w = host_f64(other);
  int64_t out_of_range = 0;
  for (double e : v) out_of_range += !(e >= lo && e < hi);
  EXPECT_EQ(out_of_range, 0) << what << ": values outside [" << lo << ", " << hi << ")";
  EXPECT_NE(v, w) << what << ": another seed draws the same values";
}

inline std::vector<OpCase> uniform_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {-3.0, 5.0}, {0.999, 1.0}}) {
    // [37, 41]: no multiple of Philox's four words; seed and offset with high bits set.
    Attrs a = stream_attrs(-12345, static_cast<int64_t>(0x8000000000000007ull)).set("low", lo).set("high", hi);
    OpCase c = fill_case("[" + std::to_string(lo) + ", " + std::to_string(hi) + ")", {37, 41}, t, d, a);
    c.outputs = all_exact(same_cell(op::kUniform, c), t);
    // The range where both ends are exact in every dtype ([0.999, 1) is not
    // in bf16: a draw rounded onto `high` is `low`, and low rounds to 1 there).
    if (lo != 0.999) {
      OpCase other = fill_case("", {37, 41}, t, d, a.set("seed", int64_t{7}));
      expect_draw(c.outputs[0].want, lo, hi, same_cell(op::kUniform, other)[0], "uniform_");
    }
    out.push_back(c);
  }
  return out;
}

inline std::vector<OpCase> normal_cases(const std::vector<std::string>&, DType t, const Device& d) {
  Attrs a = stream_attrs(99, 3).set("mean", 0.5).set("std", 2.0);
  OpCase c = fill_case("mean 0.5, std 2", {777, 13}, t, d, a);
  c.outputs = {normwise(same_cell(op::kNormal, c)[0])};
  OpCase other = fill_case("", {777, 13}, t, d, a.set("seed", int64_t{98}));
  expect_draw(c.outputs[0].want, -100.0, 100.0, same_cell(op::kNormal, other)[0], "normal_");
  return {c};
}

inline std::vector<OpCase> randint_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{{0, 10}, {-5, 6}, {3, 4}, {0, 256}}) {
    if (t == DType::kU8 && lo < 0) continue;
    Attrs a = stream_attrs(4242, 1).set("low", lo).set("high", hi);
    OpCase c = fill_case("[" + std::to_string(lo) + ", " + std::to_string(hi) + ")", {3001}, t, d, a);
    c.outputs = all_exact(same_cell(op::kRandint, c), t);
    if (hi - lo > 1) {
      OpCase other = fill_case("", {3001}, t, d, a.set("seed", int64_t{4243}));
      expect_draw(c.outputs[0].want, static_cast<double>(lo), static_cast<double>(hi),
                  same_cell(op::kRandint, other)[0], "randint_");
    }
    out.push_back(c);
  }
  return out;
}

// softmax and log_softmax have no cell yet (op_table.h: the frontend's
// composite); a fused kernel registered later meets the composite in f64.
inline std::vector<OpCase> softmax_like_cases(bool log, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (int64_t dim : {0, 1}) {
    OpCase c;
    c.name = "[6, 33], dim " + std::to_string(dim);
    c.inputs = {on(uniform_values({6, 33}, 18, -4.0, 4.0), t, d)};
    c.attrs.set("dim", dim);
    const Tensor x = host_copy(c.inputs[0], true);
    c.outputs = {log ? normwise(log_softmax(x, dim), 33) : near(softmax(x, dim), 33)};
    out.push_back(c);
  }
  return out;
}
inline std::vector<OpCase> softmax_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return softmax_like_cases(false, t, d);
}
inline std::vector<OpCase> log_softmax_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return softmax_like_cases(true, t, d);
}

// cross_entropy and its backward: CUDA's fused kernels (no CPU cell) against
// the frontend's composite in f64, with a target ignored, every reduction
// and label smoothing.
inline std::vector<OpCase> cross_entropy_like_cases(bool backward, DType t, const Device& d) {
  constexpr int64_t n = 6, classes = 10;
  std::vector<OpCase> out;
  for (Reduction r : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
    for (double smoothing : {0.0, 0.1}) {
      const char* name = r == Reduction::kNone ? "none" : r == Reduction::kSum ? "sum" : "mean";
      CrossEntropyOptions o;
      o.reduction = r;
      o.label_smoothing = smoothing;
      o.ignore_index = -100;
      OpCase c;
      c.name = std::string(name) + ", label_smoothing " + std::to_string(smoothing);
      const Tensor logits = uniform_values({n, classes}, 19, -3.0, 3.0);
      const Tensor target = from_vector<int64_t>({3, 0, 9, -100, 4, 4}, {n});
      c.inputs = {on(logits, t, d), on(target, d)};
      c.attrs.set("label_smoothing", smoothing).set("ignore_index", o.ignore_index).set("reduction", std::string(name));
      const Tensor z = host_copy(c.inputs[0], true);
      if (!backward) {
        c.outputs = {near(cross_entropy(z, target, o), n * classes)};
      } else {
        const Tensor g = r == Reduction::kNone ? uniform_values({n}, 20, -1.0, 1.0) : scalar_tensor(0.75);
        c.inputs.push_back(on(g, t, d));
        c.outputs = {normwise(cross_entropy_backward(z, target, host_copy(c.inputs[2], true), o), classes)};
      }
      out.push_back(c);
    }
  }
  return out;
}
inline std::vector<OpCase> cross_entropy_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return cross_entropy_like_cases(false, t, d);
}
inline std::vector<OpCase> cross_entropy_backward_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return cross_entropy_like_cases(true, t, d);
}

// layer_norm and add_layer_norm (CUDA's fused kernels, registered for any
// formats): with weight and bias and without, d = 32 (16-byte packs) and
// d = 30 (not), against the composite in f64 on the same rounded values;
// add_layer_norm's h = x + r is rounded to the dtype first, as the kernel
// and the composite do (tensor/cuda/layer_norm.cu), and normalized from there.
inline std::vector<OpCase> layer_norm_like_cases(bool residual, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (int64_t dn : {32, 30}) {
    for (bool affine : {true, false}) {
      OpCase c;
      c.name = "[6, " + std::to_string(dn) + "]" + (affine ? ", weight and bias" : "");
      const Tensor x = on(uniform_values({6, dn}, 21, -2.0, 3.0), t, d);
      const Tensor w = affine ? on(full_values({dn}, 22), t, d) : Tensor();
      const Tensor b = affine ? on(uniform_values({dn}, 23, -1.0, 1.0), t, d) : Tensor();
      c.attrs.set("normalized_shape", std::vector<int64_t>{dn}).set("eps", 1e-5);
      Tensor h = host_copy(x, false);
      if (residual) {
        const Tensor r = on(uniform_values({6, dn}, 24, -1.0, 1.0), t, d);
        c.inputs = {x, r, w, b};
        h = add(h, host_copy(r, false));  // rounded to the dtype, as the kernel rounds it
        c.outputs.push_back(near(h));
      } else {
        c.inputs = {x, w, b};
      }
      c.outputs.push_back(
          normwise(layer_norm(host_copy(h, true), {dn}, host_copy(w, true), host_copy(b, true), 1e-5), dn));
      out.push_back(c);
    }
  }
  return out;
}
inline std::vector<OpCase> layer_norm_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return layer_norm_like_cases(false, t, d);
}
inline std::vector<OpCase> add_layer_norm_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return layer_norm_like_cases(true, t, d);
}

// layer_norm_backward (x, weight, grad) and add_layer_norm_backward (h,
// weight, dy, dh): {dx, dweight, dbias} against the composite in f64;
// dweight only with a weight, dbias always asked for.
inline std::vector<OpCase> layer_norm_backward_like_cases(bool residual, DType t, const Device& d) {
  constexpr int64_t rows = 40;
  std::vector<OpCase> out;
  for (int64_t dn : {32, 30}) {
    for (bool affine : {true, false}) {
      OpCase c;
      c.name = "[" + std::to_string(rows) + ", " + std::to_string(dn) + "]" + (affine ? ", weight" : "");
      const Tensor x = on(uniform_values({rows, dn}, 25, -2.0, 3.0), t, d);
      const Tensor w = affine ? on(full_values({dn}, 26), t, d) : Tensor();
      const Tensor g = on(uniform_values({rows, dn}, 27, -1.0, 1.0), t, d);
      c.attrs.set("d", dn).set("eps", 1e-5).set("dweight", affine).set("dbias", true);
      const Tensor hx = host_copy(x, true), hw = host_copy(w, true), hg = host_copy(g, true);
      LayerNormGrads want;
      if (residual) {
        const Tensor dh = on(uniform_values({rows, dn}, 28, -1.0, 1.0), t, d);
        c.inputs = {x, w, g, dh};
        want = add_layer_norm_backward(hx, {dn}, hw, host_copy(dh, true), hg, affine, true, 1e-5);
      } else {
        c.inputs = {x, w, g};
        want = layer_norm_backward(hx, {dn}, hw, hg, affine, true, 1e-5);
      }
      c.outputs = {normwise(want.dx, dn), affine ? normwise(want.dweight, rows) : Expected{},
                   normwise(want.dbias, rows)};
      out.push_back(c);
    }
  }
  return out;
}
inline std::vector<OpCase> layer_norm_backward_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return layer_norm_backward_like_cases(false, t, d);
}
inline std::vector<OpCase> add_layer_norm_backward_cases(const std::vector<std::string>&, DType t, const Device& d) {
  return layer_norm_backward_like_cases(true, t, d);
}

// embedding_backward: rows of grad summed by index, in index order.
inline std::vector<OpCase> embedding_backward_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "7 rows into 5, duplicates, one unused";
  c.inputs = {on(full_values({7, 6}, 29), t, d), index_tensor({3, 0, 3, 1, 3, 0, 4}, {7}, d)};
  c.attrs.set("num_embeddings", int64_t{5});
  c.outputs = {near(wide_cell(op::kEmbeddingBackward, c)[0], 3, wide_cell_of_abs(op::kEmbeddingBackward, c)[0])};
  return {c};
}

// embedding_bag: bags {3, 0, 3}, {}, {1, 4}, {3} of a [5, 6] table; padding 4
// in the second case; per-sample weights where the cell takes them, else
// the mean and the max too (the max and its positions exact: a choice, no
// arithmetic).
inline std::vector<OpCase> embedding_bag_cases(const std::vector<std::string>& formats, DType t, const Device& d) {
  const bool weighted = formats.size() > 3 && formats[3] == "dense";
  std::vector<OpCase> out;
  for (std::string mode : {"sum", "mean", "max"}) {
    if (mode != "sum" && weighted) continue;  // per-sample weights are for sum mode
    for (int64_t padding : {int64_t{-1}, int64_t{4}}) {
      OpCase c;
      c.name = mode + (weighted ? ", weighted" : "") + (padding >= 0 ? ", padding 4" : "") + ", an empty bag";
      c.inputs = {on(full_values({5, 6}, 30), t, d), index_tensor({3, 0, 3, 1, 4, 3}, {6}, d),
                  index_tensor({0, 3, 3, 5, 6}, {5}, d), weighted ? on(full_values({6}, 31), t, d) : Tensor()};
      c.attrs.set("mode", mode).set("padding_idx", padding);
      if (mode == "max") {
        c.outputs = all_exact(same_cell(op::kEmbeddingBag, c), t);
      } else {
        c.outputs = {near(wide_cell(op::kEmbeddingBag, c)[0], 4, wide_cell_of_abs(op::kEmbeddingBag, c)[0])};
      }
      out.push_back(c);
    }
  }
  return out;
}

// im2col / col2im / max_pool2d over [2, 3, 7, 6] with every window parameter
// off its default (a 3 x 2 kernel, stride, padding, dilation).
inline Attrs window(bool dilation = true) {
  Attrs a;
  a.set("kernel", std::vector<int64_t>{3, 2})
      .set("stride", std::vector<int64_t>{2, 1})
      .set("padding", std::vector<int64_t>{1, 1});
  if (dilation) a.set("dilation", std::vector<int64_t>{1, 2});
  return a;
}

inline std::vector<OpCase> im2col_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[2, 3, 7, 6]";
  c.inputs = {on(full_values({2, 3, 7, 6}, 30), t, d)};
  c.attrs = window();
  c.outputs = {exact(wide_cell(op::kIm2col, c)[0])};
  return {c};
}

// col2im sums each pixel's kernel entries (3 * 2 at most).
inline std::vector<OpCase> col2im_cases(const std::vector<std::string>&, DType t, const Device& d) {
  // oh = (7 + 2 - 2 - 1) / 2 + 1 = 4, ow = (6 + 2 - 2 - 1) / 1 + 1 = 6.
  OpCase c;
  c.name = "into [2, 3, 7, 6]";
  c.inputs = {on(full_values({2, 3 * 3 * 2, 4 * 6}, 31), t, d)};
  c.attrs = window().set("size", std::vector<int64_t>{7, 6});
  c.outputs = {near(wide_cell(op::kCol2im, c)[0], 6, wide_cell_of_abs(op::kCol2im, c)[0])};
  return {c};
}

// conv2d has no cell yet (the frontend's im2col and gemm); a fused kernel
// registered later meets the frontend in f64.
inline std::vector<OpCase> conv2d_cases(const std::vector<std::string>& f, DType t, const Device& d) {
  OpCase c;
  c.name = "[2, 3, 7, 6] by [4, 3, 3, 2]";
  const bool bias = f.size() > 2 && f[2] != "none";
  c.inputs = {on(full_values({2, 3, 7, 6}, 32), t, d), on(full_values({4, 3, 3, 2}, 33), t, d),
              bias ? on(full_values({4}, 34), t, d) : Tensor()};
  c.attrs = window();
  Conv2dOptions o;
  o.stride = {2, 1};
  o.padding = {1, 1};
  o.dilation = {1, 2};
  const std::vector<Tensor> h = host_copies(c.inputs, true);
  const Tensor scale = conv2d(abs(h[0]), abs(h[1]), bias ? abs(h[2]) : Tensor(), o);
  c.outputs = {near(conv2d(h[0], h[1], h[2], o), 18, scale)};
  return {c};
}

// max_pool2d: the values and the flat index of each window's maximum, bit
// for bit (ties, which 16-bit rounding makes, to the first in window order).
inline std::vector<OpCase> max_pool2d_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[2, 3, 7, 6]";
  c.inputs = {on(uniform_values({2, 3, 7, 6}, 35, -2.0, 2.0), t, d)};
  c.attrs = window(false).set("stride", std::vector<int64_t>{2, 2});
  const std::vector<Tensor> want = wide_cell(op::kMaxPool2d, c);
  c.outputs = {exact(want[0]), exact(want[1], DType::kI64)};
  return {c};
}

}  // namespace coppice::parity
