// Routed attention's block choice (sparse/attention/routing.h): the pooled
// scores against a loop, the local, first and top-k blocks kept (causal and
// not), a short last block, the same choice on a GPU as on the CPU, errors.
#include "sparse/attention/routing.h"

#include <gtest/gtest.h>

#include <vector>

#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

// q and k [1, T, 1, 2] whose block means are given: every token of block i
// carries the block's vector.
Tensor blocks_of(const std::vector<std::pair<float, float>>& means, int64_t block, int64_t tokens) {
  std::vector<float> v;
  for (int64_t t = 0; t < tokens; ++t) {
    v.push_back(means[t / block].first);
    v.push_back(means[t / block].second);
  }
  return from_vector(v, {1, tokens, 1, 2});
}

TEST(Routing, ScoresArePooledProducts) {
  Generator gen(3);
  const Tensor q = randn({2, 7, 3, 4}, DType::kF32, gen), k = randn({2, 7, 3, 4}, DType::kF32, gen);
  const Tensor s = routing_scores(q, k, 3);  // blocks [0, 3), [3, 6), [6, 7)
  ASSERT_EQ(s.shape(), (Shape{3, 3}));
  const Tensor qc = q.contiguous(), kc = k.contiguous();
  auto mean = [](const Tensor& x, int64_t b, int64_t blk, int64_t h, int64_t d) {
    const int64_t lo = blk * 3, hi = std::min<int64_t>(lo + 3, 7);
    double m = 0;
    for (int64_t t = lo; t < hi; ++t) m += x.data<float>()[((b * 7 + t) * 3 + h) * 4 + d];
    return m / static_cast<double>(hi - lo);
  };
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      double want = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t d = 0; d < 4; ++d) want += mean(qc, b, i, h, d) * mean(kc, b, j, h, d);
      EXPECT_NEAR(s.data<float>()[i * 3 + j], want, 1e-4) << i << "," << j;
    }
  }
}

TEST(Routing, KeepsLocalFirstAndTopK) {
  // Four blocks of 2 tokens; query block 3 points at key block 1, query
  // block 2 at key block 1 too.
  const Tensor q = blocks_of({{0, 0}, {0, 0}, {1, 0}, {1, 0}}, 2, 8);
  const Tensor k = blocks_of({{0, 0}, {1, 0}, {-1, 0}, {0, 1}}, 2, 8);
  RoutingOptions o;
  o.block = 2;
  o.window = 1;
  o.top_k = 1;
  const std::vector<bool> keep = routed_keep(q, k, o);
  // Row i: key blocks 0 and i always; row 3 routes to 1 (score 1) over 2 (-1); row 2 to 1.
  const std::vector<bool> want = {1, 0, 0, 0,  //
                                  1, 1, 0, 0,  //
                                  1, 1, 1, 0,  //
                                  1, 1, 0, 1};
  EXPECT_EQ(keep, want);
  o.causal = false;  // row 0 may now route past itself: to block 1
  const std::vector<bool> open = routed_keep(q, k, o);
  EXPECT_TRUE(open[0 * 4 + 0]);
  EXPECT_EQ(std::count(open.begin(), open.begin() + 4, true), 2);
  o.top_k = 0;
  o.causal = true;
  const std::vector<bool> fixed = routed_keep(q, k, o);
  EXPECT_EQ(std::count(fixed.begin(), fixed.end(), true), 7);  // the first column and the diagonal
}

TEST(Routing, TheGpuChoosesAsTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  Generator gen(5);
  const Tensor q = randn({2, 100, 4, 16}, DType::kF32, gen), k = randn({2, 100, 4, 16}, DType::kF32, gen);
  RoutingOptions o;
  o.block = 16;
  o.top_k = 2;
  EXPECT_EQ(routed_keep(q.to(Device::cuda()), k.to(Device::cuda()), o), routed_keep(q, k, o));
  EXPECT_EQ(routed_keep(q.to(Device::cuda()).to(DType::kBF16), k.to(Device::cuda()).to(DType::kBF16), o).size(),
            routed_keep(q, k, o).size());
}

TEST(Routing, ErrorsNameTheOption) {
  const Tensor q = zeros({1, 4, 1, 2}), k = zeros({1, 4, 1, 2});
  RoutingOptions o;
  o.block = 2;
  o.window = 0;
  EXPECT_ERROR_NAMING(routed_keep(q, k, o), "window must be >= 1");
  o.window = 1;
  o.top_k = -1;
  EXPECT_ERROR_NAMING(routed_keep(q, k, o), "top_k must be >= 0");
  o.top_k = 1;
  EXPECT_ERROR_NAMING(routed_keep(q, zeros({1, 5, 1, 2}), o), "expected q and k of one shape");
  o.block = 0;
  EXPECT_ERROR_NAMING(routed_keep(q, k, o), "block must be positive");
}

}  // namespace
}  // namespace coppice
