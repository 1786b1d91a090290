// rearrange: einops' reordering, splitting, merging and repeating of axes,
// for dense and sparse operands, differentiable.
//
//   rearrange(x, "b (h d) -> b h d", {{"h", 8}})   // split a dim
//   rearrange(x, "b h t d -> b t (h d)")            // permute and merge
//   rearrange(x, "b d -> b n d", {{"n", 4}})        // repeat along a new axis
//   rearrange(x, "bd->bnd", {{"n", 4}})             // Scorch's spelling
//
// Each side lists the operand's dims; a parenthesized group is one dim made
// of several axes, row-major. Names are letters, digits and '_', separated
// by spaces; a side written without spaces or parentheses names one axis per
// character. Every axis of the left side appears once on the right; an axis
// only on the right is new, its size given in `sizes`, and the result
// repeats the operand along it. Within a left group all sizes but one may be
// inferred. A dense operand goes through reshape, permute and expand (views
// where they can be); a sparse one has its entries remapped
// (remap_entries, sparse.h): a COO, or a CSR when the result is 2-D.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "autograd/variable.h"

namespace coppice {

Variable rearrange(const Variable& x, std::string_view pattern, const std::map<std::string, int64_t>& sizes = {});
// The same over a Tensor, recording no graph.
Tensor rearrange(const Tensor& x, std::string_view pattern, const std::map<std::string, int64_t>& sizes = {});

}  // namespace coppice
