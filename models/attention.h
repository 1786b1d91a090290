// Multi-head self-attention and the pre-norm transformer block.
//
// MultiheadAttention: x [B, T, D] -> qkv = Linear(D, 3D) ("qkv") -> heads of
// size D / H -> attention -> Linear(D, D) ("proj"). A dense or block_sparse
// pattern runs on the fused attention kernels (sparse/attention/attention.h: an online
// softmax, nothing of size T x T in memory; block_sparse skips the blocks it
// leaves out), except while attention dropout is active: then the scores are
// a batched matmul, masked to -inf, a softmax and dropout. With a CSR
// pattern (local window or block-diagonal) each (batch, head) computes
// its scores as an SDDMM of Q and K^T at the pattern (a CSR [T, T]; all pairs
// at once, on the diagonal of one CSR), a softmax over each row's stored
// values and an SpMM with V (sparse_attention.h), so
// nothing of size T x T is ever dense (attention dropout then drops stored
// weights only). The sparse row softmax runs on the host (a device tensor's
// values are copied there and back). Output rule inputs: x.
//
// TransformerBlock (pre-norm): x + attn(ln1(x)), then + mlp(ln2(x)) with
// mlp = fc1 (D -> hidden), GELU, fc2 (hidden -> D), dropout on both branches;
// the MLP runs as one autograd node (Linear::forward_gelu_mlp) unless an
// output rule is attached to it or to its activation. The GELU is the exact
// one (TransformerBlockOptions::gelu kErf) or the tanh approximation (kTanh),
// fused or not.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "models/layers.h"
#include "models/module.h"
#include "models/moe.h"
#include "models/sparse_attention.h"
#include "sparse/attention/attention.h"

namespace coppice {

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t dim, int64_t heads, const AttentionPattern& pattern = {}, double dropout = 0.0,
                     const LayerOptions& options = {}, Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  // h + forward(x) as a residual stream: the add in the output projection's
  // write-out where its kernel does it (Linear::forward_residual), else
  // pending. With an output rule attached, or in a traced step, {h, forward(x)}.
  ResidualStream forward_residual(const Variable& h, const Variable& x);
  const AttentionPattern& pattern() const { return pattern_; }

 private:
  Variable heads_output(const Variable& x);  // the heads' outputs [B, T, D], before the projection
  Variable attend_fused(const Variable& qkv, int64_t t, double scale);  // qkv [B, T, 3, H, dh] -> [B, T, H, dh]
  // A routed pattern's kept blocks for this qkv (sparse/attention/routing.h).
  std::vector<bool> routed_blocks(const Variable& qkv) const;
  Variable attend_dense(const Variable& q, const Variable& k, const Variable& v, int64_t t, double scale);
  Variable attend_sparse(const Variable& q, const Variable& k, const Variable& v, int64_t t);
  // The CSR pattern for `copies` (batch, head) pairs of T tokens, or the
  // dense bool mask [T, T]; built once per key.
  const Tensor& cached_pattern(int64_t t, int64_t copies, TensorOptions options);

  int64_t dim_, heads_;
  AttentionPattern pattern_;
  std::shared_ptr<Linear> qkv_, proj_;
  std::shared_ptr<Dropout> attn_drop_;
  std::map<std::tuple<int64_t, int64_t, int>, Tensor> patterns_;
  std::map<std::pair<int64_t, std::string>, Tensor> block_patterns_;  // block_sparse's BSR, by (T, device)
  Tensor routed_mask_;  // routed with attention dropout: this forward's [T, T] mask
};

struct TransformerBlockOptions {
  int64_t dim = 64;
  int64_t heads = 4;
  int64_t mlp_hidden = 256;
  AttentionPattern pattern;
  double dropout = 0.0;
  GeluForm gelu = GeluForm::kErf;  // the MLP's activation: gelu (kErf) or gelu_tanh (kTanh)
  // A mixture of experts in the MLP's place (models/moe.h; its dim, hidden
  // and gelu are the block's) when moe_experts > 0.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 1;
  double moe_aux_loss = 0.01;
};

// Children: ln1, attn, ln2, mlp (fc1, act, fc2) or moe (router, w1, w2), drop.
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& block, const LayerOptions& options = {},
                            Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  // forward() as a residual stream (autograd/functions/residual.h): each of
  // the block's two adds runs in the write-out of the product before it
  // (the attention's projection, fc2) where that kernel adds it, else in the
  // norm after it (LayerNorm::forward_add: ln1 adds in.pending, ln2 the
  // attention's output), and the block returns the stream for the next
  // block, or the model's final norm, to add the same way. A stack of blocks
  // run so makes no pass of its own over the stream, nor over its gradient
  // (which add_layer_norm's backward sums with ln1's): GPT's blocks run this way.
  // The same values as chaining forward(), up to the order the gradient's
  // two parts are added in.
  ResidualStream forward_stream(const ResidualStream& in);

 private:
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<MultiheadAttention> attn_;
  std::shared_ptr<Sequential> mlp_;
  std::shared_ptr<Linear> fc1_, fc2_;  // mlp_'s layers, for the fused MLP
  std::shared_ptr<GELU> act_;
  std::shared_ptr<MoE> moe_;  // in the MLP's place (the four above null)
  std::shared_ptr<Dropout> drop_;
};

}  // namespace coppice
