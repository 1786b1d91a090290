#include "sparsifiers/sparsified_op.h"

#include <string>
#include <utility>

#include "autograd/function.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/sparsify_stage.h"
#include "tensor/error.h"

namespace coppice {

namespace {

enum class Site : uint64_t { kOutput = 1, kInputGrad = 2 };
enum class Stage : uint64_t { kInline = 0, kExternal = 1 };

// splitmix64's finalizer: spreads the stage's coordinates over the purpose.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Each stage draws its own random stream: an inline and an external random
// sparsifier, or two outputs, must not pick the same entries by construction.
SparsifyContext stage_context(const SparsifyContext& ctx, Site site, size_t slot, Stage stage) {
  SparsifyContext c = ctx;
  c.purpose = mix(ctx.purpose ^ mix((static_cast<uint64_t>(site) << 40) ^ (static_cast<uint64_t>(slot) << 1) ^
                                    static_cast<uint64_t>(stage)));
  return c;
}

std::string sparsifier_string(const SparsifierPtr& s) { return s ? s->describe() : std::string("keep_all"); }

// The gradient sparsified by `grad`, in the layout autograd wants for an input
// whose value is `x`: on x's pattern when x is sparse, dense otherwise.
Tensor sparsify_grad_tensor(const Tensor& g, const Tensor& x, const ValueSparsity& grad, const SparsifyContext& ctx,
                            size_t slot) {
  Tensor t = sparsify_stage(g, grad.inline_sparsifier.get(), grad.temporary_format,
                            stage_context(ctx, Site::kInputGrad, slot, Stage::kInline));
  t = sparsify_stage(t, grad.external_sparsifier.get(), grad.output_format,
                     stage_context(ctx, Site::kInputGrad, slot, Stage::kExternal));
  if (x.is_dense()) return to_dense(t);
  const bool on_pattern = t.is_sparse() && t.layout() == x.layout() && pattern_version(t) == pattern_version(x);
  return project_grad(on_pattern ? t : to_dense(t), x, "sparsified op backward");
}

Variable gradient_stages(const Variable& x, const ValueSparsity& grad, const SparsifyContext& ctx, size_t slot) {
  if (!x.defined()) return x;
  Tensor xv = x.value();
  return record(xv, "SparsifyGradientBackward", {x}, [xv, grad, ctx, slot](const Tensor& g, const GradNeeds&) {
    return std::vector<Tensor>{sparsify_grad_tensor(g, xv, grad, ctx, slot)};
  });
}

// Output `slot` through its stages; `skip_inline` when a fused kernel ran it.
Variable output_stages(const Variable& y, const ValueSparsity& out, const SparsifyContext& ctx, size_t slot,
                       bool skip_inline) {
  Variable t = y;
  if (!skip_inline) {
    t = sparsify_stage(t, out.inline_sparsifier.get(), out.temporary_format,
                       stage_context(ctx, Site::kOutput, slot, Stage::kInline));
  }
  return sparsify_stage(t, out.external_sparsifier.get(), out.output_format,
                        stage_context(ctx, Site::kOutput, slot, Stage::kExternal));
}

// Refuses, when the op is built, a format that cannot hold what its stage's
// sparsifier produces (or that does not exist), instead of mid-training. A
// keep-all external stage holds what the inline stage produced.
void check_stages(const ValueSparsity& v, const char* what, size_t index) {
  KeepAllSparsifier keep_all;
  const Sparsifier* inline_producer = v.inline_sparsifier ? v.inline_sparsifier.get() : &keep_all;
  const Sparsifier* external_producer = v.external_sparsifier ? v.external_sparsifier.get() : inline_producer;
  const std::pair<const Sparsifier*, const OutputFormat*> stages[] = {{inline_producer, &v.temporary_format},
                                                                      {external_producer, &v.output_format}};
  for (const auto& [producer, format] : stages) {
    const std::string why = producer->format_mismatch(*format);
    COPPICE_CHECK(why.empty(), "SparsifiedOp: ", what, " ", index, " (", v.describe(), "): format '", describe(*format),
                  "' cannot hold what ", producer->describe(), " produces: ", why);
  }
}

}  // namespace

std::string describe(const OutputFormat& format) {
  const FormatOptions& o = format.options;
  if (o.block_rows > 0) {
    return str_cat(format.name, "(", o.block_rows, "x", o.block_cols > 0 ? o.block_cols : o.block_rows, ")");
  }
  if (o.n > 0 || o.m > 0) return str_cat(format.name, "(", o.n, ":", o.m, ")");
  return format.name;
}

bool ValueSparsity::keeps_all_dense() const {
  return !inline_sparsifier && !external_sparsifier && temporary_format.name == "dense" &&
         output_format.name == "dense";
}

std::string ValueSparsity::describe() const {
  return str_cat("inline=", sparsifier_string(inline_sparsifier), " -> ", coppice::describe(temporary_format),
                 " -> external=", sparsifier_string(external_sparsifier), " -> ", coppice::describe(output_format));
}

SparsifiedOp::SparsifiedOp(OpFn op, std::vector<ValueSparsity> outputs, std::vector<ValueSparsity> input_grads,
                           FusedForward fused)
    : op_(std::move(op)), outputs_(std::move(outputs)), input_grads_(std::move(input_grads)), fused_(std::move(fused)) {
  COPPICE_CHECK(op_ != nullptr, "SparsifiedOp: the op is empty");
  COPPICE_CHECK(!fused_ || outputs_.size() == 1, "SparsifiedOp: a fused forward needs exactly one output, got ",
                outputs_.size(), " output specs");
  for (size_t k = 0; k < outputs_.size(); ++k) check_stages(outputs_[k], "output", k);
  for (size_t i = 0; i < input_grads_.size(); ++i) check_stages(input_grads_[i], "gradient of input", i);
}

SparsifiedOp::SparsifiedOp(SingleOpFn op, ValueSparsity output, std::vector<ValueSparsity> input_grads,
                           FusedForward fused)
    : SparsifiedOp(
          [op = std::move(op)](const std::vector<Variable>& in) {
            COPPICE_CHECK(op != nullptr, "SparsifiedOp: the op is empty");
            return std::vector<Variable>{op(in)};
          },
          {std::move(output)}, std::move(input_grads), std::move(fused)) {}

std::vector<Variable> SparsifiedOp::operator()(const std::vector<Variable>& inputs, const SparsifyContext& ctx) const {
  COPPICE_CHECK(input_grads_.empty() || input_grads_.size() == inputs.size(), "SparsifiedOp: ", input_grads_.size(),
                " input-gradient specs for ", inputs.size(), " inputs");
  std::vector<Variable> in = inputs;
  for (size_t i = 0; i < input_grads_.size(); ++i) {
    // Keep-all dense changes no gradient: no node.
    if (!input_grads_[i].keeps_all_dense()) in[i] = gradient_stages(in[i], input_grads_[i], ctx, i);
  }

  // A fused kernel runs output 0's inline stage while producing it.
  std::vector<Variable> produced;
  bool fused_inline = false;
  if (fused_) {
    const ValueSparsity& o = outputs_[0];
    Variable y =
        fused_(in, o.inline_sparsifier.get(), o.temporary_format, stage_context(ctx, Site::kOutput, 0, Stage::kInline));
    if (y.defined()) {
      produced.push_back(std::move(y));
      fused_inline = true;
    }
  }
  if (!fused_inline) produced = op_(in);
  COPPICE_CHECK(outputs_.empty() || produced.size() == outputs_.size(), "SparsifiedOp: the op returned ",
                produced.size(), " outputs for ", outputs_.size(), " output specs");
  for (size_t k = 0; k < outputs_.size(); ++k) {
    produced[k] = output_stages(produced[k], outputs_[k], ctx, k, fused_inline);
  }
  return produced;
}

Variable SparsifiedOp::call(const std::vector<Variable>& inputs, const SparsifyContext& ctx) const {
  std::vector<Variable> out = (*this)(inputs, ctx);
  COPPICE_CHECK(out.size() == 1, "SparsifiedOp::call: the op returned ", out.size(),
                " outputs; use operator() for more than one");
  return out[0];
}

}  // namespace coppice
