// The neural-network and shape frontends over sparse operands, differentiable
// (nn.h, shape.h and elementwise.h route a sparse operand here). Each keeps
// what is stored, and says what it computes where nothing is:
//
//   softmax(S, dim)        over the stored entries of each line along dim (a
//   log_softmax(S, dim)    missing entry counts as -inf: it takes no share);
//                          S's format and pattern; a line with no stored entry
//                          stays empty. The rows of a CSR along its last dim
//                          run on csr_row_softmax (CPU and CUDA); any other
//                          format or dim through its entries remapped to such
//                          rows and back (sparse/entry_remap.h). log_softmax is
//                          x - logsumexp over the stored entries, formed from
//                          the softmax without a log of an underflowed 0.
//   layer_norm(S, [cols])  a 2-D S normalized over the stored entries of each
//                          row (their mean and biased variance), then scaled
//                          and shifted by weight and bias at each entry's
//                          column; S's format and pattern. An empty row stays
//                          empty.
//   dropout(S, p)          each stored value zeroed with probability p and the
//                          rest scaled by 1 / (1 - p); the pattern kept (a
//                          dropped entry is an explicit zero).
//   cat(Ss, dim)           sparse operands of one rank: the first one's format
//                          and options, the union of the entries at their
//                          offsets (no dense intermediate).
//   where(cond, A, B)      A and B sparse: A's format over the union of their
//                          entries, cond (dense, broadcast) choosing at each;
//                          one dense operand gives a dense result.
//   embedding(W, idx)      rows of a sparse W [V, d] picked by idx, dense
//                          [..., d]; W's gradient on its pattern.
//   to_format(x, format)   the same values in another format (a sparse x's
//                          stored entries, a dense x's non-zeros), the gradient
//                          back in x's own.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "autograd/variable.h"
#include "sparse/formats.h"
#include "tensor/generator.h"

namespace coppice {

// Differentiable format conversion (sparse/convert.h's to_format): x's values
// in `format`; the gradient reaches x in its own format (a dense x: at the
// entries kept).
Variable to_format(const Variable& x, std::string_view format, const FormatOptions& options = {});

namespace autograd_detail {

Variable sparse_softmax(const Variable& x, int64_t dim, bool log);
Variable sparse_layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                           const Variable& bias, double eps);
Variable sparse_dropout(const Variable& x, double p, bool training, Generator& gen);
Variable sparse_cat(const std::vector<Variable>& xs, int64_t dim);
Variable sparse_where(const Tensor& cond, const Variable& a, const Variable& b);
Variable sparse_embedding(const Variable& weight, const Tensor& indices);

}  // namespace autograd_detail
}  // namespace coppice
