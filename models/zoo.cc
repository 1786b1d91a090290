#include "models/zoo.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include "autograd/autograd.h"
#include "tensor/checked_math.h"
#include "tensor/error.h"
#include "tensor/host_memory.h"

namespace coppice {

// ---- MLP ---------------------------------------------------------------------------

MLP::MLP(const std::vector<int64_t>& sizes, const LayerOptions& options, Generator& gen) : Module("MLP") {
  COPPICE_CHECK(sizes.size() >= 2, "MLP: needs at least an input and an output size, got ", sizes.size(), " sizes");
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layers_.push_back(
        register_module(str_cat("fc", i + 1), std::make_shared<Linear>(sizes[i], sizes[i + 1], true, options, gen)));
  }
}

Variable MLP::forward(const Variable& x) {
  return run_op({x}, [this](const std::vector<Variable>& in) {
    Variable h = in[0].dim() > 2 ? flatten(in[0], 1) : in[0];
    for (size_t i = 0; i < layers_.size(); ++i) {
      h = i + 1 < layers_.size() ? layers_[i]->forward_relu(h) : layers_[i]->forward(h);
    }
    return h;
  });
}

// ---- LeNet-5 -------------------------------------------------------------------------

LeNet5::LeNet5(int64_t num_classes, const LayerOptions& options, Generator& gen, ConvWeightLayout conv_weight)
    : Module("LeNet5") {
  Conv2dOptions pad2;
  pad2.padding = {2, 2};
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(1, 6, 5, pad2, true, options, gen, conv_weight));
  conv2_ =
      register_module("conv2", std::make_shared<Conv2d>(6, 16, 5, Conv2dOptions{}, true, options, gen, conv_weight));
  fc1_ = register_module("fc1", std::make_shared<Linear>(16 * 5 * 5, 120, true, options, gen));
  fc2_ = register_module("fc2", std::make_shared<Linear>(120, 84, true, options, gen));
  fc3_ = register_module("fc3", std::make_shared<Linear>(84, num_classes, true, options, gen));
}

Variable LeNet5::forward(const Variable& x) {
  COPPICE_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
                "LeNet5: expected input [N, 1, 28, 28]");
  return run_op({x}, [this](const std::vector<Variable>& in) {
    Variable h = max_pool2d(relu(conv1_->forward(in[0])), {2, 2});  // [N, 6, 14, 14]
    h = max_pool2d(relu(conv2_->forward(h)), {2, 2});               // [N, 16, 5, 5]
    h = fc1_->forward_relu(flatten(h, 1));
    h = fc2_->forward_relu(h);
    return fc3_->forward(h);
  });
}

// ---- a wider CNN -----------------------------------------------------------------------

ConvNet::ConvNet(const ConvNetOptions& cnn, const LayerOptions& options, Generator& gen) : Module("ConvNet") {
  COPPICE_CHECK(!cnn.channels.empty(), "ConvNet: needs at least one convolution");
  Conv2dOptions pad1;
  pad1.padding = {1, 1};
  const int64_t side = pooled_side(cnn.channels.size());
  int64_t in = 1;
  for (size_t i = 0; i < cnn.channels.size(); ++i) {
    convs_.push_back(
        register_module(str_cat("conv", i + 1),
                        std::make_shared<Conv2d>(in, cnn.channels[i], 3, pad1, true, options, gen, cnn.conv_weight)));
    in = cnn.channels[i];
  }
  COPPICE_CHECK(side >= 1, "ConvNet: ", cnn.channels.size(), " pooled layers leave nothing of a 28x28 image");
  fc1_ = register_module("fc1", std::make_shared<Linear>(in * side * side, cnn.hidden, true, options, gen));
  fc2_ = register_module("fc2", std::make_shared<Linear>(cnn.hidden, cnn.num_classes, true, options, gen));
}

int64_t ConvNet::pooled_side(size_t layers) {
  int64_t side = 28;
  for (size_t i = 0; i < layers && side > 0; ++i) side /= 2;
  return side;
}

Variable ConvNet::forward(const Variable& x) {
  COPPICE_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
                "ConvNet: expected input [N, 1, 28, 28]");
  return run_op({x}, [this](const std::vector<Variable>& in) {
    Variable h = in[0];
    for (const auto& conv : convs_) h = max_pool2d(relu(conv->forward(h)), {2, 2});  // halves the side
    return fc2_->forward(fc1_->forward_relu(flatten(h, 1)));
  });
}

// ---- ViT ------------------------------------------------------------------------------

VisionTransformer::VisionTransformer(const ViTOptions& vit, const LayerOptions& options, Generator& gen)
    : Module("VisionTransformer"), o_(vit) {
  COPPICE_CHECK(vit.patch_size > 0 && vit.image_size % vit.patch_size == 0, "VisionTransformer: patch_size (",
                vit.patch_size, ") must divide image_size (", vit.image_size, ")");
  const int64_t side = vit.image_size / vit.patch_size;
  auto patch_what = [&] {
    return str_cat("VisionTransformer: values per patch (channels ", vit.channels, ", patch_size ", vit.patch_size,
                   ")");
  };
  const int64_t patch_values =
      checked_mul(checked_mul(vit.channels, vit.patch_size, patch_what), vit.patch_size, patch_what);
  const int64_t tokens = side * side + (vit.class_token ? 1 : 0);
  patch_embed_ = register_module("patch_embed", std::make_shared<Linear>(patch_values, vit.dim, true, options, gen));
  if (vit.class_token) {
    cls_token_ = register_parameter(
        "cls_token",
        Variable(mul(randn({1, 1, vit.dim}, TensorOptions(options.dtype), gen), 0.02).to(options.device), true));
  }
  pos_embed_ = register_parameter(
      "pos_embed",
      Variable(mul(randn({1, tokens, vit.dim}, TensorOptions(options.dtype), gen), 0.02).to(options.device), true));
  blocks_ = register_module("blocks", std::make_shared<Sequential>());
  TransformerBlockOptions b{vit.dim, vit.heads, vit.mlp_hidden, vit.pattern, vit.dropout, vit.gelu};
  for (int64_t i = 0; i < vit.depth; ++i) blocks_->push_back(std::make_shared<TransformerBlock>(b, options, gen));
  norm_ = register_module("norm", std::make_shared<LayerNorm>(Shape{vit.dim}, 1e-5, true, options));
  head_ = register_module("head", std::make_shared<Linear>(vit.dim, vit.num_classes, true, options, gen));
}

Variable VisionTransformer::forward(const Variable& x) {
  const int64_t p = o_.patch_size, side = o_.image_size / p;
  COPPICE_CHECK(x.dim() == 4 && x.size(1) == o_.channels && x.size(2) == o_.image_size && x.size(3) == o_.image_size,
                "VisionTransformer: expected input [N, ", o_.channels, ", ", o_.image_size, ", ", o_.image_size, "]");
  return run_op({x}, [this, p, side](const std::vector<Variable>& in) {
    const int64_t n = in[0].size(0);
    Variable patches = reshape(permute(reshape(in[0], {n, o_.channels, side, p, side, p}), {0, 2, 4, 1, 3, 5}),
                               {n, side * side, o_.channels * p * p});
    Variable h = patch_embed_->forward(patches);  // [N, P, dim]
    if (cls_token_) h = cat({expand(*cls_token_, {n, 1, o_.dim}), h}, 1);
    h = blocks_->forward(add(h, *pos_embed_));
    h = norm_->forward(h);
    Variable pooled = cls_token_ ? select(h, 1, 0) : mean(h, {1});
    return head_->forward(pooled);
  });
}

// ---- character LM -------------------------------------------------------------------------

CharTransformerLM::CharTransformerLM(const CharLMOptions& lm, const LayerOptions& options, Generator& gen)
    : Module("CharTransformerLM"), o_(lm) {
  o_.pattern.causal = true;
  COPPICE_CHECK(lm.vocab_size > 0 && lm.context > 0, "CharTransformerLM: vocab_size and context must be positive");
  tok_embed_ = register_module("tok_embed", std::make_shared<Embedding>(lm.vocab_size, lm.dim, options, gen));
  pos_embed_ = register_parameter(
      "pos_embed",
      Variable(mul(randn({lm.context, lm.dim}, TensorOptions(options.dtype), gen), 0.02).to(options.device), true));
  blocks_ = register_module("blocks", std::make_shared<Sequential>());
  TransformerBlockOptions b{lm.dim, lm.heads, lm.mlp_hidden, o_.pattern, lm.dropout, lm.gelu};
  for (int64_t i = 0; i < lm.layers; ++i) blocks_->push_back(std::make_shared<TransformerBlock>(b, options, gen));
  norm_ = register_module("norm", std::make_shared<LayerNorm>(Shape{lm.dim}, 1e-5, true, options));
  head_ = register_module("head", std::make_shared<Linear>(lm.dim, lm.vocab_size, true, options, gen));
}

Variable CharTransformerLM::forward(const Variable& x) {
  COPPICE_CHECK(x.dim() == 2 && x.size(1) >= 1 && x.size(1) <= o_.context,
                "CharTransformerLM: expected token ids [N, T] ", "with 1 <= T <= context (", o_.context, ")");
  return run_op({x}, [this](const std::vector<Variable>& in) {
    const int64_t t = in[0].size(1);
    Variable h = add(tok_embed_->forward(in[0]), slice(*pos_embed_, 0, 0, t));  // [N, T, dim]
    return head_->forward(norm_->forward(blocks_->forward(h)));
  });
}

// ---- factory --------------------------------------------------------------------------------

namespace {

const char* option_type(const ModelOption& v) {
  switch (v.index()) {
    case 0: return "integer";
    case 1: return "float";
    case 2: return "bool";
    default: return "string";
  }
}

// Reads a config's options, remembering which were asked for, so that an
// unknown one can be reported with the known ones.
class Options {
 public:
  Options(const ModelConfig& config, std::vector<std::string> known) : config_(config), known_(std::move(known)) {
    known_.push_back("dtype");
    std::sort(known_.begin(), known_.end());
    for (const auto& [name, value] : config.options) {
      COPPICE_CHECK(std::binary_search(known_.begin(), known_.end(), name), "model '", config.name,
                    "': unknown option '", name, "'; known: ", str_join(known_, ", "));
    }
  }

  int64_t integer(const std::string& name, int64_t fallback) const {
    const ModelOption* v = find(name);
    if (!v) return fallback;
    if (!std::holds_alternative<int64_t>(*v)) bad(name, "must be an integer, got a ", option_type(*v));
    return std::get<int64_t>(*v);
  }
  double real(const std::string& name, double fallback) const {
    const ModelOption* v = find(name);
    if (!v) return fallback;
    if (std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
    if (!std::holds_alternative<double>(*v)) bad(name, "must be a number, got a ", option_type(*v));
    return std::get<double>(*v);
  }
  std::string string(const std::string& name, const std::string& fallback) const {
    const ModelOption* v = find(name);
    if (!v) return fallback;
    if (!std::holds_alternative<std::string>(*v)) bad(name, "must be a string, got a ", option_type(*v));
    return std::get<std::string>(*v);
  }
  std::string choice(const std::string& name, const std::string& fallback,
                     const std::vector<std::string>& choices) const {
    std::string s = string(name, fallback);
    if (std::find(choices.begin(), choices.end(), s) == choices.end())
      bad(name, "is '", s, "'; known: ", str_join(choices, ", "));
    return s;
  }
  // A count or size in [1, max].
  int64_t positive(const std::string& name, int64_t fallback, int64_t max = kMaxModelWidth) const {
    int64_t v = integer(name, fallback);
    if (v < 1 || v > max) bad(name, "must be in [1, ", max, "], got ", v);
    return v;
  }
  bool boolean(const std::string& name, bool fallback) const {
    const ModelOption* v = find(name);
    if (!v) return fallback;
    if (!std::holds_alternative<bool>(*v)) bad(name, "must be true or false, got a ", option_type(*v));
    return std::get<bool>(*v);
  }
  double probability(const std::string& name, double fallback = 0.0) const {
    const double v = real(name, fallback);
    if (!(v >= 0.0 && v < 1.0)) bad(name, "must be in [0, 1), got ", v);
    return v;
  }
  LayerOptions layer_options() const {
    LayerOptions o;
    o.dtype = choice("dtype", "f32", {"f32", "f64"}) == "f64" ? DType::kF64 : DType::kF32;
    return o;
  }
  // Throws ModelOptionError for option `name`, the reason made of `parts`.
  template <typename... Parts>
  [[noreturn]] void bad(const std::string& name, const Parts&... parts) const {
    throw ModelOptionError(config_.name, name, str_cat(parts...));
  }

 private:
  const ModelOption* find(const std::string& name) const {
    auto it = config_.options.find(name);
    return it == config_.options.end() ? nullptr : &it->second;
  }
  const ModelConfig& config_;
  std::vector<std::string> known_;
};

// `option`'s comma-separated positive integers: at least `min_count` of
// them, at most kMaxModelDepth + 1, each at most kMaxModelWidth.
std::vector<int64_t> parse_sizes(const Options& o, const std::string& option, const std::string& text,
                                 size_t min_count = 2) {
  std::vector<int64_t> sizes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int64_t v = 0;
    bool too_large = false;
    try {
      v = std::stoll(item, &used);
    } catch (const std::out_of_range&) { too_large = true; } catch (const std::exception&) {
      used = 0;
    }
    if (too_large || (used > 0 && v > kMaxModelWidth))
      o.bad(option, item, " is more than ", kMaxModelWidth, " (in '", text, "')");
    if (used == 0 || item.find_first_not_of(" \t", used) != std::string::npos || v <= 0)
      o.bad(option, "'", text, "' is not a comma-separated list of positive integers");
    sizes.push_back(v);
  }
  if (sizes.size() < min_count) o.bad(option, "needs at least ", min_count, " sizes, got '", text, "'");
  if (sizes.size() > static_cast<size_t>(kMaxModelDepth) + 1)
    o.bad(option, sizes.size() - 1, " layers, more than ", kMaxModelDepth);
  return sizes;
}

// An MLP's parameters are known from its sizes: refused before any is
// allocated when they need more host memory than there is.
void check_mlp_fits(const Options& o, const std::vector<int64_t>& sizes, DType dtype) {
  int64_t params = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    // Each size is at most 2^24 and there are at most 1024 layers: no overflow.
    params += sizes[i] * sizes[i + 1] + sizes[i + 1];
  }
  int64_t bytes = 0;
  if (mul_overflows(params, dtype_size(dtype), &bytes)) bytes = std::numeric_limits<int64_t>::max();
  try {
    check_host_memory(bytes, str_cat("[", str_join(sizes, ", "), "]: ", params, " parameters of ", dtype_name(dtype)));
  } catch (const Error& e) { o.bad("sizes", e.what()); }
}

AttentionPattern read_pattern(const Options& o, const std::vector<std::string>& kinds, int64_t window, int64_t block) {
  AttentionPattern p;
  p.kind = attention_kind_from_name(o.choice("attention", "dense", kinds));
  p.window = o.positive("window", window);
  if (block > 0) p.block = o.positive("block", block);
  return p;
}

// gelu: the transformer MLP's activation, "erf" (the exact GELU, the
// default) or "tanh" (GPT-2's approximation).
GeluForm read_gelu(const Options& o) {
  return o.choice("gelu", "erf", {"erf", "tanh"}) == "tanh" ? GeluForm::kTanh : GeluForm::kErf;
}

// Each model's options read once, with their defaults, for both building it
// and saying what it reads (model_input).
std::vector<int64_t> mlp_sizes(const Options& o) {
  return parse_sizes(o, "sizes", o.string("sizes", "784,300,100,10"));
}

int64_t lenet5_classes(const Options& o) { return o.positive("num_classes", 10); }
ConvWeightLayout conv_weight_layout(const Options& o) {
  return o.choice("conv_weight", "kernel", {"kernel", "matrix"}) == "matrix" ? ConvWeightLayout::kMatrix
                                                                             : ConvWeightLayout::kKernel;
}

ConvNetOptions cnn_options(const Options& o) {
  ConvNetOptions c;
  c.channels = parse_sizes(o, "channels", o.string("channels", "32,64,128"), 1);
  c.hidden = o.positive("hidden", 256);
  c.num_classes = o.positive("num_classes", 10);
  c.conv_weight = conv_weight_layout(o);
  if (ConvNet::pooled_side(c.channels.size()) < 1)
    o.bad("channels", c.channels.size(), " layers pool 28x28 images away (at most 4)");
  return c;
}

ViTOptions vit_options(const Options& o) {
  ViTOptions v;
  v.image_size = o.positive("image_size", 28);
  v.patch_size = o.positive("patch_size", 7);
  v.channels = o.positive("channels", 1);
  v.dim = o.positive("dim", 64);
  v.depth = o.positive("depth", 2, kMaxModelDepth);
  v.heads = o.positive("heads", 4);
  v.mlp_hidden = v.dim * o.positive("mlp_ratio", 4, kMaxMlpRatio);
  v.num_classes = o.positive("num_classes", 10);
  v.class_token = o.choice("pool", "cls", {"cls", "mean"}) == "cls";
  v.pattern = read_pattern(o, {"dense", "local", "block"}, 3, 4);
  // The head reads the class token only: under a sparse pattern it would see
  // just its own block or window, so it attends to and is attended by every token.
  if (v.class_token && v.pattern.is_sparse()) v.pattern.global_tokens = 1;
  v.dropout = o.probability("dropout");
  v.gelu = read_gelu(o);
  return v;
}

CharLMOptions char_lm_options(const Options& o) {
  CharLMOptions c;
  c.vocab_size = o.positive("vocab_size", 65);
  c.context = o.positive("context", 64);
  c.dim = o.positive("dim", 64);
  c.layers = o.positive("layers", 2, kMaxModelDepth);
  c.heads = o.positive("heads", 4);
  c.mlp_hidden = c.dim * o.positive("mlp_ratio", 4, kMaxMlpRatio);
  c.pattern = read_pattern(o, {"dense", "local"}, 16, 0);
  c.pattern.causal = true;
  c.dropout = o.probability("dropout");
  c.gelu = read_gelu(o);
  return c;
}

GPTOptions gpt_options(const Options& o) {
  GPTOptions g;
  g.vocab_size = o.positive("vocab_size", 256);
  g.context = o.positive("context", 512);
  g.dim = o.positive("dim", 1024);
  g.layers = o.positive("layers", 8, kMaxModelDepth);
  g.heads = o.positive("heads", 16);
  if (g.dim % g.heads != 0) o.bad("heads", "must divide dim (", g.dim, "), got ", g.heads);
  g.mlp_hidden = g.dim * o.positive("mlp_ratio", 4, kMaxMlpRatio);
  g.pattern.kind = attention_kind_from_name(o.choice("attention", "dense", {"dense", "block_sparse", "routed"}));
  g.pattern.block = o.positive("block", 64);
  const bool routed = g.pattern.kind == AttentionPattern::Kind::kRouted;
  g.pattern.window = o.positive("window", routed ? 1 : 2);
  g.pattern.top_k = o.integer("routed_top_k", 2);
  if (g.pattern.top_k < 0 || g.pattern.top_k > kMaxModelWidth)
    o.bad("routed_top_k", "must be in [0, ", kMaxModelWidth, "], got ", g.pattern.top_k);
  g.pattern.stride = o.integer("stride", 4);
  if (g.pattern.stride < 0 || g.pattern.stride > kMaxModelWidth)
    o.bad("stride", "must be in [0, ", kMaxModelWidth, "] (0: no strided blocks), got ", g.pattern.stride);
  g.pattern.causal = true;
  g.dropout = o.probability("dropout");
  g.tie_weights = o.boolean("tie_weights", true);
  g.gelu = read_gelu(o);
  // A mixture of experts in every block's MLP (moe_experts 0: the dense MLP).
  g.moe_experts = o.integer("moe_experts", 0);
  if (g.moe_experts < 0 || g.moe_experts > kMaxMoeExperts)
    o.bad("moe_experts", "must be in [0, ", kMaxMoeExperts, "] (0: a dense MLP), got ", g.moe_experts);
  g.moe_top_k = o.positive("moe_top_k", 1);
  if (g.moe_experts > 0 && g.moe_top_k > g.moe_experts)
    o.bad("moe_top_k", "must be at most moe_experts (", g.moe_experts, "), got ", g.moe_top_k);
  g.moe_aux_loss = o.real("moe_aux_loss", 0.01);
  if (!(g.moe_aux_loss >= 0.0 && g.moe_aux_loss <= 1e3))
    o.bad("moe_aux_loss", "must be in [0, 1000], got ", g.moe_aux_loss);
  return g;
}

GraphNetOptions graph_net_options(const Options& o, GraphLayerKind kind) {
  GraphNetOptions g;
  g.kind = kind;
  g.sizes = parse_sizes(o, "sizes", o.string("sizes", "2000,64,10"));
  g.dropout = o.probability("dropout", 0.5);
  g.dropout_seed = static_cast<uint64_t>(o.integer("seed", 0));
  return g;
}

// The generator a model's weights are drawn from: its own, seeded by its
// seed option (never the thread's default stream).
Generator model_generator(const Options& o) { return Generator(static_cast<uint64_t>(o.integer("seed", 0))); }

struct ModelEntry {
  std::vector<std::string> options;
  std::function<ModulePtr(const Options&)> build;
  std::function<ModelInput(const Options&)> input;
};

ModelEntry graph_entry(GraphLayerKind kind);

const std::map<std::string, ModelEntry>& registry() {
  static const std::map<std::string, ModelEntry> models = {
      {"mlp",
       {{"sizes", "seed"},
        [](const Options& o) -> ModulePtr {
          Generator gen = model_generator(o);
          const std::vector<int64_t> sizes = mlp_sizes(o);
          const LayerOptions layers = o.layer_options();
          check_mlp_fits(o, sizes, layers.dtype);
          return std::make_shared<MLP>(sizes, layers, gen);
        },
        [](const Options& o) {
          const std::vector<int64_t> sizes = mlp_sizes(o);
          return ModelInput{InputKind::kFeatures,
                            {sizes.front()},
                            sizes.back(),
                            {"sizes", "the first size"},
                            {"sizes", "the last size"}};
        }}},
      {"lenet5",
       {{"num_classes", "conv_weight", "seed"},
        [](const Options& o) -> ModulePtr {
          Generator gen = model_generator(o);
          return std::make_shared<LeNet5>(lenet5_classes(o), o.layer_options(), gen, conv_weight_layout(o));
        },
        [](const Options& o) {
          return ModelInput{InputKind::kImage, {1, 28, 28}, lenet5_classes(o), {}, {"num_classes", ""}};
        }}},
      {"cnn",
       {{"channels", "hidden", "num_classes", "conv_weight", "seed"},
        [](const Options& o) -> ModulePtr {
          Generator gen = model_generator(o);
          return std::make_shared<ConvNet>(cnn_options(o), o.layer_options(), gen);
        },
        [](const Options& o) {
          return ModelInput{InputKind::kImage, {1, 28, 28}, cnn_options(o).num_classes, {}, {"num_classes", ""}};
        }}},
      {"vit",
       {{"image_size", "patch_size", "channels", "dim", "depth", "heads", "mlp_ratio", "num_classes", "pool",
         "attention", "window", "block", "dropout", "gelu", "seed"},
        [](const Options& o) -> ModulePtr {
          Generator gen = model_generator(o);
          return std::make_shared<VisionTransformer>(vit_options(o), o.layer_options(), gen);
        },
        [](const Options& o) {
          const ViTOptions v = vit_options(o);
          return ModelInput{InputKind::kImage,
                            {v.channels, v.image_size, v.image_size},
                            v.num_classes,
                            {"image_size", ""},
                            {"num_classes", ""}};
        }}},
      {"gpt",
       {{"vocab_size", "context", "dim", "layers", "heads", "mlp_ratio", "attention", "block", "window", "stride",
         "routed_top_k", "dropout", "tie_weights", "gelu", "moe_experts", "moe_top_k", "moe_aux_loss", "seed"},
        [](const Options& o) -> ModulePtr {
          Generator gen = model_generator(o);
          return std::make_shared<GPT>(gpt_options(o), o.layer_options(), gen);
        },
        [](const Options& o) {
          const GPTOptions g = gpt_options(o);
          return ModelInput{InputKind::kTokens, {g.context}, g.vocab_size, {"context", ""}, {"vocab_size", ""}};
        }}},
      {"char_lm",
       {{"vocab_size", "context", "dim", "layers", "heads", "mlp_ratio", "attention", "window", "dropout", "gelu",
         "seed"},
        [](const Options& o) -> ModulePtr {
          Generator gen = model_generator(o);
          return std::make_shared<CharTransformerLM>(char_lm_options(o), o.layer_options(), gen);
        },
        [](const Options& o) {
          const CharLMOptions c = char_lm_options(o);
          return ModelInput{InputKind::kTokens, {c.context}, c.vocab_size, {"context", ""}, {"vocab_size", ""}};
        }}},
      {"gcn", graph_entry(GraphLayerKind::kGCN)},
      {"sage", graph_entry(GraphLayerKind::kSAGE)},
  };
  return models;
}

ModelEntry graph_entry(GraphLayerKind kind) {
  return {{"sizes", "dropout", "seed"},
          [kind](const Options& o) -> ModulePtr {
            Generator gen = model_generator(o);
            const GraphNetOptions g = graph_net_options(o, kind);
            const LayerOptions layers = o.layer_options();
            check_mlp_fits(o, g.sizes, layers.dtype);  // a GCN's weights are an MLP's; SAGE's twice
            return std::make_shared<GraphNet>(g, layers, gen);
          },
          [kind](const Options& o) {
            const GraphNetOptions g = graph_net_options(o, kind);
            return ModelInput{InputKind::kGraph,
                              {g.sizes.front()},
                              g.sizes.back(),
                              {"sizes", "the first size"},
                              {"sizes", "the last size"}};
          }};
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : registry()) names.push_back(name);
  return names;
}

std::vector<std::string> model_option_names(const std::string& name) {
  auto it = registry().find(name);
  COPPICE_CHECK(it != registry().end(), "unknown model '", name, "'; known: ", str_join(model_names(), ", "));
  std::vector<std::string> options = it->second.options;
  options.push_back("dtype");
  std::sort(options.begin(), options.end());
  return options;
}

namespace {

const ModelEntry& entry_of(const std::string& name) {
  auto it = registry().find(name);
  COPPICE_CHECK(it != registry().end(), "unknown model '", name, "'; known: ", str_join(model_names(), ", "));
  return it->second;
}

}  // namespace

ModulePtr make_model(const ModelConfig& config) {
  const ModelEntry& entry = entry_of(config.name);
  return entry.build(Options(config, entry.options));
}

ModelInput model_input(const ModelConfig& config) {
  const ModelEntry& entry = entry_of(config.name);
  return entry.input(Options(config, entry.options));
}

}  // namespace coppice
