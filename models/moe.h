// A mixture-of-experts MLP: top-k routing, the gate as a sparse tensor, and
// the experts run dropless as block-sparse products over tokens grouped by
// expert (MegaBlocks' dMoE), with a load-balancing loss.
//
// For tokens x [..., dim] (flattened to [T, dim]):
//   1. router: p = softmax(x Wr^T) [T, E]; each token keeps its top_k experts,
//      their probabilities its gate weights (with top_k > 1 renormalized to
//      sum to 1 when `renormalize`; a top-1 gate stays p, as Switch's, so
//      the router learns from the output);
//   2. the (token, expert) assignments sorted by expert, each expert's group
//      padded to a multiple of `block` rows with a zero row: xg [R, dim];
//   3. the experts' first layer as one SDDMM at a block-diagonal topology
//      (row blocks of expert e's group by column blocks of e's hidden units
//      in W1 [E * hidden, dim]): a BSR h [R, E * hidden] that stores only
//      each group's own expert (no token is dropped, nothing is computed for
//      experts a token did not pick); gelu on its stored values; the second
//      layer h W2 (W2 [E * hidden, dim]) one BSR x dense product [R, dim];
//   4. combined with the gate as a sparse CSR [T, R] (k entries a row, the
//      gate weights), y = G yg: gradients reach the router through its values.
// The experts have no biases (MegaBlocks' default).
//
// forward_einsum computes the same with Scorch's formulation over the same
// parameters: every expert for every token, combined by the sparse gate as
// einsum("ted,te->td"); the CPU twin the grouped path is tested against.
//
// The load-balancing loss (Switch Transformer): E * sum_e f_e * P_e, f_e the
// fraction of assignments to expert e and P_e the mean router probability
// of e, times `aux_loss`; auxiliary_loss() gives the last forward's, for the
// training loop to add (models/module.h: Module::auxiliary_losses).
#pragma once

#include <cstdint>
#include <vector>

#include "models/layers.h"
#include "models/module.h"

namespace coppice {

struct MoEOptions {
  int64_t dim = 64;
  int64_t hidden = 256;  // each expert's hidden units
  int64_t experts = 4;
  int64_t top_k = 1;
  // Rows of a token group and hidden units per stored block of the grouped
  // products; must divide hidden. 0: the largest power of two up to 64 that
  // divides hidden.
  int64_t block = 0;
  double aux_loss = 0.01;
  bool renormalize = true;
  GeluForm gelu = GeluForm::kErf;
};

class MoE : public Module {
 public:
  explicit MoE(const MoEOptions& moe, const LayerOptions& options = {}, Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  // The same function by Scorch's einsum formulation (dense experts for every
  // token, the sparse gate combining them).
  Variable forward_einsum(const Variable& x);
  const MoEOptions& options() const { return o_; }

 private:
  struct Routing;
  Routing route(const Variable& x2);
  Variable gate_matrix(const Variable& gates, const std::vector<int64_t>& cols, int64_t columns) const;

  MoEOptions o_;
  std::shared_ptr<Linear> router_;
  Variable* w1_;  // [experts * hidden, dim]
  Variable* w2_;  // [experts * hidden, dim]
};

}  // namespace coppice
