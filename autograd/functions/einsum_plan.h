// How einsum (einsum.h) computes a contraction, decided from the operands'
// labels, sizes and formats alone (no values), so that a plan can be shown
// before it runs (einsum_plan_text) and tested on its own.
//
// The spec is NumPy's: one label string per operand, comma-separated, and
// optionally "->" and the output's labels; labels are letters, spaces are
// ignored, and "..." stands for the dims no label names (right-aligned across
// operands). Without "->" the output is "..." followed by the labels that
// appear once, in alphabetical order. A label's size is the same wherever it
// appears, except that a size-1 dim broadcasts against a larger one (named
// or under "...", as NumPy's and torch's einsum do).
//
// The plan:
//  0. A size-1 dim that broadcasts is squeezed out of its operand, which is
//     then planned as if it lacked that label (constant along it).
//  1. Each operand alone: a label repeated within it takes the diagonal, and
//     a label no other operand and not the output has is summed out.
//  2. Operands contract pairwise, left to right; the result takes the left
//     operand's place. A pair's labels are batch (in both, still needed
//     later), contracted (in both, not needed), left-only and right-only.
//     The route by formats (the op table's rules give the result's format):
//       dense x dense   kDenseMul (nothing contracted: a broadcast product) or
//                       kDenseBmm (permute, reshape to [B, L, C] x [B, C, R],
//                       bmm or matmul, reshape back);
//       sparse x dense  kSparseScale (the dense labels are among the sparse
//                       ones: mul, the sparse pattern kept), kSparseLinear (a
//                       2-D sparse S [l, c] without batch labels:
//                       linear(D [r, c], S), S as a weight: the BSR and 2:4
//                       kernels run), kSparseMatmul (S [c, l]: matmul(D, S)),
//                       else kSparseBlockDiagonal (S's entries remapped to a
//                       CSR [(batch, left), (batch, contracted)], block
//                       diagonal over the batch labels, times D reshaped to
//                       [(batch, contracted), right]: one SpMM for a batched
//                       product, sparse/entry_remap.h);
//       sparse x sparse kSpgemm (two 2-D operands, one label contracted, no
//                       batch: both remapped to CSR where needed, SpGEMM, a
//                       CSR result), kSparseMul (the same labels: an
//                       elementwise product, its contracted labels summed
//                       after); any other pair makes its right operand dense
//                       first, loudly (the dispatcher's fallback count and
//                       warning, "einsum(...)"), and takes a sparse x dense
//                       route. A sparse operand with a repeated label is
//                       made dense the same way before step 1.
//  3. The last result is permuted into the output's order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

enum class EinsumRoute {
  kDenseMul,
  kDenseBmm,
  kSparseScale,
  kSparseLinear,
  kSparseMatmul,
  kSparseBlockDiagonal,
  kSpgemm,
  kSparseMul,
};
const char* einsum_route_name(EinsumRoute route);

// One operand's step 1.
struct EinsumPrep {
  // Labels of size 1 here and larger in another operand: squeezed out first
  // (the operand is constant along them, so it broadcasts).
  std::string broadcast;
  bool densify = false;  // a sparse operand with a repeated label (loud)
  // Labels repeated in the operand, each reduced to one dim: the result has
  // the other labels in their order, then these.
  std::string diagonal;
  std::string summed;   // labels summed out
  std::string labels;   // the operand's labels afterwards (distinct)
  bool sparse = false;  // the operand's format afterwards
};

// One pairwise contraction of step 2: operand `lhs` (the running result)
// with operand `rhs`.
struct EinsumContraction {
  int rhs = 0;
  std::string batch, contracted, left, right;
  EinsumRoute route = EinsumRoute::kDenseBmm;
  bool sparse_lhs = false;   // for the sparse x dense routes: which side is sparse
  bool densify_rhs = false;  // the loud fallback of two sparse operands
  std::string summed_after;  // kSparseMul's contracted labels
  std::string result;        // the result's labels
  bool result_sparse = false;
};

struct EinsumPlan {
  std::vector<std::string> inputs;  // each operand's labels as written ("..." expanded)
  std::string output;
  std::map<char, int64_t> sizes;
  std::vector<EinsumPrep> prep;
  std::vector<EinsumContraction> contractions;
};

// The plan for `spec` over operands of these shapes, sparse or not. Throws
// coppice::Error naming einsum and the spec: a malformed spec, an operand
// count or rank that does not match it, a label whose sizes differ other
// than by a size-1 dim that broadcasts (naming both operands), an output
// label repeated or found in no input.
EinsumPlan plan_einsum(std::string_view spec, const std::vector<Shape>& shapes, const std::vector<bool>& sparse);

// One line per step ("operand 1: sum out j", "(0, 1): kSparseLinear ...").
std::vector<std::string> describe(const EinsumPlan& plan);

}  // namespace coppice
