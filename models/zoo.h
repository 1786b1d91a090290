// The model zoo and the factory that builds a model by name from a plain
// config (what the job file's `model:` section fills one to one).
//
//   name       options (default)
//   ---------  ------------------------------------------------------------------
//   mlp        sizes ("784,300,100,10": LeNet-300-100), seed (0)
//              children fc1, fc2, ... with ReLU between; flattens [N, ...] input
//   lenet5     num_classes (10), conv_weight ("kernel" | "matrix": the convolutions' weights as
//              [out, in * 5 * 5], which CSR, BSR and n:m rules can take), seed (0); input [N, 1, 28, 28];
//              conv1 (6, 5x5, pad 2), pool, conv2 (16, 5x5), pool, fc1 400-120, fc2 120-84, fc3 84-10
//   cnn        channels ("32,64,128": 3x3 convolutions, padding 1, each then relu and a 2x2 max pool;
//              at most 4), hidden (256), num_classes (10), conv_weight (as lenet5's), seed (0); input
//              [N, 1, 28, 28]; conv1, conv2, ..., fc1 (flattened -> hidden), fc2 (hidden -> classes)
//   vit        image_size (28), patch_size (7), channels (1), dim (64), depth (2), heads (4),
//              mlp_ratio (4), num_classes (10), pool ("cls" | "mean"), attention ("dense" | "local" |
//              "block"), window (3), block (4), dropout (0), gelu ("erf" | "tanh"), seed (0); input
//              [N, C, H, W]; with pool "cls" and local or block attention the class token attends to
//              and is attended by every token (AttentionPattern::global_tokens 1)
//   char_lm    vocab_size (65), context (64), dim (64), layers (2), heads (4), mlp_ratio (4),
//              attention ("dense" | "local"; always causal), window (16), dropout (0), gelu ("erf" |
//              "tanh"), seed (0); input i64 [N, T <= context] -> logits [N, T, vocab_size]
//   gpt        vocab_size (256), context (512), dim (1024), layers (8), heads (16), mlp_ratio (4),
//              attention ("dense" | "block_sparse" | "routed"; always causal), block (64 tokens), window
//              (2 blocks; routed: 1), stride (4 blocks; 0: none), routed_top_k (2: the key blocks routed
//              attention chooses per query block from pooled q . k, besides the local ones and the
//              first; sparse/attention/routing.h), dropout (0), tie_weights (true), gelu ("erf" | "tanh"),
//              moe_experts (0: dense MLPs; else every block's MLP a mixture of that many experts of
//              mlp_ratio * dim units, models/moe.h, at most kMaxMoeExperts), moe_top_k (1, at most
//              moe_experts), moe_aux_loss (0.01: the load-balancing loss's weight, in [0, 1000]),
//              seed (0) (models/gpt.h); input i64 [N, T <= context] -> logits [N, T, vocab_size]
//   gcn        sizes ("2000,64,10": features, hidden..., classes), dropout (0.5, between layers), seed (0)
//              (models/graph_net.h): GCNConv layers over the graph set_graph gives; input one graph's
//              node features [nodes, features], dense or CSR -> logits [nodes, classes]
//   sage       as gcn, with GraphSAGE-mean layers (SAGEConv)
//
// gelu: the transformer MLP's activation (TransformerBlockOptions::gelu): "erf", the exact GELU
// (gelu; PyTorch's F.gelu), or "tanh", GPT-2's tanh approximation (gelu_tanh; PyTorch's
// F.gelu(approximate='tanh'), the form cuBLASLt's GEMM epilogues compute). The parameters are the
// same either way.
//
// model_input says what each reads and predicts (the input above and its
// classes), for checking a job's data against its model.
//
// Every option is also accepted as "dtype" ("f32" | "f64"). Unknown model
// names and options are errors listing the known ones; an option of the wrong
// type (a string where an integer is expected) or outside its range is a
// ModelOptionError naming it. Sizes (sizes' entries, dim, vocab_size,
// context, num_classes, image_size, patch_size, channels, window, block) lie
// in [1, kMaxModelWidth], depth and layers in [1, kMaxModelDepth], mlp_ratio
// in [1, kMaxMlpRatio], dropout in [0, 1); an MLP whose parameters need more
// host memory than is available is refused before any is allocated (the
// others are refused by the allocator, tensor by tensor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "models/attention.h"
#include "models/gpt.h"
#include "models/graph_net.h"
#include "models/layers.h"
#include "models/module.h"
#include "tensor/error.h"

namespace coppice {

inline constexpr int64_t kMaxModelWidth = int64_t{1} << 24;
inline constexpr int64_t kMaxModelDepth = 1024;
inline constexpr int64_t kMaxMlpRatio = 64;
inline constexpr int64_t kMaxMoeExperts = 1024;

// make_model's error for a bad option: "model '<model>': option '<option>':
// <reason>", with the option's name and the reason apart (the job loader
// names the key model.options.<option> instead).
class ModelOptionError : public Error {
 public:
  ModelOptionError(const std::string& model, std::string option, std::string reason)
      : Error(str_cat("model '", model, "': option '", option, "': ", reason)),
        option_(std::move(option)),
        reason_(std::move(reason)) {}
  const std::string& option() const { return option_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string option_;
  std::string reason_;
};

// ---- the models ----------------------------------------------------------------------

// Fully connected layers fc1..fcN over `sizes` (input first), ReLU between.
class MLP : public Module {
 public:
  explicit MLP(const std::vector<int64_t>& sizes = {784, 300, 100, 10}, const LayerOptions& options = {},
               Generator& gen = default_generator());
  Variable forward(const Variable& x) override;

 private:
  std::vector<std::shared_ptr<Linear>> layers_;
};

class LeNet5 : public Module {
 public:
  // conv_weight: how conv1 and conv2 hold their weights (models/layers.h):
  // kKernel, or kMatrix, the shape a job's rules can make CSR, BSR or n:m.
  explicit LeNet5(int64_t num_classes = 10, const LayerOptions& options = {}, Generator& gen = default_generator(),
                  ConvWeightLayout conv_weight = ConvWeightLayout::kKernel);
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<Linear> fc1_, fc2_, fc3_;
};

// A CNN wider than LeNet-5, the size where a sparse convolution's product
// is most of the step: 3x3 convolutions (padding 1) of `channels` outputs,
// each followed by relu and a 2x2 max pool, then fc1 (hidden units, relu)
// and fc2. Input [N, 1, 28, 28].
struct ConvNetOptions {
  std::vector<int64_t> channels = {32, 64, 128};
  int64_t hidden = 256;
  int64_t num_classes = 10;
  ConvWeightLayout conv_weight = ConvWeightLayout::kKernel;  // as LeNet5's
};

class ConvNet : public Module {
 public:
  ConvNet(const ConvNetOptions& cnn, const LayerOptions& options = {}, Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  // The side of the 28x28 image after `layers` pooled convolutions (0: none left).
  static int64_t pooled_side(size_t layers);

 private:
  std::vector<std::shared_ptr<Conv2d>> convs_;  // conv1, conv2, ...
  std::shared_ptr<Linear> fc1_, fc2_;
};

struct ViTOptions {
  int64_t image_size = 28;
  int64_t patch_size = 7;
  int64_t channels = 1;
  int64_t dim = 64;
  int64_t depth = 2;
  int64_t heads = 4;
  int64_t mlp_hidden = 256;
  int64_t num_classes = 10;
  bool class_token = true;   // false: mean pool over the patch tokens
  AttentionPattern pattern;  // the zoo's vit makes the class token global (global_tokens 1) when sparse
  double dropout = 0.0;
  GeluForm gelu = GeluForm::kErf;  // the blocks' MLP activation (TransformerBlockOptions::gelu)
};

// Patches (C * p * p values each) -> patch_embed -> [cls_token] + pos_embed
// -> blocks.0.. -> norm -> head (from the class token or the mean).
class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(const ViTOptions& vit = {}, const LayerOptions& options = {},
                             Generator& gen = default_generator());
  Variable forward(const Variable& x) override;

 private:
  ViTOptions o_;
  std::shared_ptr<Linear> patch_embed_, head_;
  Variable* cls_token_ = nullptr;       // [1, 1, dim]
  Variable* pos_embed_;                 // [1, tokens, dim]
  std::shared_ptr<Sequential> blocks_;  // of TransformerBlock
  std::shared_ptr<LayerNorm> norm_;
};

struct CharLMOptions {
  int64_t vocab_size = 65;
  int64_t context = 64;
  int64_t dim = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t mlp_hidden = 256;
  AttentionPattern pattern{AttentionPattern::Kind::kDense, 0, 0, true};  // always made causal
  double dropout = 0.0;
  GeluForm gelu = GeluForm::kErf;  // the blocks' MLP activation (TransformerBlockOptions::gelu)
};

// tok_embed + pos_embed -> blocks.0.. (causal) -> norm -> head.
class CharTransformerLM : public Module {
 public:
  explicit CharTransformerLM(const CharLMOptions& lm = {}, const LayerOptions& options = {},
                             Generator& gen = default_generator());
  // x: integer token ids [N, T] with T <= context (a constant Variable).
  Variable forward(const Variable& x) override;

 private:
  CharLMOptions o_;
  std::shared_ptr<Embedding> tok_embed_;
  Variable* pos_embed_;                 // [context, dim]
  std::shared_ptr<Sequential> blocks_;  // of TransformerBlock
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Linear> head_;
};

// ---- the factory -------------------------------------------------------------------------

using ModelOption = std::variant<int64_t, double, bool, std::string>;

struct ModelConfig {
  std::string name;
  std::map<std::string, ModelOption> options;
};

// The model named config.name, built with its options (defaults above).
ModulePtr make_model(const ModelConfig& config);

// ---- what a model reads ------------------------------------------------------------------

// What a model reads per example and what it predicts, as its options (with
// the defaults above) make it, so that a job can be checked against its data
// without knowing the zoo's models:
//   kFeatures  f32 [N, features] (mlp flattens [N, ...] to it); example {features}
//   kImage     f32 [N, C, H, W], not flattened; example {C, H, W}
//   kTokens    i64 token ids [N, T], 1 <= T <= context; example {context}
//   kGraph     one graph: node features [nodes, features] (dense or CSR) and
//              the adjacency GraphNet::set_graph takes; example {features}
enum class InputKind { kFeatures, kImage, kTokens, kGraph };

struct ModelInput {
  InputKind kind = InputKind::kFeatures;
  Shape example;
  // The classes it tells apart (kTokens: vocab_size, the ids it embeds and
  // the logits it gives per position).
  int64_t classes = 0;
  // Where the options state the input and the classes, for messages:
  // model.options.<option>, and, where the option holds more, which part of
  // it ("the first size"). An empty option: the model fixes it.
  struct From {
    std::string option;
    std::string part;
  };
  From input_from, classes_from;
};

// What the model config.name reads, with its options; throws as make_model
// does for an unknown model or option, or a bad value of an option it reads
// (it builds nothing).
ModelInput model_input(const ModelConfig& config);
// The known model names, sorted; and a model's known options.
std::vector<std::string> model_names();
std::vector<std::string> model_option_names(const std::string& name);

}  // namespace coppice
