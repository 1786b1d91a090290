// Tests for sparse/cuda/pattern_cache.h: entries keyed by pattern (not by
// tensor), kept for as long as the pattern lives whatever their number, and
// dropped once it is gone. The cache is the device kernels', but it holds any
// value and never touches a device, so these run on CPU tensors, with or
// without a GPU.
#include "sparse/cuda/pattern_cache.h"

#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/ops.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

Tensor matrix(int64_t rows, int64_t cols, double seed) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i * 7 + static_cast<size_t>(seed)) % 3 == 0 ? 1.0 + seed : 0.0;
  return from_vector<double>(v, {rows, cols}).to(DType::kF32);
}

// Counts builds: get() of `t` in `cache`, whose value is the build's number.
struct Counter {
  PatternCache<int> cache;
  int builds = 0;
  int get(const Tensor& t) {
    return cache.get(t, [&] { return ++builds; });
  }
};

TEST(PatternCache, TheSamePatternWithOtherValuesHits) {
  for (const char* format : {"bsr", "csr", "coo", "masked", "nm"}) {
    Counter c;
    const FormatOptions options = FormatOptions::block(2);
    const Tensor s = to_format(matrix(4, 8, 0), format, options);
    EXPECT_EQ(c.get(s), 1) << format;
    EXPECT_EQ(c.get(with_values(s, mul(values(s), values(s)))), 1) << format;
    EXPECT_EQ(c.builds, 1) << format;
    // Another pattern of the same values is another entry.
    EXPECT_EQ(c.get(to_format(matrix(4, 8, 1), format, options)), 2) << format;
  }
}

TEST(PatternCache, AViewWithTheSameVersionButAnotherFormatOrShapeIsAnotherEntry) {
  Counter c;
  const Tensor csr = to_format(matrix(4, 6, 0), "csr");
  const Tensor csc = transpose(csr);  // the same arrays and pattern version, CSC [6, 4]
  ASSERT_EQ(pattern_version(csr), pattern_version(csc));
  EXPECT_EQ(c.get(csr), 1);
  EXPECT_EQ(c.get(csc), 2);
  EXPECT_EQ(c.get(csr), 1);
}

// More live patterns than the old LRU's 32 (a 9-layer GPT has 36 sparse
// weights): the second pass over them builds nothing.
TEST(PatternCache, EveryLivePatternStaysWhateverTheirNumber) {
  Counter c;
  std::vector<Tensor> weights;
  for (int i = 0; i < 100; ++i) weights.push_back(to_format(matrix(4, 4, i % 5), "bsr", FormatOptions::block(2)));
  for (const Tensor& w : weights) c.get(w);
  ASSERT_EQ(c.builds, 100);
  for (int pass = 0; pass < 3; ++pass) {
    for (const Tensor& w : weights) c.get(with_values(w, values(w)));
  }
  EXPECT_EQ(c.builds, 100);
  EXPECT_EQ(c.cache.size(), 100u);
}

// A pattern no tensor holds any more (a mask update replaced it) goes at the
// next insertion.
TEST(PatternCache, DeadPatternsAreDroppedAtTheNextInsertion) {
  Counter c;
  const Tensor kept = to_format(matrix(4, 4, 0), "csr");
  c.get(kept);
  for (int i = 0; i < 10; ++i) c.get(to_format(matrix(4, 4, i), "csr"));  // each dies after its call
  EXPECT_LE(c.cache.size(), 2u);
  c.get(to_format(matrix(4, 4, 3), "coo"));
  EXPECT_EQ(c.cache.size(), 2u);  // kept and the last one
  const int builds = c.builds;
  EXPECT_EQ(c.get(kept), 1);
  EXPECT_EQ(c.builds, builds);
}

}  // namespace
}  // namespace coppice::sparse_cuda
