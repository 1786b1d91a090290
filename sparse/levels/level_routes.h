// The kernels of the level family (formats declared by their levels,
// level_impl.h) choose between a built-in format's own kernel and another
// one. A declaration whose levels are a built-in format's ("(dense,
// compressed)" is CSR's, "blocked 4x4 (dense, compressed, dense, dense)"
// BSR's) runs on that format's kernel for the tensors' device, its parts
// viewed as the built-in tensor without a copy (Blocked-ELL's values
// reordered); any other runs on the cell's own kernel: on the CPU the
// generic one, by stored positions (sparse/cpu), on CUDA a specialized
// kernel that fits the declaration or an error (sparse/cuda/level_cells.cc).
// So a specialized kernel that fits is never replaced by the generic one.
#pragma once

#include <string>

#include "tensor/dispatcher.h"

namespace coppice::levels {

// `own` for the family's cell of `op`, wrapped: when every level operand is
// a built-in format's declaration, the op is dispatched on the built-in
// tensors instead (on their device), and a result in the pattern of a level
// operand (sddmm, mul, div) comes back in that operand's format and pattern
// version.
Kernel through_builtin_kernels(std::string op, Kernel own);

}  // namespace coppice::levels
