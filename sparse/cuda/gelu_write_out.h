// A transformer MLP's gelu in a product's write-out (internal): the gelu
// step of epilogue.cuh, which the BSR and 2:4 product kernels apply after the
// bias, so that each fused form gives the bits of the ops it replaces. This
// is the part the launchers see; the device side is gelu_write_out.cuh.
#pragma once

namespace coppice::sparse_cuda {

// kForward: the rounded product z goes to the auxiliary output, gelu(z) to
// the output (linear_gelu). kGradient: the output is gelu_backward(rounded
// product, z), z read from the auxiliary input (matmul_gelu_backward). The
// Tanh twins are the same with gelu_tanh and gelu_tanh_backward (GPT-2's
// tanh approximation: tensor/ops.h's GeluForm::kTanh, the ops' attribute
// "tanh") in place of the erf forms. The auxiliary matrix has the output's
// shape and strides. The mode is one value per launch, so the kernels'
// branches on it are uniform.
enum class GeluWriteOut { kNone, kForward, kGradient, kForwardTanh, kGradientTanh };

// Whether m stores z and writes a gelu of it (linear_gelu's forms).
constexpr bool is_gelu_forward(GeluWriteOut m) {
  return m == GeluWriteOut::kForward || m == GeluWriteOut::kForwardTanh;
}
// Whether m reads z and writes a gelu's gradient (matmul_gelu_backward's forms).
constexpr bool is_gelu_gradient(GeluWriteOut m) {
  return m == GeluWriteOut::kGradient || m == GeluWriteOut::kGradientTanh;
}
// Whether m's gelu is the tanh approximation (else erf, or none at all).
constexpr bool is_gelu_tanh(GeluWriteOut m) {
  return m == GeluWriteOut::kForwardTanh || m == GeluWriteOut::kGradientTanh;
}
// The write-out of linear_gelu (gradient false) or matmul_gelu_backward
// (gradient true), in the tanh form when `tanh_form` (the launchers pass
// form == GeluForm::kTanh: this header stays free of tensor/ for nvcc).
constexpr GeluWriteOut gelu_write_out(bool gradient, bool tanh_form) {
  if (gradient) return tanh_form ? GeluWriteOut::kGradientTanh : GeluWriteOut::kGradient;
  return tanh_form ? GeluWriteOut::kForwardTanh : GeluWriteOut::kForward;
}

}  // namespace coppice::sparse_cuda
