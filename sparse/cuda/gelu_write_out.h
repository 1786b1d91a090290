// A transformer MLP's gelu in a product's write-out (internal): the gelu
// step of epilogue.cuh, which the BSR and 2:4 product kernels apply after the
// bias, so that each fused form gives the bits of the ops it replaces. This
// is the part the launchers see; the device side is gelu_write_out.cuh.
#pragma once

namespace coppice::sparse_cuda {

// kForward: the rounded product z goes to the auxiliary output, gelu(z) to
// the output (linear_gelu). kGradient: the output is gelu_backward(rounded
// product, z), z read from the auxiliary input (matmul_gelu_backward). The
// auxiliary matrix has the output's shape and strides.
enum class GeluWriteOut { kNone, kForward, kGradient };

}  // namespace coppice::sparse_cuda
