#include "models/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "autograd/graph_observer.h"
#include "sparse/attention/routing.h"
#include "tensor/error.h"

namespace coppice {

// ---- MultiheadAttention ----------------------------------------------------------

MultiheadAttention::MultiheadAttention(int64_t dim, int64_t heads, const AttentionPattern& pattern, double dropout,
                                       const LayerOptions& options, Generator& gen)
    : Module("MultiheadAttention"), dim_(dim), heads_(heads), pattern_(pattern) {
  COPPICE_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "MultiheadAttention: dim (", dim,
                ") must be a positive multiple of heads (", heads, ")");
  check_attention_pattern(pattern);
  qkv_ = register_module("qkv", std::make_shared<Linear>(dim, 3 * dim, true, options, gen));
  proj_ = register_module("proj", std::make_shared<Linear>(dim, dim, true, options, gen));
  if (dropout > 0.0) attn_drop_ = register_module("attn_drop", std::make_shared<Dropout>(dropout, 0x5eed));
}

const Tensor& MultiheadAttention::cached_pattern(int64_t t, int64_t copies, TensorOptions options) {
  auto key = std::make_tuple(t, copies, static_cast<int>(options.dtype));
  auto it = patterns_.find(key);
  if (it == patterns_.end() || it->second.device() != options.device) {
    Tensor p = pattern_.is_sparse() ? block_diagonal_pattern(attention_pattern(pattern_, t, options), copies)
                                    : attention_mask(pattern_, t, options.device);
    if (patterns_.size() >= 8) patterns_.clear();  // a few batch sizes at most
    it = patterns_.insert_or_assign(key, p).first;
  }
  return it->second;
}

std::vector<bool> MultiheadAttention::routed_blocks(const Variable& qkv) const {
  RoutingOptions o;
  o.block = pattern_.block;
  o.window = pattern_.window;
  o.top_k = pattern_.top_k;
  o.causal = pattern_.causal;
  const Tensor& v = qkv.value();  // [B, T, 3, H, dh]
  return routed_keep(v.select(2, 0), v.select(2, 1), o);
}

Variable MultiheadAttention::attend_fused(const Variable& qkv, int64_t t, double scale) {
  AttentionMask mask{pattern_.causal, {}};
  if (pattern_.kind == AttentionPattern::Kind::kRouted) {
    // A new pattern every step, from this step's queries and keys.
    mask.blocks = attention_block_pattern(routed_blocks(qkv), pattern_.block, qkv.value().device());
    return attention_packed(qkv, scale, mask);
  }
  if (pattern_.kind == AttentionPattern::Kind::kBlockSparse) {
    // One pattern per length and device, built once: its walks are derived
    // once per pattern version (block_walks.h), so a captured step reads
    // nothing back.
    const Device device = qkv.value().device();
    auto key = std::make_pair(t, device.to_string());
    auto it = block_patterns_.find(key);
    if (it == block_patterns_.end()) {
      if (block_patterns_.size() >= 8) block_patterns_.clear();  // a few lengths at most
      const Tensor blocks = attention_block_pattern(block_sparse_keep(pattern_, t), pattern_.block, device);
      it = block_patterns_.emplace(key, blocks).first;
    }
    mask.blocks = it->second;
  }
  return attention_packed(qkv, scale, mask);
}

Variable MultiheadAttention::attend_dense(const Variable& q, const Variable& k, const Variable& v, int64_t t,
                                          double scale) {
  Variable scores = mul(bmm(q, transpose(k, 1, 2)), scale);  // [BH, T, T]
  const bool routed = pattern_.kind == AttentionPattern::Kind::kRouted;
  if (routed || pattern_.causal || pattern_.kind == AttentionPattern::Kind::kBlockSparse) {
    // A routed pattern's mask is this forward's (routed_mask_).
    const Tensor& mask = routed ? routed_mask_ : cached_pattern(t, 1, q.value().options());
    Tensor cond = mask.unsqueeze(0).expand(scores.shape());
    Variable neg_inf(full({}, -std::numeric_limits<double>::infinity(), q.value().options()));
    scores = where(cond, scores, neg_inf);
  }
  Variable att = softmax(scores, -1);
  if (attn_drop_) att = attn_drop_->forward(att);
  return bmm(att, v);
}

Variable MultiheadAttention::attend_sparse(const Variable& q, const Variable& k, const Variable& v, int64_t t) {
  // Every (batch, head) at once: their [T, T] patterns on the diagonal of one
  // CSR [BH * T, BH * T], q, k and v as [BH * T, dh].
  const int64_t bh = q.size(0), dh = q.size(2);
  const Tensor& pattern = cached_pattern(t, bh, q.value().options());
  Variable a = sparse_row_softmax(sampled_scores(reshape(q, {bh * t, dh}), reshape(k, {bh * t, dh}), pattern));
  // Dropout on the stored weights only, keeping the pattern.
  if (attn_drop_ && attn_drop_->is_training()) a = with_values(a.value(), attn_drop_->forward(values(a)));
  return reshape(matmul(a, reshape(v, {bh * t, dh})), {bh, t, dh});  // SpMM
}

Variable MultiheadAttention::forward(const Variable& x) {
  return run_op({x}, [this](const std::vector<Variable>& in) { return proj_->forward(heads_output(in[0])); });
}

ResidualStream MultiheadAttention::forward_residual(const Variable& h, const Variable& x) {
  // A traced step (models/propagation) sees the attention as this module's op.
  if (output_rule() != nullptr || graph_observer() != nullptr) return {h, forward(x)};
  return proj_->forward_residual(h, heads_output(x));
}

Variable MultiheadAttention::heads_output(const Variable& xin) {
  COPPICE_CHECK(xin.dim() == 3 && xin.size(2) == dim_, "MultiheadAttention: expected x [B, T, ", dim_, "], got ",
                xin.dim(), " dims", xin.dim() == 3 ? str_cat(" with last dim ", xin.size(2)) : "");
  const int64_t b = xin.size(0), t = xin.size(1), dh = dim_ / heads_;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Variable qkv = reshape(qkv_->forward(xin), {b, t, 3, heads_, dh});  // a view
  const bool dropping = attn_drop_ && attn_drop_->is_training();
  if (pattern_.kind == AttentionPattern::Kind::kRouted && dropping) {
    // The unfused path (dropout on the weights) masks the scores with the
    // routed blocks expanded to tokens.
    routed_mask_ = block_keep_mask(routed_blocks(qkv), pattern_.block, t, pattern_.causal, xin.value().device());
  }
  if (!pattern_.is_sparse() && !dropping) {
    // Fused, straight from the projection's layout: no permuted copy either way.
    return reshape(attend_fused(qkv, t, scale), {b, t, dim_});
  }
  qkv = reshape(permute(qkv, {2, 0, 3, 1, 4}), {3, b * heads_, t, dh});
  Variable q = select(qkv, 0, 0), k = select(qkv, 0, 1), v = select(qkv, 0, 2);
  Variable o = pattern_.is_sparse() ? attend_sparse(mul(q, scale), k, v, t) : attend_dense(q, k, v, t, scale);
  return reshape(permute(reshape(o, {b, heads_, t, dh}), {0, 2, 1, 3}), {b, t, dim_});
}

// ---- TransformerBlock ----------------------------------------------------------------

TransformerBlock::TransformerBlock(const TransformerBlockOptions& block, const LayerOptions& options, Generator& gen)
    : Module("TransformerBlock") {
  ln1_ = register_module("ln1", std::make_shared<LayerNorm>(Shape{block.dim}, 1e-5, true, options));
  attn_ = register_module(
      "attn", std::make_shared<MultiheadAttention>(block.dim, block.heads, block.pattern, block.dropout, options, gen));
  ln2_ = register_module("ln2", std::make_shared<LayerNorm>(Shape{block.dim}, 1e-5, true, options));
  if (block.moe_experts > 0) {
    MoEOptions moe;
    moe.dim = block.dim;
    moe.hidden = block.mlp_hidden;
    moe.experts = block.moe_experts;
    moe.top_k = block.moe_top_k;
    moe.aux_loss = block.moe_aux_loss;
    moe.gelu = block.gelu;
    moe_ = register_module("moe", std::make_shared<MoE>(moe, options, gen));
  } else {
    mlp_ = register_module("mlp", std::make_shared<Sequential>());
    fc1_ = std::make_shared<Linear>(block.dim, block.mlp_hidden, true, options, gen);
    act_ = std::make_shared<GELU>(block.gelu);
    fc2_ = std::make_shared<Linear>(block.mlp_hidden, block.dim, true, options, gen);
    mlp_->push_back(fc1_, "fc1");
    mlp_->push_back(act_, "act");
    mlp_->push_back(fc2_, "fc2");
  }
  if (block.dropout > 0.0) drop_ = register_module("drop", std::make_shared<Dropout>(block.dropout, 0xd0d0));
}

Variable TransformerBlock::forward(const Variable& x) {
  return run_op({x}, [this](const std::vector<Variable>& in) {
    const ResidualStream out = forward_stream({in[0], Variable()});
    return out.pending.defined() ? add(out.h, out.pending) : out.h;
  });
}

ResidualStream TransformerBlock::forward_stream(const ResidualStream& in) {
  // x = in.h + in.pending and ln1(x), in one pass each way (with no pending
  // add, the node still sums x's two gradients in its backward's pass).
  const AddLayerNormVariables n = ln1_->forward_add(in.h, in.pending);
  // x + attn(ln1(x)): the add in the projection's write-out where its kernel
  // does it, else pending, and then ln2 adds it in its own pass.
  ResidualStream a;
  if (drop_) {
    a = {n.h, drop_->forward(attn_->forward(n.y))};
  } else {
    a = attn_->forward_residual(n.h, n.y);
  }
  const AddLayerNormVariables h = ln2_->forward_add(a.h, a.pending);
  // fc1, gelu and fc2 as one node (the gelu inside the products where a
  // kernel fuses it, and the residual add in fc2's write-out where one adds
  // it) unless a rule sparsifies the MLP or its activation.
  Variable m;
  if (moe_) {
    m = moe_->forward(h.y);
  } else {
    const bool fused = mlp_->output_rule() == nullptr && act_->output_rule() == nullptr;
    if (fused && !drop_) return Linear::forward_gelu_mlp_residual(*fc1_, *fc2_, h.h, h.y, act_->form());
    m = fused ? Linear::forward_gelu_mlp(*fc1_, *fc2_, h.y, act_->form()) : mlp_->forward(h.y);
  }
  if (drop_) m = drop_->forward(m);
  return {h.h, m};
}

}  // namespace coppice
