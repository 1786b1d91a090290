// Tests for the built-in sparsifiers (sparsifiers/builtin.h) on the CPU:
// exact masks on crafted inputs (ties, NaN), exact counts of the fraction
// sparsifiers over shapes and sparsities, n:m validity along any dim,
// movement scores over steps, determinism of the random one, bad parameters.
#include "sparsifiers/builtin.h"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/nm_transposable.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/philox.h"
#include "tests/sparsifiers/test_util.h"

namespace coppice {
namespace {

using testing_sparsifiers::bits;
using testing_sparsifiers::count;
using testing_sparsifiers::random_tensor;
using testing_sparsifiers::throws_with;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const SparsifyContext kCtx{};

Tensor vec(const std::vector<double>& v, const Shape& shape = {}) {
  return from_vector(v, shape.empty() ? Shape{static_cast<int64_t>(v.size())} : shape, TensorOptions(DType::kF32));
}

TEST(KindTest, Names) {
  EXPECT_STREQ(sparsifier_kind_name(SparsifierKind::kStreaming), "streaming");
  EXPECT_STREQ(sparsifier_kind_name(SparsifierKind::kMaterializing), "materializing");
  EXPECT_STREQ(sparsifier_kind_name(SparsifierKind::kBlocking), "blocking");
  EXPECT_EQ(KeepAllSparsifier().kind(), SparsifierKind::kStreaming);
  EXPECT_EQ(ThresholdSparsifier(0.1).kind(), SparsifierKind::kStreaming);
  EXPECT_EQ(RandomFractionSparsifier(0.1).kind(), SparsifierKind::kStreaming);
  EXPECT_EQ(MagnitudeFractionSparsifier(0.1).kind(), SparsifierKind::kMaterializing);
  EXPECT_EQ(BlockMagnitudeSparsifier(0.1, 2, 2).kind(), SparsifierKind::kMaterializing);
  EXPECT_EQ(MovementSparsifier(0.1).kind(), SparsifierKind::kMaterializing);
  EXPECT_EQ(NmSparsifier(2, 4).kind(), SparsifierKind::kBlocking);
}

TEST(KeptCountTest, Rounding) {
  EXPECT_EQ(kept_count(0.0, 10), 10);
  EXPECT_EQ(kept_count(1.0, 10), 0);
  EXPECT_EQ(kept_count(0.25, 10), 7);  // round(2.5) = 3 (half away from zero)
  EXPECT_EQ(kept_count(0.9, 7), 1);    // round(6.3) = 6
  EXPECT_EQ(kept_count(0.5, 0), 0);
  EXPECT_EQ(kept_count(0.9, 4), 1);  // round(3.6) = 4 would empty it: a density > 0 keeps one
  EXPECT_EQ(kept_count(0.99, 50), 1);
}

TEST(KeepAllTest, KeepsEverything) {
  KeepAllSparsifier s;
  Tensor x = vec({0.0, -1.0, 2.0, kNaN});
  EXPECT_EQ(bits(s.keep_mask(x, kCtx)), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_TRUE(s.apply(x, {}, kCtx).is_same(x));
  EXPECT_EQ(s.describe(), "keep_all");
}

TEST(ThresholdTest, KeepsAboveThreshold) {
  ThresholdSparsifier s(0.5);
  Tensor x = vec({0.75, -1.5, 0.25, -0.375, kNaN, 2.0, 0.5, -0.5});  // exactly 0.5 is not above it
  EXPECT_EQ(bits(s.keep_mask(x, kCtx)), (std::vector<int>{1, 1, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(s.apply(x, {}, kCtx).to_vector<double>(), (std::vector<double>{0.75, -1.5, 0, 0, 0, 2.0, 0, 0}));
  EXPECT_EQ(bits(ThresholdSparsifier(0.0).keep_mask(vec({0.0, -0.0, 1e-30, -2.0}), kCtx)),
            (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(s.describe(), "threshold(threshold=0.5)");
}

TEST(ThresholdTest, AllFloatingDtypes) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor x = vec({0.5, -1.5, 0.25, -0.375}).to(d);
    ThresholdSparsifier s(0.3);
    EXPECT_EQ(bits(s.keep_mask(x, kCtx)), (std::vector<int>{1, 1, 0, 1})) << dtype_name(d);
    Tensor y = s.apply(x, {}, kCtx);
    EXPECT_EQ(y.dtype(), d);
    EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{0.5, -1.5, 0, -0.375})) << dtype_name(d);
  }
}

TEST(ThresholdTest, BadThreshold) {
  EXPECT_TRUE(throws_with([] { ThresholdSparsifier(-0.5); }, {"threshold", "-0.5"}));
  EXPECT_TRUE(throws_with([] { ThresholdSparsifier{kNaN}; }, {"threshold", "nan"}));
}

TEST(RandomTest, DeterministicPerContextAndDiffersAcrossSteps) {
  RandomFractionSparsifier s(0.5);
  Tensor x = random_tensor({64, 64}, 1);
  SparsifyContext a{7, 11, 3, 0};
  EXPECT_EQ(bits(s.keep_mask(x, a)), bits(s.keep_mask(x, a)));
  SparsifyContext next = a;
  next.step = 4;
  EXPECT_NE(bits(s.keep_mask(x, a)), bits(s.keep_mask(x, next)));
  SparsifyContext other_rank = a;
  other_rank.rank = 1;
  EXPECT_NE(bits(s.keep_mask(x, a)), bits(s.keep_mask(x, other_rank)));
  SparsifyContext other_purpose = a;
  other_purpose.purpose = 12;
  EXPECT_NE(bits(s.keep_mask(x, a)), bits(s.keep_mask(x, other_purpose)));
}

TEST(RandomTest, MaskIsThePhiloxStreamOfTheKeyedGenerator) {
  const double p = 0.3;
  RandomFractionSparsifier s(p);
  SparsifyContext ctx{5, 6, 7, 8};
  Tensor x = random_tensor({1000}, 2);
  std::vector<int> got = bits(s.keep_mask(x, ctx));
  Generator g = Generator::keyed(5, 6, 7, 8);
  const uint64_t offset = g.advance();
  for (uint64_t i = 0; i < got.size(); ++i) {
    const bool keep = philox::uniform_f32(philox::word(g.seed(), offset, i)) >= static_cast<float>(p);
    ASSERT_EQ(got[i], keep ? 1 : 0) << i;
  }
}

TEST(RandomTest, FractionAndRescale) {
  Tensor x = random_tensor({200000}, 3);
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    RandomFractionSparsifier s(p);
    const double kept = static_cast<double>(count(s.keep_mask(x, kCtx))) / 200000.0;
    EXPECT_NEAR(kept, 1.0 - p, 0.005) << p;
  }
  EXPECT_EQ(count(RandomFractionSparsifier(0.0).keep_mask(x, kCtx)), 200000);
  EXPECT_EQ(count(RandomFractionSparsifier(1.0).keep_mask(x, kCtx)), 0);

  RandomFractionSparsifier r(0.75, true);
  EXPECT_DOUBLE_EQ(r.value_scale(), 4.0);
  EXPECT_DOUBLE_EQ(RandomFractionSparsifier(0.75).value_scale(), 1.0);
  SparsifyContext ctx{1, 2, 3, 4};
  Tensor small = random_tensor({4096}, 4);
  std::vector<int> m = bits(r.keep_mask(small, ctx));
  std::vector<double> y = r.apply(small, {}, ctx).to_vector<double>();
  std::vector<double> xv = small.to_vector<double>();
  for (size_t i = 0; i < m.size(); ++i)
    EXPECT_EQ(y[i], m[i] ? static_cast<double>(static_cast<float>(xv[i] * 4.0)) : 0.0);
  EXPECT_EQ(r.describe(), "random(sparsity=0.75, rescale=true)");
}

TEST(RandomTest, BadParameters) {
  EXPECT_TRUE(throws_with([] { RandomFractionSparsifier(1.5); }, {"random", "sparsity", "1.5"}));
  EXPECT_TRUE(throws_with([] { RandomFractionSparsifier(-0.1); }, {"random", "-0.1"}));
  EXPECT_TRUE(throws_with([] { RandomFractionSparsifier(1.0, true); }, {"random", "rescale"}));
}

TEST(MagnitudeTest, CraftedWithTiesAndNaN) {
  MagnitudeFractionSparsifier s(0.5);
  // |x| = 3, 1, 2, 3, 0.5, 2: keep 3: both 3s, then the first 2 (index 2 before 5).
  EXPECT_EQ(bits(s.keep_mask(vec({3, -1, 2, -3, 0.5, 2}), kCtx)), (std::vector<int>{1, 0, 1, 1, 0, 0}));
  // All equal: the lowest indices.
  EXPECT_EQ(bits(s.keep_mask(vec({1, -1, 1, -1, 1, -1}), kCtx)), (std::vector<int>{1, 1, 1, 0, 0, 0}));
  // NaN counts as the largest magnitude; -0 ties with +0.
  EXPECT_EQ(bits(MagnitudeFractionSparsifier(0.75).keep_mask(vec({1, kNaN, 5, 2}), kCtx)),
            (std::vector<int>{0, 1, 0, 0}));
  EXPECT_EQ(bits(MagnitudeFractionSparsifier(0.5).keep_mask(vec({-0.0, 0.0, 0.0, 1.0}), kCtx)),
            (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(s.apply(vec({3, -1, 2, -3, 0.5, 2}), {}, kCtx).to_vector<double>(),
            (std::vector<double>{3, 0, 2, -3, 0, 0}));
}

// Exactly k kept, and every kept |x| at least every dropped one (ties to lower index).
void expect_exact_topk(const Tensor& x, const Tensor& mask, int64_t k, bool magnitude) {
  std::vector<double> v = x.to_vector<double>();
  std::vector<int> m = bits(mask);
  int64_t kept = 0;
  double min_kept = std::numeric_limits<double>::infinity(), max_dropped = -std::numeric_limits<double>::infinity();
  int64_t last_kept_at_min = -1, first_dropped_at_max = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    const double key = magnitude ? std::abs(v[i]) : v[i];
    if (m[i]) {
      ++kept;
      if (key < min_kept || key == min_kept) {
        min_kept = key;
        last_kept_at_min = static_cast<int64_t>(i);
      }
    } else if (key > max_dropped) {
      max_dropped = key;
      first_dropped_at_max = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(kept, k);
  if (kept > 0 && kept < static_cast<int64_t>(v.size())) {
    EXPECT_GE(min_kept, max_dropped);
    if (min_kept == max_dropped) { EXPECT_LT(last_kept_at_min, first_dropped_at_max); }
  }
}

TEST(MagnitudeTest, ExactCountsOverShapesAndSparsities) {
  const std::vector<Shape> shapes = {{1}, {7}, {13, 17}, {4, 5, 6}, {1000}};
  const std::vector<double> sparsities = {0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0};
  uint64_t seed = 10;
  for (const Shape& shape : shapes) {
    for (bool ties : {false, true}) {
      for (DType d : {DType::kF32, DType::kF64}) {
        Tensor x = random_tensor(shape, ++seed, ties, d);
        for (double s : sparsities) {
          SCOPED_TRACE(shape_to_string(shape) + " s=" + std::to_string(s));
          expect_exact_topk(x, MagnitudeFractionSparsifier(s).keep_mask(x, kCtx), kept_count(s, x.numel()), true);
        }
      }
    }
  }
}

TEST(MagnitudeTest, BadSparsity) {
  EXPECT_TRUE(throws_with([] { MagnitudeFractionSparsifier(1.01); }, {"magnitude", "1.01"}));
  EXPECT_TRUE(throws_with([] { MagnitudeFractionSparsifier{kNaN}; }, {"magnitude", "sparsity"}));
}

TEST(BlockMagnitudeTest, CraftedL2AndL1) {
  // 2x2 blocks of a 4x4: b0 = [3 0; 0 0] (L2^2 9, L1 3), b1 = [1 1; 1 1] (4, 4),
  // b2 = zeros, b3 = [0.5 ...] (1, 2).
  Tensor x = vec({3, 0, 1, 1,      //
                  0, 0, 1, -1,     //
                  0, 0, 0.5, 0.5,  //
                  0, 0, 0.5, -0.5},
                 {4, 4});
  BlockMagnitudeSparsifier l2(0.75, 2, 2, BlockNorm::kL2), l1(0.75, 2, 2, BlockNorm::kL1);
  EXPECT_EQ(bits(l2.keep_mask(x, kCtx)), (std::vector<int>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(bits(l1.keep_mask(x, kCtx)), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(l2.block_scores(x).to_vector<double>(), (std::vector<double>{9, 4, 0, 1}));
  EXPECT_EQ(l1.block_scores(x).to_vector<double>(), (std::vector<double>{3, 4, 0, 2}));
  // Ties between blocks go to the lower block (row-major).
  Tensor ones4 = ones({4, 4});
  EXPECT_EQ(bits(BlockMagnitudeSparsifier(0.5, 2, 2).keep_mask(ones4, kCtx)),
            (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(l2.describe(), "block_magnitude(sparsity=0.75, block_rows=2, block_cols=2, norm=l2)");
}

TEST(BlockMagnitudeTest, ExactBlockCounts) {
  uint64_t seed = 100;
  for (auto [rows, cols, bh, bw] : std::vector<std::array<int64_t, 4>>{
           {64, 48, 8, 4}, {6, 9, 3, 3}, {5, 7, 1, 1}, {32, 32, 32, 32}, {16, 8, 2, 8}}) {
    for (double s : {0.0, 0.3, 0.5, 0.9, 0.99, 1.0}) {
      ++seed;
      Tensor x = random_tensor({rows, cols}, seed, seed % 2 == 0);
      BlockMagnitudeSparsifier sp(s, bh, bw);
      Tensor mask = sp.keep_mask(x, kCtx);
      const int64_t nb = (rows / bh) * (cols / bw);
      EXPECT_EQ(count(mask), kept_count(s, nb) * bh * bw) << rows << "x" << cols << " s=" << s;
      // The mask is constant on every block, and the kept blocks are the top scores.
      std::vector<int> m = bits(mask);
      std::vector<double> block_mask;
      for (int64_t br = 0; br < rows / bh; ++br) {
        for (int64_t bc = 0; bc < cols / bw; ++bc) {
          const int first = m[br * bh * cols + bc * bw];
          for (int64_t i = 0; i < bh; ++i) {
            for (int64_t j = 0; j < bw; ++j) ASSERT_EQ(m[(br * bh + i) * cols + bc * bw + j], first);
          }
          block_mask.push_back(first);
        }
      }
      expect_exact_topk(sp.block_scores(x), from_vector(block_mask, {rows / bh, cols / bw}).to(DType::kBool),
                        kept_count(s, nb), false);
    }
  }
}

// Block scores of a sum of products, a chunk of rows at a time, are those of
// the product formed whole: f64 factors, transposed views, chunks of one
// block row and of several, one pair and three.
TEST(ProductBlockScoresTest, MatchTheScoresOfTheWholeProduct) {
  const Tensor a1 = random_tensor({7, 24}, 1, false, DType::kF64).t();  // [24, 7], strided
  const Tensor b1 = random_tensor({7, 20}, 2, false, DType::kF64);
  const Tensor a2 = random_tensor({24, 3}, 3, false, DType::kF64);
  const Tensor b2 = random_tensor({20, 3}, 4, false, DType::kF64).t();
  const Tensor whole = add(matmul(a1, b1), matmul(a2, b2));
  for (int64_t chunk : {0, 4, 8, 24, 100}) {
    const Tensor expect = sparsify::block_scores(whole, 4, 5, false, "test");
    const Tensor got = sparsify::product_block_scores({{a1, b1}, {a2, b2}}, 4, 5, "test", chunk);
    EXPECT_EQ(got.shape(), (Shape{6, 4}));
    EXPECT_TRUE(allclose(got, expect, 1e-12, 0.0)) << chunk;
  }
  EXPECT_TRUE(allclose(sparsify::product_block_scores({{a1, b1}}, 2, 2, "t"),
                       sparsify::block_scores(matmul(a1, b1), 2, 2, false, "t"), 1e-12, 0.0));
  EXPECT_TRUE(throws_with([&] { sparsify::product_block_scores({}, 4, 5, "op"); }, {"op", "at least one pair"}));
  EXPECT_TRUE(throws_with(
      [&] {
        sparsify::product_block_scores({{a1, a2}}, 4, 5, "op");
      },
      {"op", "[24, 7]", "[24, 3]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        sparsify::product_block_scores({{a1, b1}, {a2, a2.t()}}, 4, 5, "op");
      },
      {"op", "[24, 20]"}));
  EXPECT_TRUE(throws_with([&] { sparsify::product_block_scores({{a1, b1}}, 5, 5, "op"); }, {"op", "5x5"}));
  EXPECT_TRUE(throws_with([&] { sparsify::product_block_scores({{a1, b1}}, 4, 5, "op", 6); }, {"op", "chunk_rows"}));
  EXPECT_TRUE(throws_with(
      [&] {
        sparsify::product_block_scores({{a1, b1.to(DType::kF32)}}, 4, 5, "op");
      },
      {"op", "one dtype"}));
}

TEST(BlockMagnitudeTest, BadParameters) {
  EXPECT_TRUE(throws_with([] { BlockMagnitudeSparsifier(1.5, 2, 2); }, {"block_magnitude", "1.5"}));
  EXPECT_TRUE(throws_with([] { BlockMagnitudeSparsifier(0.5, 0, 2); }, {"block_magnitude", "0x2"}));
  BlockMagnitudeSparsifier s(0.5, 3, 3);
  EXPECT_TRUE(throws_with(
      [&] {
        s.keep_mask(ones({4, 6}), kCtx);
      },
      {"block_magnitude", "block_rows=3", "[4, 6]", "whole number of blocks"}));
  EXPECT_TRUE(throws_with([&] { s.keep_mask(ones({9}), kCtx); }, {"block_magnitude", "2-D"}));
  // The same reasons, asked before any tensor exists (schedules and job validation do).
  EXPECT_EQ(s.shape_mismatch({6, 9}), "");
  EXPECT_NE(s.shape_mismatch({4, 6}).find("block_cols=3, norm=l2): the shape [4, 6] is not a whole number of blocks"),
            std::string::npos);
  EXPECT_NE(s.shape_mismatch({9}).find("2-D"), std::string::npos);
  EXPECT_NE(BlockMagnitudeSparsifier(0.5, int64_t{1} << 62, 1).shape_mismatch({8, 8}).find("not a whole number"),
            std::string::npos);
}

TEST(NmTest, Crafted) {
  NmSparsifier s(2, 4);
  EXPECT_EQ(bits(s.keep_mask(vec({1, -4, 3, 2, 0, 0, 5, 0}), kCtx)), (std::vector<int>{0, 1, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(bits(NmSparsifier(1, 2).keep_mask(vec({kNaN, 9, 2, -2}), kCtx)), (std::vector<int>{1, 0, 1, 0}));
  // Along dim 0 of a [4, 2]: groups are the columns.
  EXPECT_EQ(bits(NmSparsifier(1, 4, 0).keep_mask(vec({1, 8, 4, 2, 3, 6, 2, 8}, {4, 2}), kCtx)),
            (std::vector<int>{0, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(s.describe(), "nm(n=2, m=4, dim=-1)");
}

TEST(NmTest, ValidityAlongAnyDim) {
  const Shape shape = {4, 8, 12};
  uint64_t seed = 200;
  for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {2, 4}, {3, 4}, {4, 4}, {1, 2}, {2, 8}, {1, 1}}) {
    for (int64_t dim : {-1, 0, 1, 2}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      if (shape[d] % m != 0) continue;
      for (bool ties : {false, true}) {
        Tensor x = random_tensor(shape, ++seed, ties);
        Tensor mask = NmSparsifier(n, m, dim).keep_mask(x, kCtx);
        // Move dim last, then check every group of m.
        std::vector<int64_t> perm;
        for (int64_t i = 0; i < 3; ++i)
          if (i != d) perm.push_back(i);
        perm.push_back(d);
        Tensor xp = x.permute(perm).contiguous().reshape({-1, m});
        Tensor mp = mask.permute(perm).contiguous().reshape({-1, m});
        for (int64_t g = 0; g < xp.size(0); ++g) {
          SCOPED_TRACE("n=" + std::to_string(n) + " m=" + std::to_string(m) + " dim=" + std::to_string(dim) +
                       " group " + std::to_string(g));
          expect_exact_topk(xp.select(0, g), mp.select(0, g), n, true);
        }
      }
    }
  }
}

// Transposable: the mask of a [8, 12] is 2:4 along rows and along columns,
// and it is the one transposable_nm_mask picks.
TEST(NmTest, TransposableKeepsColumnsNmToo) {
  const Tensor x = random_tensor({8, 12}, 301, false);
  const NmSparsifier s(2, 4, -1, true);
  EXPECT_EQ(s.describe(), "nm(n=2, m=4, dim=-1, transposable)");
  const Tensor mask = s.keep_mask(x, kCtx);
  EXPECT_EQ(bits(mask), bits(transposable_nm_mask(x, 2, 4)));
  const std::vector<int> b = bits(mask);
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t g = 0; g < 3; ++g) {
      int kept = 0;
      for (int64_t c = 4 * g; c < 4 * g + 4; ++c) kept += b[static_cast<size_t>(r * 12 + c)];
      EXPECT_EQ(kept, 2) << "row " << r << " group " << g;
    }
  }
  for (int64_t c = 0; c < 12; ++c) {
    for (int64_t g = 0; g < 2; ++g) {
      int kept = 0;
      for (int64_t r = 4 * g; r < 4 * g + 4; ++r) kept += b[static_cast<size_t>(r * 12 + c)];
      EXPECT_EQ(kept, 2) << "column " << c << " group " << g;
    }
  }
  EXPECT_TRUE(throws_with([] { NmSparsifier(2, 8, -1, true); }, {"transposable", "m <= 4", "m = 8"}));
  EXPECT_TRUE(throws_with([] { NmSparsifier(2, 4, 0, true); }, {"transposable", "dim = 0"}));
  EXPECT_TRUE(throws_with([&] { s.keep_mask(ones({6, 8}), kCtx); }, {"transposable", "both dims", "[6, 8]"}));
  EXPECT_NE(s.shape_mismatch({4, 4, 4}).find("2-D"), std::string::npos);
}

TEST(NmTest, BadParameters) {
  EXPECT_TRUE(throws_with([] { NmSparsifier(3, 2); }, {"nm", "n = 3", "m = 2"}));
  EXPECT_TRUE(throws_with([] { NmSparsifier(0, 4); }, {"nm", "n = 0"}));
  EXPECT_TRUE(throws_with([] { NmSparsifier(1, 300); }, {"nm", "m = 300"}));
  EXPECT_TRUE(throws_with([] { NmSparsifier(2, 4).keep_mask(ones({3, 6}), kCtx); }, {"nm(n=2, m=4", "[3, 6]"}));
  EXPECT_TRUE(throws_with([] { NmSparsifier(2, 4, 2).keep_mask(ones({4, 4}), kCtx); }, {"nm(n=2", "dim 2"}));
  EXPECT_EQ(NmSparsifier(2, 4).shape_mismatch({3, 8}), "");
  EXPECT_EQ(NmSparsifier(2, 4, 0).shape_mismatch({8, 3}), "");
  EXPECT_NE(NmSparsifier(2, 4).shape_mismatch({3, 6}).find("m = 4 does not divide dim -1 of shape [3, 6]"),
            std::string::npos);
  EXPECT_NE(NmSparsifier(2, 4, 2).shape_mismatch({4, 4}).find("dim 2 is out of range"), std::string::npos);
  EXPECT_NE(NmSparsifier(2, 4).shape_mismatch({}).find("0-d"), std::string::npos);
}

TEST(MovementTest, ScoresAccumulateOverSteps) {
  MovementSparsifier s(0.5);
  EXPECT_TRUE(throws_with([&] { s.keep_mask(ones({4}), kCtx); }, {"movement", "accumulate"}));
  Tensor w1 = vec({1, -2, 3, 0.5}), g1 = vec({0.5, 0.5, -1, 2});
  Tensor w2 = vec({1, -1, 2, 0.5}), g2 = vec({-1, 1, 0.5, -2});
  s.accumulate(w1, g1);
  EXPECT_EQ(s.steps(), 1);
  EXPECT_EQ(s.scores().to_vector<double>(), (std::vector<double>{-0.5, 1, 3, -1}));
  EXPECT_EQ(bits(s.keep_mask(w1, kCtx)), (std::vector<int>{0, 1, 1, 0}));
  s.accumulate(w2, g2);
  EXPECT_EQ(s.steps(), 2);
  // S = (-0.5 + 1, 1 + 1, 3 - 1, -1 + 1) = (0.5, 2, 2, 0).
  EXPECT_EQ(s.scores().to_vector<double>(), (std::vector<double>{0.5, 2, 2, 0}));
  EXPECT_EQ(bits(s.keep_mask(w2, kCtx)), (std::vector<int>{0, 1, 1, 0}));
}

TEST(MovementTest, TiesCountsResetAndErrors) {
  MovementSparsifier s(0.25);
  EXPECT_TRUE(throws_with([&] { s.keep_mask(ones({4}), kCtx); }, {"movement(sparsity=0.25)", "no scores"}));
  s.accumulate(vec({1, 1, 1, 1}), vec({-1, -1, -1, -1}));  // all scores 1: the first three
  EXPECT_EQ(bits(s.keep_mask(ones({4}), kCtx)), (std::vector<int>{1, 1, 1, 0}));
  EXPECT_TRUE(throws_with([&] { s.keep_mask(ones({5}), kCtx); }, {"movement", "[5]", "[4]"}));
  EXPECT_TRUE(throws_with([&] { s.accumulate(ones({5}), ones({5})); }, {"movement", "reset"}));
  EXPECT_TRUE(throws_with([&] { s.accumulate(ones({4}), ones({5})); }, {"movement", "[4]", "[5]"}));
  s.reset();
  EXPECT_FALSE(s.scores().defined());
  EXPECT_EQ(s.steps(), 0);
  s.accumulate(ones({5}), ones({5}));
  EXPECT_EQ(s.scores().shape(), (Shape{5}));
  Tensor w = random_tensor({30, 40}, 5), g = random_tensor({30, 40}, 6);
  for (double sp : {0.0, 0.1, 0.5, 0.97, 1.0}) {
    MovementSparsifier m(sp);
    for (int step = 0; step < 3; ++step) m.accumulate(w, g);
    expect_exact_topk(m.scores(), m.keep_mask(w, kCtx), kept_count(sp, 1200), false);
    EXPECT_TRUE(allclose(m.scores(), mul(mul(w, g), -3.0), 1e-6, 1e-6));
  }
  EXPECT_TRUE(throws_with([] { MovementSparsifier(-1); }, {"movement", "-1"}));
}

}  // namespace
}  // namespace coppice
