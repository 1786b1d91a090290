// Process-wide numeric settings for the kernels (like PyTorch's
// torch.backends.cuda.matmul.allow_tf32).
//
// allow_tf32: whether f32 dense matrix products on CUDA (cuBLAS GEMM, and so
// matmul, linear, conv and the SDDMM's dense route) may run on TF32 tensor
// cores: inputs rounded to 10-bit mantissas, products summed in f32, several
// times faster on Ampere and later, errors around 1e-3 relative. Off by
// default, so that f32 on the GPU stays close to its CPU twin. The CPU
// kernels ignore it; cuSPARSE's CSR kernels have no TF32 mode.
#pragma once

namespace coppice {

bool allow_tf32();
void set_allow_tf32(bool allow);

}  // namespace coppice
