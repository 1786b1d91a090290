// The frontends over sparse operands (autograd/functions/sparse_nn.h) on every
// built-in format: softmax and log_softmax over the stored entries of each
// line (both dims), layer_norm over each row's stored entries, dropout of
// stored values, cat and where keeping the format, embedding of a sparse
// weight, to_format as a differentiable conversion. Values against loops
// over the stored entries, float64 gradchecks, the format and pattern kept,
// and no dense fallback on the way.
#include "autograd/functions/sparse_nn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/dispatcher.h"
#include "tests/autograd/test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;
using testing::randn_away;
using V = std::vector<Variable>;

const std::vector<std::string> kFormats = {"coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"};

// A random f64 sparse [4, 8] of `format` (block formats in 2x2 blocks, n:m
// 2:4), stored values away from 0.
Tensor random_sparse(const std::string& format, uint64_t seed = 0) {
  const Shape shape{4, 8};
  Tensor mask;
  FormatOptions options;
  Generator gen(seed + 99);
  if (format == "nm") {
    std::vector<uint8_t> keep(32);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 8; ++c) keep[r * 8 + c] = ((c % 4 == 0 || c % 4 == 3) == (r % 2 == 0));
    mask = ne(from_vector(keep, shape), 0.0);
    options = FormatOptions::nm(2, 4);
  } else {
    mask = lt(rand(shape, DType::kF64, gen), 0.5);
    if (format == "bsr" || format == "blocked_ell") options = FormatOptions::block(2);
  }
  Tensor s = sparse_from_mask(randn(shape, DType::kF64, gen), mask, format, options);
  return with_values(s, randn_away(values(s).shape(), 0.0));
}

// Which positions of t are stored, as host booleans (row-major).
std::vector<bool> stored(const Tensor& t) {
  std::vector<bool> out(static_cast<size_t>(t.numel()), false);
  for (int64_t p : stored_positions(t))
    if (p >= 0) out[p] = true;
  return out;
}

// The stored entries' softmax (or log-softmax) along dim, by loops; zeros elsewhere.
Tensor loop_softmax(const Tensor& s, int64_t dim, bool log) {
  const Tensor d = to_dense(s).contiguous();
  const std::vector<bool> at = stored(s);
  const int64_t rows = d.size(0), cols = d.size(1);
  Tensor out = zeros({rows, cols}, DType::kF64);
  const int64_t lines = dim == 1 ? rows : cols, len = dim == 1 ? cols : rows;
  for (int64_t l = 0; l < lines; ++l) {
    auto pos = [&](int64_t i) { return dim == 1 ? l * cols + i : i * cols + l; };
    double m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < len; ++i)
      if (at[pos(i)]) m = std::max(m, d.data<double>()[pos(i)]);
    for (int64_t i = 0; i < len; ++i)
      if (at[pos(i)]) sum += std::exp(d.data<double>()[pos(i)] - m);
    for (int64_t i = 0; i < len; ++i) {
      if (!at[pos(i)]) continue;
      const double x = d.data<double>()[pos(i)] - m;
      out.data<double>()[pos(i)] = log ? x - std::log(sum) : std::exp(x) / sum;
    }
  }
  return out;
}

class SparseFrontendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { Dispatcher::instance().set_fallback_is_error(true); }
  void TearDown() override { Dispatcher::instance().set_fallback_is_error(false); }
};

TEST_P(SparseFrontendTest, SoftmaxOverStoredEntries) {
  const Tensor s = random_sparse(GetParam());
  for (int64_t dim : {1, 0}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim));
      Variable y = log ? log_softmax(Variable(s), dim) : softmax(Variable(s), dim);
      EXPECT_EQ(y.value().format(), GetParam());
      EXPECT_EQ(pattern_version(y.value()), pattern_version(s));
      EXPECT_TRUE(allclose(to_dense(y.value()), loop_softmax(s, dim, log), 1e-12, 1e-12));
      Variable sv = param(s, "s");
      EXPECT_GRADCHECK([dim, log](const V& v) { return log ? log_softmax(v[0], dim) : softmax(v[0], dim); }, {sv});
    }
  }
}

TEST_P(SparseFrontendTest, LayerNormOverEachRowsEntries) {
  const Tensor s = random_sparse(GetParam(), 1);
  const Tensor w = randn64({8}), b = randn64({8});
  Variable y = layer_norm(Variable(s), {8}, Variable(w), Variable(b), 1e-5);
  EXPECT_EQ(y.value().format(), GetParam());
  // By loops over each row's stored entries.
  const Tensor d = to_dense(s).contiguous(), yd = to_dense(y.value()).contiguous();
  const std::vector<bool> at = stored(s);
  for (int64_t r = 0; r < 4; ++r) {
    double mean = 0, var = 0, n = 0;
    for (int64_t c = 0; c < 8; ++c)
      if (at[r * 8 + c]) mean += d.data<double>()[r * 8 + c], n += 1;
    if (n == 0) continue;
    mean /= n;
    for (int64_t c = 0; c < 8; ++c)
      if (at[r * 8 + c]) var += std::pow(d.data<double>()[r * 8 + c] - mean, 2) / n;
    for (int64_t c = 0; c < 8; ++c) {
      if (!at[r * 8 + c]) continue;
      const double want =
          (d.data<double>()[r * 8 + c] - mean) / std::sqrt(var + 1e-5) * w.data<double>()[c] + b.data<double>()[c];
      EXPECT_NEAR(yd.data<double>()[r * 8 + c], want, 1e-10) << r << "," << c;
    }
  }
  Variable sv = param(s, "s"), wv = param(w, "w"), bv = param(b, "b");
  EXPECT_GRADCHECK([](const V& v) { return layer_norm(v[0], {8}, v[1], v[2], 1e-5); }, {sv, wv, bv});
}

TEST_P(SparseFrontendTest, DropoutKeepsThePattern) {
  const Tensor s = random_sparse(GetParam(), 2);
  Generator gen(5);
  Variable y = dropout(Variable(s), 0.5, true, gen);
  EXPECT_EQ(pattern_version(y.value()), pattern_version(s));
  const Tensor vy = values(y.value()).reshape({-1}), vs = values(s).reshape({-1});
  for (int64_t i = 0; i < vy.numel(); ++i) {
    const double a = vy.data<double>()[i], x = vs.data<double>()[i];
    EXPECT_TRUE(a == 0.0 || std::abs(a - 2 * x) < 1e-12) << i;
  }
  EXPECT_TRUE(dropout(Variable(s), 0.5, false, gen).value().is_same(s));
}

TEST_P(SparseFrontendTest, CatKeepsTheFormat) {
  const Tensor a = random_sparse(GetParam(), 3), b = random_sparse(GetParam(), 4);
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(dim);
    Variable y = cat({Variable(a), Variable(b)}, dim);
    EXPECT_EQ(y.value().format(), GetParam());
    EXPECT_TRUE(allclose(to_dense(y.value()), cat({to_dense(a), to_dense(b)}, dim), 0, 0));
    Variable av = param(a, "a"), bv = param(b, "b");
    EXPECT_GRADCHECK([dim](const V& v) { return cat(v, dim); }, {av, bv});
  }
}

TEST_P(SparseFrontendTest, WhereOverTheUnion) {
  const Tensor a = random_sparse(GetParam(), 5), b = random_sparse(GetParam(), 6);
  Generator gen(7);
  const Tensor cond = lt(rand({4, 8}, DType::kF64, gen), 0.5);
  Variable y = where(cond, Variable(a), Variable(b));
  EXPECT_EQ(y.value().format(), GetParam());
  EXPECT_TRUE(allclose(to_dense(y.value()), where(cond, to_dense(a), to_dense(b)), 0, 0));
  Variable av = param(a, "a"), bv = param(b, "b");
  EXPECT_GRADCHECK([cond](const V& v) { return where(cond, v[0], v[1]); }, {av, bv});
}

TEST_P(SparseFrontendTest, EmbeddingOfASparseWeight) {
  const Tensor w = random_sparse(GetParam(), 8);
  const Tensor idx = from_vector<int64_t>({3, 0, 3, 1, 2, 0}, {2, 3});
  Variable y = embedding(Variable(w), idx);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 8}));
  EXPECT_TRUE(allclose(y.value(), embedding(to_dense(w), idx), 0, 0));
  Variable wv = param(w, "w");
  EXPECT_GRADCHECK([idx](const V& v) { return embedding(v[0], idx); }, {wv});
  EXPECT_ERROR_NAMING(embedding(Variable(w), from_vector<int64_t>({1, 4})), "index 4 at position 1");
}

TEST_P(SparseFrontendTest, ToFormatIsDifferentiable) {
  const Tensor s = random_sparse(GetParam(), 9);
  for (const std::string target : {"csr", "coo", "bsr"}) {
    SCOPED_TRACE(target);
    const FormatOptions o = target == "bsr" ? FormatOptions::block(2) : FormatOptions{};
    Variable y = to_format(Variable(s), target, o);
    EXPECT_EQ(y.value().format(), target);
    EXPECT_TRUE(allclose(to_dense(y.value()), to_dense(s), 0, 0));
    Variable sv = param(s, "s");
    std::string t = target;
    EXPECT_GRADCHECK([t, o](const V& v) { return to_format(v[0], t, o); }, {sv});
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SparseFrontendTest, ::testing::ValuesIn(kFormats));

TEST(SparseFrontends, ADenseOperandGivesADenseResult) {
  const Tensor a = random_sparse("csr"), d = randn64({4, 8});
  const Tensor cond = gt(d, 0.0);
  Variable y = where(cond, Variable(a), Variable(d));
  EXPECT_TRUE(y.value().is_dense());
  EXPECT_TRUE(allclose(y.value(), where(cond, to_dense(a), d), 0, 0));
  Variable c = cat({Variable(a), Variable(d)}, 0);
  EXPECT_TRUE(c.value().is_dense());
  Variable x = param(randn64({4, 8}), "x");
  EXPECT_GRADCHECK([](const V& v) { return to_format(v[0], "csr"); }, {x});
}

TEST(SparseFrontends, ErrorsNameTheProblem) {
  const Tensor a = random_sparse("csr");
  EXPECT_ERROR_NAMING(layer_norm(Variable(a), {4, 8}), "normalized over the stored entries of each row");
  EXPECT_ERROR_NAMING(cat({Variable(a), Variable(sparse_transpose(random_sparse("csr")))}, 0),
                      "differs from operand 0's");
}

}  // namespace
}  // namespace coppice
