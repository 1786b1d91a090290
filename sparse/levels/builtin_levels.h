// The built-in sparse formats as level formats (level_format.h): their
// declarations, and a built-in tensor's parts read as its declaration's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sparse/formats.h"
#include "sparse/levels/level_format.h"
#include "sparse/levels/level_tensor.h"

namespace coppice::levels {

// The declaration of the built-in format `format` (csr, csc, coo, bsr,
// blocked_ell, nm) for a tensor of `rank` dimensions with these options (the
// block of bsr and blocked_ell, n and m of nm); throws naming `op` for
// another format or a rank the format does not take.
LevelFormat builtin_level_format(std::string_view format, int64_t rank, const FormatOptions& options,
                                 std::string_view op);

// The built-in format (csr, csc, coo, bsr, blocked_ell or nm) whose
// declaration for a tensor of `shape` has the levels of `format` (same_levels:
// the index dtypes too; the values' dtype aside), so that its kernels fit a
// tensor of `format`; nullopt when none has.
std::optional<std::string> builtin_format_of(const LevelFormat& format, const Shape& shape);

// A built-in sparse tensor (CPU) as a level tensor of its declaration. Its
// index parts are the built-in's byte for byte, COO's first positions (which
// COO does not store) made as [0, nnz]. Its values are the built-in's byte
// for byte too, except Blocked-ELL's: cuSPARSE's layout interleaves a block
// row's slots row by row, so they are copied into level order (block row,
// slot, row in the block, column in the block).
LevelTensor level_tensor_of(const Tensor& t, std::string_view op);

// The built-in tensor of `format` holding a level tensor of that format's
// declaration (level_tensor_of inverted: the same parts, byte for byte),
// validated as parts from outside are (FormatSpec::from_parts). Throws naming
// `op` when t's declaration is not the format's for its shape.
Tensor builtin_tensor_of(const LevelTensor& t, std::string_view format, std::string_view op);

// The values of `t` (a tensor of the built-in `format`'s declaration) as
// that format stores them, flat: t.values itself, or for Blocked-ELL
// reordered into cuSPARSE's layout. On t's device, with no host read.
Tensor builtin_values_of(const LevelTensor& t, std::string_view format);
// A built-in tensor's values in level order, flat: level_tensor_of's values,
// on t's device, with no host read.
Tensor level_values_of(const Tensor& t);

}  // namespace coppice::levels
