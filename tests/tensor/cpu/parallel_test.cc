#include "tensor/cpu/parallel.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"

namespace coppice::cpu {
namespace {

TEST(ParallelTest, CoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
      EXPECT_LT(b, e);
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ParallelTest, OffsetRangeAndChunksAtLeastGrain) {
  std::atomic<int64_t> sum{0};
  parallel_for(10, 10010, 100, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(e - b >= 100 || e == 10010);
    int64_t s = 0;
    for (int64_t i = b; i < e; ++i) s += i;
    sum += s;
  });
  EXPECT_EQ(sum.load(), (10 + 10009) * 10000 / 2);
}

TEST(ParallelTest, SmallRangeRunsInline) {
  int calls = 0;  // not atomic: inline runs happen on this thread only
  parallel_for(0, 5, 100, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 5);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelTest, NestedCallsComplete) {
  std::atomic<int64_t> total{0};
  parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(0, 1000, 10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 64 * 1000);
}

TEST(ParallelTest, ExceptionPropagates) {
  EXPECT_THROW(parallel_for(0, 100000, 10,
                            [&](int64_t b, int64_t e) {
                              if (b <= 5000 && 5000 < e) throw std::runtime_error("boom");
                            }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> n{0};
  parallel_for(0, 100000, 10, [&](int64_t b, int64_t e) { n += e - b; });
  EXPECT_EQ(n.load(), 100000);
}

TEST(ParallelTest, NumThreadsPositive) { EXPECT_GE(num_threads(), 1); }

}  // namespace
}  // namespace coppice::cpu
