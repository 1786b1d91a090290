// The attention frontends and the CPU kernels (sparse/attention/attention.h) against a
// plain [T, T] softmax in f64; the gradients' own check is a gradcheck in
// tests/autograd/functions/nn_test.cc.
#include "sparse/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

struct Reference {
  std::vector<double> out, lse;
};

// softmax(scale q k^T over the visible keys) v, one whole [T, T] matrix per
// (batch, head), from f64 copies.
Reference reference(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                    const std::vector<std::vector<bool>>& visible) {
  const int64_t n = q.size(0), t = q.size(1), d = q.size(2);
  const std::vector<double> qh = q.to(DType::kF64).to_vector<double>(), kh = k.to(DType::kF64).to_vector<double>(),
                            vh = v.to(DType::kF64).to_vector<double>();
  Reference r{std::vector<double>(static_cast<size_t>(n * t * d), 0.0),
              std::vector<double>(static_cast<size_t>(n * t))};
  for (int64_t h = 0; h < n; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> s(static_cast<size_t>(t), -std::numeric_limits<double>::infinity());
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < t; ++j) {
        if (!visible[i][j]) continue;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qh[(h * t + i) * d + c] * kh[(h * t + j) * d + c];
        s[j] = scale * dot;
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < t; ++j) l += visible[i][j] ? std::exp(s[j] - m) : 0.0;
      r.lse[h * t + i] = l > 0 ? m + std::log(l) : -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < t; ++j) {
        if (!visible[i][j]) continue;
        const double p = std::exp(s[j] - m) / l;
        for (int64_t c = 0; c < d; ++c) r.out[(h * t + i) * d + c] += p * vh[(h * t + j) * d + c];
      }
    }
  }
  return r;
}

std::vector<std::vector<bool>> visible_keys(int64_t t, bool causal, const std::vector<bool>& keep, int64_t block) {
  const int64_t blocks = block > 0 ? (t + block - 1) / block : 0;
  std::vector<std::vector<bool>> vis(static_cast<size_t>(t), std::vector<bool>(static_cast<size_t>(t)));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < t; ++j) {
      vis[i][j] = (!causal || j <= i) && (block == 0 || keep[static_cast<size_t>((i / block) * blocks + j / block)]);
    }
  }
  return vis;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
    }
  }
}

TEST(AttentionTest, ForwardMatchesAWholeSoftmax) {
  Generator gen(7);
  const int64_t t = 11;
  // Blocks of 4 tokens (3 blocks; the last holds 3 tokens): block 1 sees
  // nothing, so its queries get zeros and -inf.
  const std::vector<bool> keep{true, false, true, false, false, false, true, true, true};
  for (DType dtype : {DType::kF64, DType::kF32, DType::kBF16}) {
    for (bool causal : {false, true}) {
      for (bool blocks : {false, true}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), " causal ", causal, " pattern ", blocks));
        Tensor q = randn({3, t, 5}, dtype, gen), k = randn({3, t, 5}, dtype, gen), v = randn({3, t, 5}, dtype, gen);
        AttentionMask mask{causal, blocks ? attention_block_pattern(keep, 4, Device::cpu()) : Tensor()};
        AttentionOutput o = attention_forward(q, k, v, 0.45, mask);
        EXPECT_EQ(o.out.dtype(), dtype);
        EXPECT_EQ(o.lse.dtype(), dtype == DType::kF64 ? DType::kF64 : DType::kF32);
        Reference r = reference(q, k, v, 0.45, visible_keys(t, causal, keep, blocks ? 4 : 0));
        const double tol = dtype == DType::kF64 ? 1e-12 : dtype == DType::kF32 ? 1e-5 : 1e-2;
        expect_near(o.out.to(DType::kF64).to_vector<double>(), r.out, tol, "out");
        expect_near(o.lse.to(DType::kF64).to_vector<double>(), r.lse, tol, "lse");
      }
    }
  }
}

TEST(AttentionTest, StridedOperandsAreMadeContiguous) {
  Generator gen(3);
  Tensor qkv = randn({2, 6, 3, 4}, DType::kF64, gen);  // [N, T, 3, d]: q, k, v interleaved
  Tensor q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);
  AttentionOutput o = attention_forward(q, k, v, 0.5, {true, {}});
  AttentionOutput c = attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), 0.5, {true, {}});
  EXPECT_EQ(o.out.to_vector<double>(), c.out.to_vector<double>());
}

// A packed qkv [B, T, 3, H, d] gives what [B*H, T, d] copies of its parts give,
// and its gradient lands in qkv's layout.
TEST(AttentionTest, PackedQkvMatchesSeparateHeads) {
  Generator gen(9);
  const int64_t b = 2, t = 5, h = 3, d = 4;
  Tensor qkv = randn({b, t, 3, h, d}, DType::kF64, gen), dout = randn({b, t, h, d}, DType::kF64, gen);
  AttentionMask mask{true, attention_block_pattern({true, false, true, true}, 3, Device::cpu())};
  // [B, T, H, d] -> [B*H, T, d]
  auto heads = [&](const Tensor& x) { return x.permute({0, 2, 1, 3}).contiguous().reshape({b * h, t, d}); };
  const AttentionOutput packed = attention_forward_packed(qkv, 0.3, mask);
  const Tensor q = heads(qkv.select(2, 0)), k = heads(qkv.select(2, 1)), v = heads(qkv.select(2, 2));
  const AttentionOutput sep = attention_forward(q, k, v, 0.3, mask);
  EXPECT_EQ(packed.out.shape(), (Shape{b, t, h, d}));
  EXPECT_EQ(heads(packed.out).to_vector<double>(), sep.out.to_vector<double>());
  EXPECT_EQ(packed.lse.to_vector<double>(), sep.lse.to_vector<double>());
  const Tensor dqkv = attention_backward_packed(qkv, packed.out, packed.lse, dout, 0.3, mask);
  const AttentionGrads g = attention_backward(q, k, v, sep.out, sep.lse, heads(dout), 0.3, mask);
  EXPECT_EQ(dqkv.shape(), qkv.shape());
  EXPECT_EQ(heads(dqkv.select(2, 0)).to_vector<double>(), g.dq.to_vector<double>());
  EXPECT_EQ(heads(dqkv.select(2, 1)).to_vector<double>(), g.dk.to_vector<double>());
  EXPECT_EQ(heads(dqkv.select(2, 2)).to_vector<double>(), g.dv.to_vector<double>());
}

TEST(AttentionTest, BackwardOfAnUnseenQueryIsZero) {
  Generator gen(5);
  Tensor q = randn({1, 4, 2}, DType::kF64, gen), k = randn({1, 4, 2}, DType::kF64, gen),
         v = randn({1, 4, 2}, DType::kF64, gen);
  // Blocks of 2: query block 0 sees nothing, query block 1 sees key block 1.
  AttentionMask mask{false, attention_block_pattern({false, false, false, true}, 2, Device::cpu())};
  AttentionOutput o = attention_forward(q, k, v, 1.0, mask);
  AttentionGrads g = attention_backward(q, k, v, o.out, o.lse, ones({1, 4, 2}, DType::kF64), 1.0, mask);
  const std::vector<double> dq = g.dq.to_vector<double>(), dk = g.dk.to_vector<double>(), dv = g.dv.to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dq[i], 0.0) << i;  // queries 0 and 1
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dk[i], 0.0) << i;  // keys 0 and 1: no query sees them
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dv[i], 0.0) << i;
  EXPECT_NEAR(dv[4] + dv[6], 2.0, 1e-12);  // each of queries 2, 3 spreads a weight of 1 over keys 2, 3
}

TEST(AttentionTest, BadOperandsAreRefusedByName) {
  Tensor q = zeros({2, 4, 3}), k = zeros({2, 4, 3}), v = zeros({2, 4, 3});
  EXPECT_ERROR_NAMING(attention_forward(q, zeros({2, 5, 3}), v, 1.0, {}), "k and v must have q's shape [2, 4, 3]");
  EXPECT_ERROR_NAMING(attention_forward(q, k, zeros({2, 4, 3}, DType::kF64), 1.0, {}), "must share a dtype");
  EXPECT_ERROR_NAMING(attention_forward(zeros({4, 3}), zeros({4, 3}), zeros({4, 3}), 1.0, {}), "q must be [N, T, d]");
  EXPECT_ERROR_NAMING(attention_forward(zeros({2, 4, 3}, DType::kI64), zeros({2, 4, 3}, DType::kI64),
                                        zeros({2, 4, 3}, DType::kI64), 1.0, {}),
                      "must be floating-point");
  AttentionMask wrong{false, attention_block_pattern(std::vector<bool>(9, true), 3, Device::cpu())};  // 9 tokens
  EXPECT_ERROR_NAMING(attention_forward(q, k, v, 1.0, wrong), "blocks of 3 for T = 4 must be [6, 6], got [9, 9]");
  AttentionMask dense{false, ones({4, 4})};
  EXPECT_ERROR_NAMING(attention_forward(q, k, v, 1.0, dense), "must be a BSR tensor, got format 'dense'");
  AttentionMask ok{false, attention_block_pattern({true, true, true, true}, 2, Device::cpu())};
  AttentionOutput o = attention_forward(q, k, v, 1.0, ok);
  EXPECT_ERROR_NAMING(attention_backward(q, k, v, o.out, o.lse.to(DType::kF64), q, 1.0, ok), "lse must be f32 [2, 4]");
}

}  // namespace
}  // namespace coppice
