#include "models/gpt.h"

#include "autograd/autograd.h"
#include "autograd/graph_observer.h"
#include "tensor/error.h"

namespace coppice {

GPT::GPT(const GPTOptions& gpt, const LayerOptions& options, Generator& gen) : Module("GPT"), o_(gpt) {
  o_.pattern.causal = true;
  COPPICE_CHECK(gpt.vocab_size > 0 && gpt.context > 0, "GPT: vocab_size and context must be positive");
  COPPICE_CHECK(gpt.dim > 0 && gpt.heads > 0 && gpt.dim % gpt.heads == 0, "GPT: dim (", gpt.dim,
                ") must be a positive multiple of heads (", gpt.heads, ")");
  constexpr double kEmbedStd = 0.02;
  tok_embed_ =
      register_module("tok_embed", std::make_shared<Embedding>(gpt.vocab_size, gpt.dim, options, gen, kEmbedStd));
  pos_embed_ = register_parameter(
      "pos_embed",
      Variable(mul(randn({gpt.context, gpt.dim}, TensorOptions(options.dtype), gen), kEmbedStd).to(options.device),
               true));
  if (gpt.dropout > 0.0) drop_ = register_module("drop", std::make_shared<Dropout>(gpt.dropout, 0xe3bed));
  blocks_ = register_module("blocks", std::make_shared<Sequential>());
  const TransformerBlockOptions b{gpt.dim,  gpt.heads,       gpt.mlp_hidden, o_.pattern,      gpt.dropout,
                                  gpt.gelu, gpt.moe_experts, gpt.moe_top_k,  gpt.moe_aux_loss};
  for (int64_t i = 0; i < gpt.layers; ++i) blocks_->push_back(std::make_shared<TransformerBlock>(b, options, gen));
  norm_ = register_module("norm", std::make_shared<LayerNorm>(Shape{gpt.dim}, 1e-5, true, options));
  if (!gpt.tie_weights) {
    head_ = register_module("head", std::make_shared<Linear>(gpt.dim, gpt.vocab_size, true, options, gen));
  }
}

Variable GPT::forward(const Variable& x) {
  COPPICE_CHECK(x.dim() == 2 && x.size(1) >= 1 && x.size(1) <= o_.context, "GPT: expected token ids [N, T] ",
                "with 1 <= T <= context (", o_.context, ")");
  return run_op({x}, [this](const std::vector<Variable>& in) {
    const int64_t t = in[0].size(1);
    Variable h = add(tok_embed_->forward(in[0]), slice(*pos_embed_, 0, 0, t));  // [N, T, dim]
    if (drop_) h = drop_->forward(h);
    h = blocks_and_norm(h);
    if (head_) return head_->forward(h);
    return linear(h, tok_embed_->weight());  // [N, T, vocab]: h times the embedding, transposed
  });
}

Variable GPT::blocks_and_norm(const Variable& h) {
  bool streamed = graph_observer() == nullptr && blocks_->output_rule() == nullptr;
  for (size_t i = 0; streamed && i < blocks_->size(); ++i) streamed = (*blocks_)[i].output_rule() == nullptr;
  if (!streamed) return norm_->forward(blocks_->forward(h));
  ResidualStream s{h, Variable()};
  for (size_t i = 0; i < blocks_->size(); ++i) s = static_cast<TransformerBlock&>((*blocks_)[i]).forward_stream(s);
  return s.pending.defined() ? norm_->forward_add(s.h, s.pending).y : norm_->forward(s.h);
}

}  // namespace coppice
