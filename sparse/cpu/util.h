// Helpers shared by the sparse CPU kernels (internal to sparse/cpu).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sparse/ops/value_kernels.h"
#include "tensor/dispatcher.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cpu {

// The dtype kernels compute in: f32 for bf16/f16 (and f32), f64 for f64.
DType accumulate_dtype(DType t);

// `t` (dense) converted to `dtype` and made contiguous (no copy when it already is).
Tensor contiguous_as(const Tensor& t, DType dtype);

// Throws naming `op` unless `t` is 2-D.
void check_matrix(const Tensor& t, std::string_view op, std::string_view what);
// Throws naming `op` unless the inputs are exactly `n` and share a floating dtype.
void check_inputs(const std::vector<Tensor>& in, size_t n, std::string_view op);

// Registers `kernel` for `op` on the CPU under each list of formats.
void register_cpu(std::string_view op, const std::vector<std::vector<std::string>>& formats, const Kernel& kernel);

}  // namespace coppice::sparse_cpu
