// einsum over operands of any mix of formats, differentiable.
//
//   Variable y = einsum("bnd,bn->bd", {experts_out, gates});  // gates: a sparse one-hot
//
// The spec is NumPy's (einsum_plan.h says exactly what it takes). The plan
// (einsum_plan.h) maps each pairwise contraction onto the library's products:
// dense GEMM or batched GEMM, SpMM with a sparse weight (linear, where the
// BSR and 2:4 kernels run) or a sparse left or right operand, one SpMM over a
// block-diagonal remap of the sparse operand's entries for batched and other
// contractions (sparse/entry_remap.h; no dense intermediate), SpGEMM for two
// sparse matrices, and an elementwise product that keeps a sparse pattern.
// Every step is a differentiable function of autograd/, so gradients reach
// every operand (a sparse operand's in its own format and pattern). Where no
// route takes a pair of sparse operands, the right one is made dense, counted
// and warned about as the dispatcher's dense fallbacks are (an error when
// those are made errors).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

Variable einsum(std::string_view spec, const std::vector<Variable>& operands);
// The same over Tensors, recording no graph.
Tensor einsum(std::string_view spec, const std::vector<Tensor>& operands);
// The plan einsum would run on these operands, one line per step: what a
// user reads to see which products a spec becomes.
std::vector<std::string> einsum_plan_text(std::string_view spec, const std::vector<Tensor>& operands);

}  // namespace coppice
