#include "sparse/attention/routing.h"

#include <algorithm>
#include <numeric>

#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// The mean of x [B, T, H, d] over each block of `block` tokens: [nb, B * H * d]
// in f32 (the last block may be shorter).
Tensor pooled_blocks(const Tensor& x, int64_t block) {
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = x.size(3);
  const int64_t nb = (t + block - 1) / block, pad = nb * block - t;
  Tensor xf = x.to(DType::kF32);
  if (pad > 0) xf = cat({xf, zeros({b, pad, h, d}, xf.options())}, 1);
  Tensor sums = sum(xf.reshape({b, nb, block, h, d}), {2});  // [B, nb, H, d]
  std::vector<float> counts(static_cast<size_t>(nb), static_cast<float>(block));
  counts.back() = static_cast<float>(t - (nb - 1) * block);
  Tensor mean = div(sums, from_vector(counts, {1, nb, 1, 1}).to(xf.device()));
  return mean.permute({1, 0, 2, 3}).reshape({nb, b * h * d});
}

}  // namespace

Tensor routing_scores(const Tensor& q, const Tensor& k, int64_t block) {
  COPPICE_CHECK(q.defined() && k.defined() && q.dim() == 4 && q.shape() == k.shape(),
                "routed attention: expected q and k of one shape [B, T, H, d], got ",
                q.defined() ? shape_to_string(q.shape()) : "undefined", " and ",
                k.defined() ? shape_to_string(k.shape()) : "undefined");
  COPPICE_CHECK(block > 0, "routed attention: block must be positive, got ", block);
  return matmul(pooled_blocks(q, block), pooled_blocks(k, block).t()).to(Device::cpu()).contiguous();
}

std::vector<bool> routed_keep(const Tensor& q, const Tensor& k, const RoutingOptions& o) {
  COPPICE_CHECK(o.window >= 1, "routed attention: window must be >= 1 (the diagonal block), got ", o.window);
  COPPICE_CHECK(o.top_k >= 0, "routed attention: top_k must be >= 0, got ", o.top_k);
  const Tensor scores = routing_scores(q, k, o.block);
  const int64_t nb = scores.size(0);
  const float* s = scores.data<float>();
  std::vector<bool> keep(static_cast<size_t>(nb * nb), false);
  std::vector<int64_t> candidates;
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t last = o.causal ? i : nb - 1;
    candidates.clear();
    for (int64_t j = 0; j <= last; ++j) {
      const bool fixed = j == 0 || (i > j ? i - j : j - i) < o.window;
      if (fixed)
        keep[static_cast<size_t>(i * nb + j)] = true;
      else
        candidates.push_back(j);
    }
    // The best-scoring others; ties go to the nearer block (the larger j).
    const auto take = static_cast<size_t>(std::min<int64_t>(o.top_k, static_cast<int64_t>(candidates.size())));
    std::partial_sort(candidates.begin(), candidates.begin() + take, candidates.end(), [&](int64_t a, int64_t b) {
      const float sa = s[i * nb + a], sb = s[i * nb + b];
      return sa != sb ? sa > sb : a > b;
    });
    for (size_t c = 0; c < take; ++c) keep[static_cast<size_t>(i * nb + candidates[c])] = true;
  }
  return keep;
}

}  // namespace coppice
