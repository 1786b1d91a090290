// Fused scaled dot-product attention: softmax(scale * q k^T, masked) v for
// many (batch, head) pairs at once, without a [T, T] matrix in memory.
//
//   q, k, v      [N, T, d] (N = batch x heads), or [B, T, H, d] views of any
//                strides (the parts of a packed qkv projection: no copy), one
//                floating dtype and device
//   out          q's shape, contiguous, q's dtype
//   lse          [N, T] (N = B x H): each query's log-sum-exp of its visible
//                scaled scores (f64 for f64 inputs, else f32), kept for the
//                backward pass
//
// Which keys a query sees (AttentionMask): with `causal`, key j is visible to
// query i only where j <= i; with a block pattern, only where the pattern
// stores the block (query i / block, key j / block); with both, where both
// allow it. A query that sees no key gets out = 0 and lse = -inf, and passes
// no gradient.
//
// The backward pass recomputes the probabilities from lse (FlashAttention-2's
// scheme): p = exp(scale * q k^T - lse), D = rowsum(dout * out),
// dv = p^T dout, ds = p * (dout v^T - D), dq = scale * ds k,
// dk = scale * ds^T q. `out` is the forward's output as stored (rounded to
// q's dtype), so every device forms D the same way.
//
// Kernels (registered per device with the dispatcher): "attention_forward"
// (inputs q, k, v) and "attention_backward" (inputs q, k, v, out, lse, dout and
// dq, dk, dv, which it writes in place), then the pattern's kAttentionWalks
// walks of block_walks.h (or "none"); attrs scale (double), causal (bool), block (int;
// 0 without a pattern). Operands have unit stride along d. The CPU kernels
// (cpu/attention.cc) are the straightforward per-query loops, in the compute
// dtype (f32 for bf16/f16). The CUDA kernels (cuda/attention.cu) are tiled,
// with an online softmax on tensor cores, for bf16/f16 and head sizes 64 and
// 128, and the CPU's loops one query per warp otherwise; parity with the CPU
// is tested for both.
#pragma once

#include <string>
#include <vector>

#include "sparse/attention/block_pattern.h"
#include "tensor/tensor.h"

namespace coppice {

struct AttentionMask {
  bool causal = false;
  // Undefined: every key (within `causal`). Else a BSR of square blocks whose
  // stored blocks are the (query block, key block) pairs kept (block_pattern.h).
  Tensor blocks;
};

struct AttentionOutput {
  Tensor out;
  Tensor lse;
};

struct AttentionGrads {
  Tensor dq, dk, dv;
};

// Validates the operands (shapes, dtypes, one device, a block pattern covering
// T tokens on that device) and throws naming the op and what is wrong. Inputs
// may have any strides (they are made contiguous).
AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                  const AttentionMask& mask);
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& dout, double scale, const AttentionMask& mask);

// The same for qkv [B, T, 3, H, d], q, k and v packed as one projection lays
// them out (qkv[:, :, 0] is q): out [B, T, H, d], and the gradient dqkv of
// qkv's shape, written by the kernels in place, so that a transformer's
// attention needs no permuted copies either way.
AttentionOutput attention_forward_packed(const Tensor& qkv, double scale, const AttentionMask& mask);
Tensor attention_backward_packed(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                                 double scale, const AttentionMask& mask);

// The walks of a block pattern the kernels take (AttentionBlockWalks::
// in_order(); op_table.h counts them in its attention ops' inputs).
inline constexpr int kAttentionWalks = 5;

// The input formats a device registers its attention kernels under: `dense`
// operands, then the pattern's walks ("dense") or none ("none").
inline std::vector<std::string> attention_kernel_formats(int dense, bool walks) {
  std::vector<std::string> f(static_cast<size_t>(dense), "dense");
  f.insert(f.end(), kAttentionWalks, walks ? "dense" : "none");
  return f;
}

}  // namespace coppice
