// SparsifiedOp: any differentiable op plus sparsifiers on its forward
// outputs and on its inputs' gradients (docs/architecture.md, "Sparsifiers"; the
// STen model).
//
//   SparsifiedOp op(
//       [](const std::vector<Variable>& in) { return linear(in[0], in[1], in[2]); },
//       /*output=*/{nullptr, {}, magnitude_90, {"csr", {}}},         // y: top 10 % in CSR
//       /*input_grads=*/{{}, {nullptr, {}, magnitude_50, {}}, {}});  // dW: top half
//   Variable y = op.call({x, w, b}, ctx);
//
// Forward, per output: y -> inline sparsifier -> value in the temporary format
// -> external sparsifier -> value in the output format. Backward, per input:
// the gradient the op sends to the input -> inline -> temporary format ->
// external -> output format, then handed to autograd in the input's layout
// (projected onto a sparse input's pattern; dense for a dense input, since
// autograd keeps a dense variable's gradient dense). A null sparsifier keeps
// all. Gradients are exact for what is computed: through a forward stage, the
// gradient of y * mask * scale (sparsify_stage.h). As the Sparsifier
// interface says, a sparse value is sparsified through its dense form, so a
// fraction counts dense entries: magnitude(sparsity=0.5) on the gradient of a
// 10 %-dense CSR weight keeps all of its stored entries.
//
// "Inline" means applied while the value is produced. An op with a fused
// kernel passes a FusedForward that takes output 0's inline sparsifier and
// temporary format itself (fused_relu.h: relu straight into CSR); otherwise,
// or when the fused kernel declines, the inline sparsifier runs after the op.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "sparsifiers/sparsifier.h"

namespace coppice {

// What happens to one value (a forward output or an input's gradient).
// Default: keep all, dense.
struct ValueSparsity {
  SparsifierPtr inline_sparsifier;  // null: keep all
  OutputFormat temporary_format;
  SparsifierPtr external_sparsifier;  // null: keep all
  OutputFormat output_format;

  // No sparsifier and both formats dense: a gradient passes unchanged (no
  // graph node); an output is only made dense.
  bool keeps_all_dense() const;
  // "inline=magnitude(sparsity=0.9) -> csr -> external=keep_all -> dense", for errors and logs.
  std::string describe() const;
};

std::string describe(const OutputFormat& format);  // "csr", "bsr(4x4)", "nm(2:4)"

using OpFn = std::function<std::vector<Variable>(const std::vector<Variable>&)>;
using SingleOpFn = std::function<Variable(const std::vector<Variable>&)>;

// An op's fused kernel for output 0: the output with `inline_sparsifier`
// (may be null) already applied and stored in `temporary_format`,
// differentiable with respect to the inputs. Returns an undefined Variable
// when it cannot fuse this sparsifier, format, shape or device; the generic
// path then runs. Only for one-output ops.
using FusedForward = std::function<Variable(const std::vector<Variable>& inputs, const Sparsifier* inline_sparsifier,
                                            const OutputFormat& temporary_format, const SparsifyContext& ctx)>;

class SparsifiedOp {
 public:
  // `outputs`: one entry per output of op, or empty for keep-all dense.
  // `input_grads`: one entry per input, or empty for unchanged gradients.
  // Throws when a format cannot hold what its stage's sparsifier produces
  // (Sparsifier::format_mismatch), so that the mistake shows before training.
  SparsifiedOp(OpFn op, std::vector<ValueSparsity> outputs, std::vector<ValueSparsity> input_grads = {},
               FusedForward fused = nullptr);
  // A one-output op.
  SparsifiedOp(SingleOpFn op, ValueSparsity output, std::vector<ValueSparsity> input_grads = {},
               FusedForward fused = nullptr);

  // Runs the op. `ctx` seeds random sparsifiers: each output and each input
  // gradient, inline and external, draws from its own purpose derived from
  // ctx.purpose, so that no two stages share a mask by accident.
  std::vector<Variable> operator()(const std::vector<Variable>& inputs, const SparsifyContext& ctx = {}) const;
  // The single output of a one-output op (throws for any other count).
  Variable call(const std::vector<Variable>& inputs, const SparsifyContext& ctx = {}) const;

  const std::vector<ValueSparsity>& outputs() const { return outputs_; }
  const std::vector<ValueSparsity>& input_grads() const { return input_grads_; }

 private:
  OpFn op_;
  std::vector<ValueSparsity> outputs_;
  std::vector<ValueSparsity> input_grads_;
  FusedForward fused_;
};

}  // namespace coppice
