// A GPT-style decoder: token and learned position embeddings, pre-norm
// transformer blocks with causal multi-head attention and a GELU MLP, a final
// LayerNorm, and logits through the token embedding (tied; an untied "head"
// Linear with tie_weights false). The GELU is the exact one or, with `gelu`
// kTanh, GPT-2's tanh approximation. Dropout (`dropout`) on the embeddings and on
// both residual branches of every block; attention itself runs on the fused
// kernels (sparse/attention/attention.h), dense-causal or block_sparse.
//
// Parameters, as a checkpoint names them: tok_embed.weight [V, D], pos_embed
// [context, D], blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, mlp.fc1, mlp.fc2}
// .{weight, bias} (with moe_experts, blocks.<i>.moe.{router.weight, w1, w2}
// in the MLP's place), norm.{weight, bias}, and head.{weight, bias} when
// untied.
// Any Linear inside the blocks can be made sparse by the job's rules; the
// embeddings are shared with the output and best stay dense.
//
// Initialisation: the token and position embeddings N(0, 0.02^2) (the tied
// output then starts near uniform), Linear and LayerNorm as their defaults.
#pragma once

#include <cstdint>
#include <memory>

#include "models/attention.h"
#include "models/layers.h"
#include "models/module.h"

namespace coppice {

struct GPTOptions {
  int64_t vocab_size = 256;
  int64_t context = 512;
  int64_t dim = 1024;
  int64_t layers = 8;
  int64_t heads = 16;
  int64_t mlp_hidden = 4096;
  AttentionPattern pattern{AttentionPattern::Kind::kDense, 0, 0, true};  // always made causal
  double dropout = 0.0;
  bool tie_weights = true;
  // The MLP's GELU: exact (kErf) or GPT-2's tanh approximation (kTanh, which
  // cuBLASLt's GEMM epilogues compute).
  GeluForm gelu = GeluForm::kErf;
  // Every block's MLP a mixture of `moe_experts` experts of mlp_hidden units
  // (models/moe.h) when > 0: top moe_top_k routing, the load-balancing
  // loss times moe_aux_loss.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 1;
  double moe_aux_loss = 0.01;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTOptions& gpt = {}, const LayerOptions& options = {}, Generator& gen = default_generator());
  // x: integer token ids [N, T] with 1 <= T <= context (a constant Variable)
  // -> logits [N, T, vocab_size].
  Variable forward(const Variable& x) override;
  const GPTOptions& options() const { return o_; }

 private:
  // The blocks as a residual stream (TransformerBlock::forward_stream), each
  // block's closing add folded into the next LayerNorm, then the final norm.
  // Falls back to the Sequential's forward (each block's own add) where a
  // module scope must be seen: an output rule on the blocks or on one of
  // them, or a graph observer (a traced step).
  Variable blocks_and_norm(const Variable& h);

  GPTOptions o_;
  std::shared_ptr<Embedding> tok_embed_;
  Variable* pos_embed_;                 // [context, dim]
  std::shared_ptr<Dropout> drop_;       // on the embeddings; null without dropout
  std::shared_ptr<Sequential> blocks_;  // of TransformerBlock
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Linear> head_;  // null when tied
};

}  // namespace coppice
