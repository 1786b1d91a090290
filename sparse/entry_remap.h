// A sparse tensor's stored entries moved to new coordinates, without a dense
// intermediate: what einsum and rearrange (autograd/functions/einsum.h,
// rearrange.h) do to a sparse operand's pattern before a product or after a
// change of axes.
//
// The entries' coordinates are read as elementary axes: `s`'s shape split
// row-major into axes (a dim of size 6 may be the axes 2 and 3, as
// rearrange's "(h d)"), followed by new axes along which every entry is
// repeated (rearrange's "b d -> b n d"). The output's dims are lists of axes,
// each dim's coordinate the row-major position over its axes. An axis may sit
// in two dims: einsum's batch label on both sides of a block-diagonal matrix
// ([b, n] becomes [b, b*n] with entry (b, n) at (b, b*n + n)).
//
// The result is a pattern and an order, not values: the remapped tensor holds
// values(s) flattened and taken at `take`, so a caller that takes them with
// differentiable ops (index_select, with_values) gets gradients for free.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

struct EntryAxes {
  // Sizes of the elementary axes: the first `input_axes` split s's shape
  // row-major (their product is s's element count); the rest are new.
  std::vector<int64_t> sizes;
  int64_t input_axes = 0;
  // The output's dims, each a list of axis ids (row-major within the dim;
  // an empty list is a dim of size 1). Every input axis must appear.
  std::vector<std::vector<int64_t>> out_dims;
};

struct RemappedPattern {
  // The new sparse tensor ("coo", or "csr" for a 2-D output), coalesced,
  // on s's device, with values(s)'s dtype; its values are zeros (the
  // caller gives them: values(s) flattened, taken at `take`).
  Tensor pattern;
  // i64 [nnz] on s's device: for each stored entry of `pattern`, in order,
  // the element of values(s) (flattened row-major) it holds.
  Tensor take;
};

// The entries of sparse `s` (any format whose stored positions are known;
// padding is dropped, explicit zeros are kept) at the coordinates `axes`
// gives, in `format` ("coo" or "csr"). Errors name `op`: axes that do not
// split s's shape, an input axis missing from the output, a position stored
// twice (an uncoalesced COO: coalesce() it first), sizes that overflow.
RemappedPattern remap_stored_entries(const Tensor& s, const EntryAxes& axes, std::string_view format,
                                     std::string_view op);

// For every element of values(target) (flattened row-major), the index k of
// the source entry stored at the same flat position (source_positions[k]),
// or source_positions.size() where none is (and for target padding): what
// a caller takes from the sources' values with one zero appended, to give a
// pattern built elsewhere (a conversion, a concatenation, a union) its
// values differentiably. Negative source positions (padding) match nothing;
// a position given twice is an error naming `op`. i64 on target's device.
Tensor entry_take(const Tensor& target, const std::vector<int64_t>& source_positions, std::string_view op);

// The rows `rows` of sparse 2-D `s` (any format; a row may repeat) as a CSR
// [rows.size(), s's columns], with the order its values take from values(s)
// (flattened; explicit zeros kept, padding dropped). Errors name `op` and the
// first row out of range.
RemappedPattern select_rows(const Tensor& s, const std::vector<int64_t>& rows, std::string_view op);

}  // namespace coppice
