// einsum, rearrange, one_hot and the sparse-by-sparse gradients
// (autograd/functions/einsum.h, rearrange.h, sparse/one_hot.h, sparse.h):
// the plan's routes, values against a naive loop over every label
// assignment, float64 gradchecks over every format of the table as either
// operand, Scorch's mixture-of-experts slide written literally, the loud
// dense fallback, and errors that name what is wrong.
#include "autograd/functions/einsum.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "autograd/functions/einsum_plan.h"
#include "autograd/functions/rearrange.h"
#include "autograd/functions/sparse.h"
#include "sparse/convert.h"
#include "sparse/one_hot.h"
#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"
#include "tests/autograd/test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using testing::randn_away;
using V = std::vector<Variable>;

// Every built-in sparse format.
const std::vector<std::string> kFormats = {"coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"};

// A random f64 sparse matrix of `format` (2-D, each dim even, the last a
// multiple of 4): about half the entries (blocks of 2x2 for the block
// formats, 2 of every 4 for n:m), every stored value 0.1 away from 0.
Tensor random_sparse(const Shape& shape, const std::string& format) {
  Tensor mask;
  FormatOptions options;
  if (format == "nm") {
    // Positions 0 and 3 of each group in even rows, 1 and 2 in odd ones.
    std::vector<uint8_t> keep(static_cast<size_t>(shape[0] * shape[1]));
    for (int64_t r = 0; r < shape[0]; ++r) {
      for (int64_t c = 0; c < shape[1]; ++c) {
        const bool outer = c % 4 == 0 || c % 4 == 3;
        keep[r * shape[1] + c] = r % 2 == 0 ? outer : !outer;
      }
    }
    mask = ne(from_vector(keep, shape), 0.0);
    options = FormatOptions::nm(2, 4);
  } else {
    mask = lt(rand(shape, DType::kF64, testing::test_gen()), 0.5);
    if (format == "bsr" || format == "blocked_ell") options = FormatOptions::block(2);
  }
  Tensor s = sparse_from_mask(randn64(shape), mask, format, options);
  return with_values(s, randn_away(values(s).shape(), 0.0));
}

// A random 3-D COO [b, m, k] with about half the entries.
Tensor random_coo3(const Shape& shape) {
  Tensor s = sparse_from_mask(randn64(shape), lt(rand(shape, DType::kF64, testing::test_gen()), 0.5), "coo");
  return with_values(s, randn_away(values(s).shape(), 0.0));
}

// einsum by a loop over every assignment of the labels, on dense f64 host
// copies: the reference every route is held to.
Tensor naive_einsum(const std::string& spec, const std::vector<Tensor>& operands) {
  std::vector<Shape> shapes;
  std::vector<bool> sparse;
  std::vector<Tensor> dense;
  for (const Tensor& t : operands) {
    shapes.push_back(t.shape());
    sparse.push_back(false);
    dense.push_back(to_dense(t).to(DType::kF64).to(Device::cpu()).contiguous());
  }
  const EinsumPlan plan = plan_einsum(spec, shapes, sparse);
  std::string labels;
  for (const auto& [l, n] : plan.sizes) labels += l;
  Shape out_shape;
  for (char l : plan.output) out_shape.push_back(plan.sizes.at(l));
  Tensor out = zeros(out_shape, DType::kF64);
  double* o = out.data<double>();
  std::map<char, int64_t> at;
  for (char l : labels) at[l] = 0;
  for (;;) {
    double term = 1.0;
    for (size_t i = 0; i < dense.size(); ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < plan.inputs[i].size(); ++d) {
        flat = flat * shapes[i][d] + (shapes[i][d] == 1 ? 0 : at[plan.inputs[i][d]]);  // size 1 broadcasts
      }
      term *= dense[i].data<double>()[flat];
    }
    int64_t flat = 0;
    for (char l : plan.output) flat = flat * plan.sizes.at(l) + at[l];
    o[flat] += term;
    size_t k = labels.size();
    while (k > 0 && ++at[labels[k - 1]] == plan.sizes.at(labels[k - 1])) at[labels[--k]] = 0;
    if (k == 0) break;
  }
  return out;
}

void expect_matches_naive(const std::string& spec, const std::vector<Tensor>& operands) {
  SCOPED_TRACE(spec);
  Tensor got = einsum(spec, operands);
  Tensor want = naive_einsum(spec, operands);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(allclose(to_dense(got), want, 1e-10, 1e-10)) << "max diff " << max_abs_diff(to_dense(got), want);
}

EinsumRoute route_of(const std::string& spec, const std::vector<Shape>& shapes, const std::vector<bool>& sparse) {
  return plan_einsum(spec, shapes, sparse).contractions.at(0).route;
}

// ---- the plan ---------------------------------------------------------------

TEST(EinsumPlan, RoutesFollowTheFormats) {
  EXPECT_EQ(route_of("ij,jk->ik", {{2, 3}, {3, 4}}, {false, false}), EinsumRoute::kDenseBmm);
  EXPECT_EQ(route_of("i,j->ij", {{2}, {3}}, {false, false}), EinsumRoute::kDenseMul);
  // A sparse weight W [out, in] against x [b, in]: linear, the weight's kernels.
  EXPECT_EQ(route_of("bi,oi->bo", {{5, 3}, {4, 3}}, {false, true}), EinsumRoute::kSparseLinear);
  EXPECT_EQ(route_of("bi,io->bo", {{5, 3}, {3, 4}}, {false, true}), EinsumRoute::kSparseMatmul);
  // Scorch's gate: [b, n] sparse with b batch: a block-diagonal SpMM.
  EXPECT_EQ(route_of("bnd,bn->bd", {{4, 3, 2}, {4, 3}}, {false, true}), EinsumRoute::kSparseBlockDiagonal);
  EXPECT_EQ(route_of("ij,ij->ij", {{2, 3}, {2, 3}}, {true, false}), EinsumRoute::kSparseScale);
  EXPECT_EQ(route_of("ij,jk->ik", {{2, 3}, {3, 4}}, {true, true}), EinsumRoute::kSpgemm);
  EXPECT_EQ(route_of("ij,ji->ij", {{2, 3}, {3, 2}}, {true, true}), EinsumRoute::kSparseMul);
  const EinsumPlan fallback = plan_einsum("ij,jk->ijk", {{2, 3}, {3, 4}}, {true, true});
  EXPECT_TRUE(fallback.contractions[0].densify_rhs);
}

TEST(EinsumPlan, StepOneAndTheImplicitOutput) {
  const EinsumPlan implicit = plan_einsum("iij,jk", {{3, 3, 2}, {2, 4}}, {false, false});
  EXPECT_EQ(implicit.output, "k");  // NumPy's: the labels that appear once
  const EinsumPlan p = plan_einsum("iij,jk->ik", {{3, 3, 2}, {2, 4}}, {false, false});
  EXPECT_EQ(p.prep[0].diagonal, "i");
  EXPECT_EQ(p.prep[0].labels, "ji");
  const EinsumPlan s = plan_einsum("ij,jk->k", {{3, 2}, {2, 4}}, {false, false});
  EXPECT_EQ(s.prep[0].summed, "i");
  const EinsumPlan e = plan_einsum("...ij,...jk->...ik", {{5, 2, 3}, {3, 4}}, {false, false});
  EXPECT_EQ(e.output, std::string("0ik"));
  EXPECT_FALSE(describe(e).empty());
}

TEST(EinsumPlan, ErrorsNameTheProblem) {
  EXPECT_ERROR_NAMING(plan_einsum("ij,jk->ik", {{2, 3}}, {false}), "names 2 operand(s), got 1");
  EXPECT_ERROR_NAMING(plan_einsum("ij,jk->ik", {{2, 3}, {4, 5}}, {false, false}),
                      "label 'j' has size 3 in operand 0 and 4 in operand 1");
  EXPECT_ERROR_NAMING(plan_einsum("ij->iz", {{2, 3}}, {false}), "the output's 'z' is in no operand");
  EXPECT_ERROR_NAMING(plan_einsum("ij->ii", {{2, 3}}, {false}), "the output repeats 'i'");
  EXPECT_ERROR_NAMING(plan_einsum("i1->i", {{2, 3}}, {false}), "labels are letters");
  EXPECT_ERROR_NAMING(plan_einsum("ijk->i", {{2, 3}}, {false}), "operand 0 has 2 dims but its term 'ijk' names 3");
  EXPECT_ERROR_NAMING(plan_einsum("ij->i->j", {{2, 3}}, {false}), "more than one \"->\"");
  EXPECT_ERROR_NAMING(plan_einsum("ii,i->i", {{1, 1}, {3}}, {false, false}),
                      "label 'i' repeats in operand 0 with size 1 where it has size 3 elsewhere");
}

// A size-1 dim broadcasts against the same label's larger size elsewhere
// (NumPy's and torch's rule): the operand is planned without that label.
TEST(EinsumPlan, SizeOneDimsBroadcast) {
  const EinsumPlan p = plan_einsum("ij,ij->ij", {{1, 3}, {4, 3}}, {false, false});
  EXPECT_EQ(p.sizes.at('i'), 4);
  EXPECT_EQ(p.prep[0].broadcast, "i");
  EXPECT_EQ(p.prep[0].labels, "j");
  EXPECT_TRUE(p.prep[1].broadcast.empty());
  const EinsumPlan q = plan_einsum("...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}, {false, false});
  EXPECT_EQ(q.sizes.at('1'), 5);  // the second "..." dim: 1 against 5
  EXPECT_EQ(q.prep[0].broadcast, "1");
  EXPECT_NE(describe(p)[0].find("operand 0: broadcast over i"), std::string::npos);
}

// ---- dense operands -----------------------------------------------------------

TEST(Einsum, DenseSpecsMatchTheLoop) {
  Tensor a = randn64({3, 4}), b = randn64({4, 5}), sq = randn64({4, 4}), v = randn64({4});
  Tensor t3 = randn64({2, 3, 4}), t3b = randn64({2, 4, 5});
  expect_matches_naive("ij,jk->ik", {a, b});
  expect_matches_naive("ij,jk", {a, b});
  expect_matches_naive("ij->ji", {a});
  expect_matches_naive("ij->", {a});
  expect_matches_naive("ij->j", {a});
  expect_matches_naive("ii->i", {sq});
  expect_matches_naive("ii", {sq});
  expect_matches_naive("i,j->ij", {v, v});
  expect_matches_naive("i,i->", {v, v});
  expect_matches_naive("bij,bjk->bik", {t3, t3b});
  expect_matches_naive("bij,bjk->kib", {t3, t3b});
  expect_matches_naive("...ij,...jk->...ik", {t3, b});
  expect_matches_naive("bij,ij->b", {t3, a});
  expect_matches_naive("ij,jk,kl->il", {a, b, randn64({5, 2})});
  expect_matches_naive("bij,j->bi", {t3, randn64({4})});
  // Size-1 dims broadcast.
  expect_matches_naive("ij,ij->ij", {randn64({1, 4}), a});
  expect_matches_naive("bij,bjk->bik", {randn64({1, 3, 4}), randn64({2, 4, 5})});
  expect_matches_naive("...ij,...jk->...ik", {randn64({2, 1, 3, 4}), randn64({5, 4, 2})});
  expect_matches_naive("ij,jk->", {randn64({3, 1}), b});
}

TEST(Einsum, DenseGradients) {
  Variable a = param(randn64({3, 4}), "a"), b = param(randn64({4, 5}), "b"), t3 = param(randn64({2, 3, 4}), "t3");
  Variable sq = param(randn64({3, 3}), "sq");
  EXPECT_GRADCHECK([](const V& v) { return einsum("ij,jk->ki", v); }, {a, b});
  EXPECT_GRADCHECK([](const V& v) { return einsum("bij,jk->bik", v); }, {t3, b});
  EXPECT_GRADCHECK([](const V& v) { return einsum("ii->i", v); }, {sq});
  EXPECT_GRADCHECK([](const V& v) { return einsum("bij->j", v); }, {t3});
  Variable row = param(randn64({1, 4}), "row"), one = param(randn64({1, 4, 5}), "one");
  EXPECT_GRADCHECK([](const V& v) { return einsum("ij,bij->bij", v); }, {row, t3});
  EXPECT_GRADCHECK([](const V& v) { return einsum("bij,bjk->bik", v); }, {t3, one});
}

// A sparse operand with a size-1 dim broadcasts too: its entries remapped
// without the dim (still sparse, no dense fallback), and its gradient.
TEST(Einsum, ASparseOperandBroadcastsItsSizeOneDims) {
  Tensor s = random_coo3({1, 4, 6});
  Tensor d = randn64({3, 6, 2});
  expect_matches_naive("bij,bjk->bik", {s, d});
  expect_matches_naive("bjk,bij->bik", {d, s});
  Dispatcher::instance().set_fallback_is_error(true);
  std::vector<Variable> vs = {param(s, "s"), param(d, "d")};
  EXPECT_NO_THROW(sum(einsum("bij,bjk->bik", vs)).backward());
  Dispatcher::instance().set_fallback_is_error(false);
  std::vector<Variable> gs = {param(s, "s"), param(d, "d")};
  EXPECT_GRADCHECK([](const V& v) { return einsum("bij,bjk->bik", v); }, gs);
}

// ---- a sparse operand, every format -------------------------------------------

class EinsumSparseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EinsumSparseTest, EveryRouteMatchesTheLoopAndGradchecks) {
  const std::string format = GetParam();
  Tensor s = random_sparse({4, 8}, format);  // labels i j
  Tensor x_j = randn64({5, 8}), x_i = randn64({5, 4}), same = randn64({4, 8}), batch = randn64({4, 8, 3});
  struct Case {
    std::string spec;
    Tensor dense;
    bool sparse_first;
  };
  const std::vector<Case> cases = {
      {"bj,ij->bi", x_j, false},     // kSparseLinear: s as a weight [out, in]
      {"bi,ij->bj", x_i, false},     // kSparseMatmul
      {"ij,bj->ib", x_j, true},      // the sparse operand first
      {"ij,ij->ij", same, true},     // kSparseScale
      {"ij,ij->ji", same, false},    // kSparseScale, then a remap
      {"ij,ij->i", same, true},      // block diagonal over i, j contracted
      {"ij,ijk->ik", batch, true},   // block diagonal, batched
      {"ijk,ij->kj", batch, false},  // the same, the sparse operand second
      {"ij,ijk->ijk", batch, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    std::vector<Tensor> operands = c.sparse_first ? std::vector<Tensor>{s, c.dense} : std::vector<Tensor>{c.dense, s};
    expect_matches_naive(c.spec, operands);
    {
      // No route falls back to dense, forward or backward.
      Dispatcher::instance().set_fallback_is_error(true);
      std::vector<Variable> vs = {param(operands[0], "a"), param(operands[1], "b")};
      EXPECT_NO_THROW(sum(einsum(c.spec, vs)).backward());
      Dispatcher::instance().set_fallback_is_error(false);
    }
    std::vector<Variable> vs = {param(operands[0], "a"), param(operands[1], "b")};
    std::string sp = c.spec;
    EXPECT_GRADCHECK([sp](const V& v) { return einsum(sp, v); }, vs);
  }
  // Alone: a transpose, a sum, a remap to other dims.
  expect_matches_naive("ij->ji", {s});
  expect_matches_naive("ij->i", {s});
  Variable sv = param(s, "s");
  EXPECT_GRADCHECK([](const V& v) { return einsum("ij->ji", v); }, {sv});
}

TEST_P(EinsumSparseTest, TheSparseGradientKeepsTheFormat) {
  Tensor s = random_sparse({4, 8}, GetParam());
  Variable sv = param(s, "s"), x = param(randn64({5, 8}), "x");
  sum(einsum("bj,ij->bi", {x, sv})).backward();
  ASSERT_TRUE(sv.grad().defined());
  EXPECT_EQ(sv.grad().format(), GetParam());
  EXPECT_EQ(pattern_version(sv.grad()), pattern_version(s));
}

TEST_P(EinsumSparseTest, TwoSparseOperands) {
  Tensor a = random_sparse({4, 8}, GetParam()), b = random_sparse({8, 4}, "csr");
  expect_matches_naive("ij,jk->ik", {a, b});  // SpGEMM
  expect_matches_naive("ij,jk->ki", {a, b});
  expect_matches_naive("ij,ji->ij", {a, b});  // elementwise
  Variable av = param(a, "a"), bv = param(b, "b");
  EXPECT_GRADCHECK([](const V& v) { return einsum("ij,jk->ik", v); }, {av, bv});
  EXPECT_GRADCHECK([](const V& v) { return einsum("ij,ji->j", v); }, {av, bv});
}

INSTANTIATE_TEST_SUITE_P(Formats, EinsumSparseTest, ::testing::ValuesIn(kFormats));

TEST(Einsum, ABatchedSparseOperandIsOneSpmm) {
  Tensor s = random_coo3({3, 4, 5});
  Tensor d = randn64({3, 5, 2});
  expect_matches_naive("bij,bjk->bik", {s, d});
  Variable sv = param(s, "s"), dv = param(d, "d");
  EXPECT_GRADCHECK([](const V& v) { return bmm(v[0], v[1]); }, {sv, dv});
  EXPECT_TRUE(allclose(bmm(Variable(s), Variable(d)).value(), bmm(to_dense(s), d), 1e-12, 1e-12));
}

TEST(Einsum, TwoSparseOperandsWithoutARouteFallBackLoudly) {
  Tensor a = random_sparse({4, 8}, "csr"), b = random_sparse({8, 4}, "coo");
  Dispatcher& d = Dispatcher::instance();
  d.reset_fallback_counts();
  expect_matches_naive("ij,jk->ijk", {a, b});
  int64_t counted = 0;
  for (const auto& [what, n] : d.fallback_counts())
    if (what.find("einsum 'ij,jk->ijk' (coo)") != std::string::npos) counted += n;
  EXPECT_EQ(counted, 1);
  d.set_fallback_is_error(true);
  EXPECT_ERROR_NAMING(einsum("ij,jk->ijk", {a, b}), "dense fallbacks are errors");
  d.set_fallback_is_error(false);
}

TEST(Einsum, PlanTextNamesTheProducts) {
  Tensor w = random_sparse({4, 8}, "bsr");
  std::vector<std::string> lines = einsum_plan_text("bj,ij->bi", {randn64({5, 8}), w});
  bool found = false;
  for (const std::string& l : lines) found = found || l.find("sparse_linear") != std::string::npos;
  EXPECT_TRUE(found);
}

// ---- Scorch's mixture of experts, written as the slide writes it ---------------

TEST(Einsum, ScorchMixtureOfExpertsSlide) {
  const int64_t B = 6, N = 3, D_in = 4, D_out = 5;
  Tensor x0 = randn64({B, D_in}), E0 = randn64({N, D_in, D_out});
  Tensor chosen = argmax(rand({B, N}, DType::kF64, testing::test_gen()), 1);
  for (const std::string fmt : {"csr", "coo"}) {
    SCOPED_TRACE(fmt);
    Variable x = param(x0, "x"), E = param(E0, "E");
    Variable gates(one_hot(chosen, N, fmt, DType::kF64));
    Variable x_dispatch = rearrange(x, "bd->bnd", {{"n", N}});
    Variable y_experts = einsum("bnd,ndh->bnh", {x_dispatch, E});
    Variable y = einsum("bnd,bn->bd", {y_experts, gates});
    // The layer it stands for: each sample through its chosen expert.
    Variable xr = param(x0, "xr"), Er = param(E0, "Er");
    std::vector<Variable> rows;
    for (int64_t b = 0; b < B; ++b) {
      int64_t e = chosen.data<int64_t>()[b];
      rows.push_back(matmul(unsqueeze(select(xr, 0, b), 0), select(Er, 0, e)));
    }
    Variable yr = cat(rows, 0);
    EXPECT_TRUE(allclose(y.value(), yr.value(), 1e-12, 1e-12));
    Tensor g = randn64({B, D_out});
    sum(mul(y, Variable(g))).backward();
    sum(mul(yr, Variable(g))).backward();
    EXPECT_TRUE(allclose(x.grad(), xr.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(allclose(E.grad(), Er.grad(), 1e-12, 1e-12));
    EXPECT_GRADCHECK(
        [gates, N](const V& v) {
          return einsum("bnd,bn->bd", {einsum("bnd,ndh->bnh", {rearrange(v[0], "bd->bnd", {{"n", N}}), v[1]}), gates});
        },
        {param(x0, "x"), param(E0, "E")});
  }
}

// ---- rearrange --------------------------------------------------------------------

TEST(Rearrange, DenseSplitsMergesPermutesAndRepeats) {
  Tensor x = randn64({2, 6});
  Tensor split = rearrange(x, "b (h d) -> b h d", {{"h", 3}});
  EXPECT_TRUE(allclose(split, x.reshape({2, 3, 2})));
  Tensor t = randn64({2, 3, 4, 5});
  EXPECT_TRUE(allclose(rearrange(t, "b h t d -> b t (h d)"), t.permute({0, 2, 1, 3}).reshape({2, 4, 15})));
  Tensor rep = rearrange(x, "bd->bnd", {{"n", 4}});
  EXPECT_EQ(rep.shape(), (Shape{2, 4, 6}));
  EXPECT_TRUE(allclose(rep, x.unsqueeze(1).expand({2, 4, 6})));
  Variable xv = param(randn64({2, 6}), "x");
  EXPECT_GRADCHECK([](const V& v) { return rearrange(v[0], "b (h d) -> d b h", {{"d", 2}}); }, {xv});
  EXPECT_GRADCHECK([](const V& v) { return rearrange(v[0], "b d -> (n b) d", {{"n", 3}}); }, {xv});
}

TEST(Rearrange, SparseOperandsKeepTheirEntries) {
  for (const std::string& format : kFormats) {
    SCOPED_TRACE(format);
    Tensor s = random_sparse({4, 8}, format);
    for (const auto& [pattern, sizes] : std::vector<std::pair<std::string, std::map<std::string, int64_t>>>{
             {"i j -> j i", {}},
             {"i (j k) -> i j k", {{"k", 2}}},
             {"i j -> (i j)", {}},
             {"i j -> i n j", {{"n", 3}}},
         }) {
      SCOPED_TRACE(pattern);
      Tensor got = rearrange(s, pattern, sizes);
      EXPECT_TRUE(got.is_sparse());
      EXPECT_TRUE(allclose(to_dense(got), rearrange(to_dense(s), pattern, sizes), 0, 0));
      Variable sv = param(s, "s");
      std::string p = pattern;
      std::map<std::string, int64_t> z = sizes;
      EXPECT_GRADCHECK([p, z](const V& v) { return rearrange(v[0], p, z); }, {sv});
    }
  }
}

TEST(Rearrange, ErrorsNameTheProblem) {
  Tensor x = randn64({2, 6});
  EXPECT_ERROR_NAMING(rearrange(x, "b d", {}), "expected one \"->\"");
  EXPECT_ERROR_NAMING(rearrange(x, "b (h d) -> b h d", {}), "both of unknown size");
  EXPECT_ERROR_NAMING(rearrange(x, "b (h d) -> b h d", {{"h", 4}}), "does not split into parts of 4");
  EXPECT_ERROR_NAMING(rearrange(x, "b d -> b", {}), "axis 'd' of the left side is missing on the right");
  EXPECT_ERROR_NAMING(rearrange(x, "b d -> b n d", {}), "the new axis 'n' needs its size");
  EXPECT_ERROR_NAMING(rearrange(x, "b d c -> b d c", {}), "the left side names 3 dim(s), the operand has 2");
  EXPECT_ERROR_NAMING(rearrange(x, "b d -> b d", {{"q", 2}}), "sizes names 'q'");
  EXPECT_ERROR_NAMING(rearrange(x, "b (d -> b d", {}), "'(' not closed");
}

// ---- one_hot ------------------------------------------------------------------------

TEST(OneHot, RowsOfOneEntryInAnyFormat) {
  Tensor idx = from_vector<int64_t>({2, 0, 1, 2});
  Tensor want = zeros({4, 3}, DType::kF64);
  for (int64_t r = 0; r < 4; ++r) want.data<double>()[r * 3 + idx.data<int64_t>()[r]] = 1.0;
  Tensor csr = one_hot(idx, 3, "", DType::kF64);
  EXPECT_EQ(csr.format(), "csr");
  EXPECT_EQ(values(csr).numel(), 4);
  EXPECT_TRUE(allclose(to_dense(csr), want, 0, 0));
  for (const char* f : {"coo", "csc", "dense", "masked"})
    EXPECT_TRUE(allclose(to_dense(one_hot(idx, 3, f, DType::kF64)), want, 0, 0)) << f;
  EXPECT_EQ(one_hot(idx).size(1), 3);  // inferred
  Tensor idx2 = from_vector<int64_t>({1, 0, 2, 1}, {2, 2});
  Tensor coo = one_hot(idx2, 3);
  EXPECT_EQ(coo.format(), "coo");
  EXPECT_EQ(coo.shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(allclose(to_dense(coo).reshape({4, 3}), to_dense(one_hot(idx2.reshape({4}), 3)), 0, 0));
}

TEST(OneHot, ErrorsNameTheIndex) {
  EXPECT_ERROR_NAMING(one_hot(from_vector<int64_t>({0, 5, 1}), 3), "index 5 at flat position 1");
  EXPECT_ERROR_NAMING(one_hot(from_vector<int64_t>({0, -1}), 3), "index -1 at flat position 1");
  EXPECT_ERROR_NAMING(one_hot(randn64({3}), 3), "expected a dense integer tensor");
  EXPECT_ERROR_NAMING(one_hot(from_vector<int64_t>({0}), 3, "", DType::kI64), "must be floating");
  EXPECT_ERROR_NAMING(one_hot(from_vector<int64_t>({0}), -2), "num_classes must be -1");
}

// ---- sparse-by-sparse gradients outside einsum ------------------------------------

TEST(SparseBySparse, ProductsAndSumsHaveGradients) {
  Variable a = param(random_sparse({4, 8}, "csr"), "a"), b = param(random_sparse({8, 4}, "csr"), "b");
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], v[1]); }, {a, b});
  Variable c = param(random_sparse({4, 8}, "coo"), "c"), d = param(random_sparse({4, 8}, "coo"), "d");
  EXPECT_GRADCHECK([](const V& v) { return add(v[0], v[1]); }, {c, d});
  EXPECT_GRADCHECK([](const V& v) { return mul(v[0], v[1]); }, {c, d});
  Variable x = param(random_sparse({4, 8}, "csr"), "x"), w = param(random_sparse({4, 8}, "bsr"), "w");
  EXPECT_GRADCHECK([](const V& v) { return linear(v[0], v[1]); }, {x, w});
}

}  // namespace
}  // namespace coppice
