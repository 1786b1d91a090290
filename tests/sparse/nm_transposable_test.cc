// Tests for sparse/nm_transposable.h: the mask and its transpose are n:m, it
// keeps the most a transposable mask can (against a brute force over every
// 0/1 tile), ties and NaN follow the documented rule, bad input is refused.
#include "sparse/nm_transposable.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/nm.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::f32;

// Every m x m tile of `mask` (bool [rows, cols]) keeps exactly n entries in
// each of its rows and columns.
::testing::AssertionResult tiles_are_transposable(const Tensor& mask, int64_t n, int64_t m) {
  const std::vector<int> k = mask.to_vector<int>();
  const int64_t rows = mask.size(0), cols = mask.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols; g += m) {
      int64_t row_count = 0;
      for (int64_t j = 0; j < m; ++j) row_count += k[static_cast<size_t>(r * cols + g + j)];
      if (row_count != n) return ::testing::AssertionFailure() << "row " << r << ", columns " << g << ": " << row_count;
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t g = 0; g < rows; g += m) {
      int64_t col_count = 0;
      for (int64_t i = 0; i < m; ++i) col_count += k[static_cast<size_t>((g + i) * cols + c)];
      if (col_count != n) return ::testing::AssertionFailure() << "column " << c << ", rows " << g << ": " << col_count;
    }
  }
  return ::testing::AssertionSuccess();
}

// The sum of |w| where `mask` is true, in f64.
double kept_magnitude(const Tensor& w, const Tensor& mask) {
  const std::vector<double> x = w.to_vector<double>();
  const std::vector<int> k = mask.to_vector<int>();
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += k[i] ? std::fabs(x[i]) : 0.0;
  return s;
}

// The sum of |x| over all of x, in f64.
double sum_abs(const Tensor& x) {
  double s = 0.0;
  for (double v : x.to_vector<double>()) s += std::fabs(v);
  return s;
}

// The m x m 0/1 matrices (as bit sets, bit i * m + j for row i, column j)
// with n ones in every row and column, found by testing all 2^(m * m) of them:
// an enumeration independent of the implementation's.
std::vector<uint32_t> brute_force_patterns(int64_t n, int64_t m) {
  std::vector<uint32_t> out;
  for (uint32_t b = 0; b < (1u << (m * m)); ++b) {
    bool ok = true;
    for (int64_t i = 0; i < m && ok; ++i) {
      int64_t row = 0, col = 0;
      for (int64_t j = 0; j < m; ++j) {
        row += (b >> (i * m + j)) & 1u;
        col += (b >> (j * m + i)) & 1u;
      }
      ok = row == n && col == n;
    }
    if (ok) out.push_back(b);
  }
  return out;
}

// The largest |x| sum (x: one m x m tile, row-major) any of `patterns` keeps.
double brute_force_best(const std::vector<double>& x, const std::vector<uint32_t>& patterns) {
  double best = -1.0;
  for (uint32_t b : patterns) {
    double s = 0.0;
    for (size_t i = 0; i < x.size(); ++i) s += ((b >> i) & 1u) ? std::fabs(x[i]) : 0.0;
    best = std::max(best, s);
  }
  return best;
}

TEST(NmTransposableTest, BruteForceFindsTheKnownPatternCounts) {
  // The counts of the doc comment: 2:4 has 90 patterns.
  EXPECT_EQ(brute_force_patterns(2, 4).size(), 90u);
  EXPECT_EQ(brute_force_patterns(1, 4).size(), 24u);
  EXPECT_EQ(brute_force_patterns(1, 2).size(), 2u);
  EXPECT_EQ(brute_force_patterns(4, 4).size(), 1u);
}

TEST(NmTransposableTest, MaskAndItsTransposeAreTwoFour) {
  Tensor w = testing::random_sparse({16, 24}, 0.9, 3);
  Tensor mask = transposable_nm_mask(w);
  EXPECT_EQ(mask.dtype(), DType::kBool);
  EXPECT_EQ(mask.shape(), (Shape{16, 24}));
  EXPECT_TRUE(tiles_are_transposable(mask, 2, 4));
  // nm_compress refuses a group with more than n kept, along w's rows and
  // along its columns (the rows of w^T).
  Tensor a = nm_compress(w, mask, 2, 4);
  Tensor at = nm_compress(w.t().contiguous(), mask.t().contiguous(), 2, 4);
  EXPECT_TRUE(testing::exact_equal(to_dense(a), where(mask, w, zeros_like(w))));
  EXPECT_TRUE(testing::exact_equal(to_dense(at), to_dense(a).t().contiguous()));
}

TEST(NmTransposableTest, KeepsTheMostOfAnyTransposablePattern) {
  for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{2, 4}, {1, 4}, {3, 4}, {1, 2}}) {
    const std::vector<uint32_t> patterns = brute_force_patterns(n, m);
    for (DType dtype : {DType::kF32, DType::kF64}) {
      for (uint64_t seed = 0; seed < 150; ++seed) {
        // Dense random tiles (density 1), so that ties are rare and the best
        // pattern is unique.
        Tensor w = testing::random_sparse({m, m}, 1.0, 1000 + seed, dtype);
        Tensor mask = transposable_nm_mask(w, n, m);
        ASSERT_TRUE(tiles_are_transposable(mask, n, m)) << n << ":" << m << " seed " << seed;
        const double best = brute_force_best(w.to_vector<double>(), patterns);
        EXPECT_NEAR(kept_magnitude(w, mask), best, 1e-12 * best)
            << n << ":" << m << " " << dtype_name(dtype) << " seed " << seed;
      }
    }
  }
}

TEST(NmTransposableTest, EveryTileOfALargerMatrixIsBest) {
  const std::vector<uint32_t> patterns = brute_force_patterns(2, 4);
  Tensor w = testing::random_sparse({12, 20}, 0.8, 21, DType::kF64);
  Tensor mask = transposable_nm_mask(w);
  ASSERT_TRUE(tiles_are_transposable(mask, 2, 4));
  for (int64_t tr = 0; tr < 12; tr += 4) {
    for (int64_t tc = 0; tc < 20; tc += 4) {
      Tensor tile = w.narrow(0, tr, 4).narrow(1, tc, 4);
      const double best = brute_force_best(tile.to_vector<double>(), patterns);
      EXPECT_NEAR(kept_magnitude(tile, mask.narrow(0, tr, 4).narrow(1, tc, 4)), best, 1e-12 * best)
          << "tile at " << tr << ", " << tc;
    }
  }
}

TEST(NmTransposableTest, PlainTwoFourKeepsAtLeastAsMuch) {
  // Row-wise top-2 has fewer constraints, so it never keeps less.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Tensor w = testing::random_sparse({8, 16}, 0.9, 50 + seed);
    const double plain = sum_abs(nm_decompress(nm_compress(w, 2, 4)));
    const double transposable = kept_magnitude(w, transposable_nm_mask(w));
    EXPECT_GE(plain, transposable) << "seed " << seed;
  }
}

TEST(NmTransposableTest, TiesGoToTheFirstPatternInOrder) {
  // All patterns tie: the first in the documented order, rows {0,1}, {0,1},
  // {2,3}, {2,3}.
  const std::vector<bool> first = {true,  true,  false, false, true,  true,  false, false,
                                   false, false, true,  true,  false, false, true,  true};
  EXPECT_EQ(transposable_nm_mask(zeros({4, 4})).to_vector<bool>(), first);
  EXPECT_EQ(transposable_nm_mask(ones({4, 4}, DType::kF64)).to_vector<bool>(), first);
  // The same tile twice in a row: the same mask twice.
  Tensor w = testing::random_sparse({4, 4}, 1.0, 7);
  Tensor twice = transposable_nm_mask(cat({w, w}, 1));
  EXPECT_TRUE(testing::exact_equal(twice.narrow(1, 0, 4).contiguous(), twice.narrow(1, 4, 4).contiguous()));
}

TEST(NmTransposableTest, ADiagonalTileKeepsItsBands) {
  // Large values on the diagonal and the one above it (wrapping): the only
  // pattern keeping all eight of them.
  Tensor w = f32({9, 8, 0, 0,  //
                  0, 9, 8, 0,  //
                  0, 0, 9, 8,  //
                  8, 0, 0, 9},
                 {4, 4});
  EXPECT_TRUE(testing::exact_equal(transposable_nm_mask(w).to(DType::kF32), ne(w, 0.0).to(DType::kF32)));
}

TEST(NmTransposableTest, NanCountsAsLargest) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Small values except a NaN at (1, 3), an inf at (2, 0) and large finite
  // values elsewhere in row 1: the NaN and the inf are kept anyway.
  Tensor w = f32({1, 1, 1, 1,          //
                  100, 100, 100, nan,  //
                  -inf, 1, 1, 1,       //
                  1, 1, 1, 1},
                 {4, 4});
  const std::vector<bool> mask = transposable_nm_mask(w).to_vector<bool>();
  EXPECT_TRUE(mask[1 * 4 + 3]);
  EXPECT_TRUE(mask[2 * 4 + 0]);
  EXPECT_TRUE(tiles_are_transposable(transposable_nm_mask(w), 2, 4));
  // NaN beats inf: a 1:2 tile [[inf, nan], [1, 1]] keeps the NaN.
  EXPECT_EQ(transposable_nm_mask(f32({inf, nan, 1, 1}, {2, 2}), 1, 2).to_vector<bool>(),
            (std::vector<bool>{false, true, true, false}));
}

TEST(NmTransposableTest, OneTwo) {
  // 1:2: per 2 x 2 tile, the diagonal or the anti-diagonal, whichever is larger.
  Tensor w = f32({1, 5, 3, 0,  //
                  4, 2, 1, 2,  //
                  0, 0, 2, 2,  //
                  7, 1, 2, 2},
                 {4, 4});
  Tensor mask = transposable_nm_mask(w, 1, 2);
  EXPECT_TRUE(tiles_are_transposable(mask, 1, 2));
  EXPECT_EQ(mask.to_vector<bool>(), (std::vector<bool>{false, true, true, false,  //
                                                       true, false, false, true,  //
                                                       false, true, true, false,  //
                                                       true, false, false, true}));
  // The last tile ties (4 each way) and takes the first pattern, the diagonal.
  EXPECT_NO_THROW(nm_compress(w, mask, 1, 2));
  EXPECT_NO_THROW(nm_compress(w.t().contiguous(), mask.t().contiguous(), 1, 2));
}

TEST(NmTransposableTest, SixteenBitDtypes) {
  Tensor w = testing::random_sparse({8, 8}, 0.9, 13);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Tensor y = w.to(dtype);
    Tensor mask = transposable_nm_mask(y);
    EXPECT_EQ(mask.device(), y.device());
    EXPECT_TRUE(tiles_are_transposable(mask, 2, 4)) << dtype_name(dtype);
    EXPECT_TRUE(testing::exact_equal(mask, transposable_nm_mask(y.to(DType::kF64)))) << dtype_name(dtype);
  }
  // Strided input (a transposed view) is read as its values.
  Tensor t = transposable_nm_mask(w.t());
  EXPECT_TRUE(testing::exact_equal(t, transposable_nm_mask(w.t().contiguous())));
}

TEST(NmTransposableTest, EmptyMatrix) { EXPECT_EQ(transposable_nm_mask(zeros({0, 8})).shape(), (Shape{0, 8})); }

TEST(NmTransposableTest, RefusesBadInput) {
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({6, 8})),
                      "transposable_nm_mask: m = 4 does not divide both dims of shape [6, 8] (the mask is chosen per "
                      "4 x 4 tile)");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({8, 6})), "m = 4 does not divide both dims of shape [8, 6]");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({16})),
                      "transposable_nm_mask: w must be 2-D [rows, cols], got shape [16]");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({4, 4, 4})),
                      "transposable_nm_mask: w must be 2-D [rows, cols], got shape [4, 4, 4]");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({4, 4}, DType::kI32)),
                      "transposable_nm_mask: w must be floating point (f32, f64, bf16, f16), got i32");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({4, 4}, DType::kU8)), "w must be floating point");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({4, 4}, DType::kBool)), "w must be floating point");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({8, 8}), 4, 8), "transposable_nm_mask: m = 8 is above the limit of 4");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({4, 4}), 0, 4), "transposable_nm_mask: needs 1 <= n <= m, got n = 0");
  EXPECT_ERROR_NAMING(transposable_nm_mask(zeros({4, 4}), 3, 2), "needs 1 <= n <= m, got n = 3, m = 2");
  EXPECT_ERROR_NAMING(transposable_nm_mask(nm_compress(zeros({4, 4}))),
                      "transposable_nm_mask: w must be dense, got format 'nm'");
  EXPECT_ERROR_NAMING(transposable_nm_mask(Tensor()), "transposable_nm_mask: w is an undefined tensor");
}

TEST(NmTransposableTest, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  Tensor w = testing::random_sparse({16, 32}, 0.8, 17);
  Tensor gpu = transposable_nm_mask(w.to(Device::cuda()));
  EXPECT_EQ(gpu.device(), Device::cuda());
  EXPECT_TRUE(testing::exact_equal(gpu.to(Device::cpu()), transposable_nm_mask(w)));
}

}  // namespace
}  // namespace coppice
