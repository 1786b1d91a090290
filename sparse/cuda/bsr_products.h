// BSR products on CUDA (internal): the launchers of the two BSR kernel
// families, which the SpMM and SDDMM planners (spmm.cc, sddmm.cc) pick
// between per product; a launcher runs the kernel it is given.
//
//   kMmaSync  bsr_mma.h: square 16, 32, 64 and 128 blocks of bf16/f16, or of f32
//             on TF32 tensor cores (allow_tf32(), tensor/precision.h),
//             through mma.sync; the only one with the gelu write-outs
//             (erf and tanh);
//   kTiles    bsr_tiles.h: blocks [bh, bw] with bh and bw in {16, 32} in
//             f32 (FMAs, or WMMA TF32 with allow_tf32), bf16 and f16 (WMMA).
// Both accumulate in f32 and round once. Other block shapes and f64 take the
// planners' other routes (block_spmm.cu's element kernel for S @ X, the CSR
// view and cuSPARSE).
#pragma once

#include <string_view>
#include <utility>

#include "tensor/ops.h"  // GeluForm
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

enum class BsrKernel { kMmaSync, kTiles };
std::string_view bsr_kernel_name(BsrKernel kernel);  // "mma_sync", "tiles"

// Whether `kernel` runs products and SDDMMs of s: a BSR tensor on a CUDA
// device of a dtype and block shape the kernel takes (above).
bool bsr_kernel_takes(BsrKernel kernel, const Tensor& s);

// op(S) @ x (sparse_left) or x @ op(S), op(S) = S^T when transpose_s: no
// transposed copy of S or of x is made (S^T walks S's blocks by block column,
// through a column index cached per pattern version).
// `bias` (optional, dense [op(S) rows] for op(S) @ x, [op(S) columns] for
// x @ op(S): the product's feature dimension) is added in the kernel's
// write-out, and `relu` (linear_relu) applied there after it.
// `kernel` must take s (bsr_kernel_takes).
Tensor bsr_matmul(BsrKernel kernel, const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                  std::string_view op, const Tensor& bias = Tensor(), bool relu = false);

// The product with `residual` (dense, the product's shape and dtype) added in
// the write-out after the product and `bias` are rounded: the bits of
// add(residual, bsr_matmul(kMmaSync, ...)), from one kernel, on the family
// kMmaSync names (bsr_kernel_takes(kMmaSync, s) must hold). Undefined, with
// nothing launched, where none adds it: only the wgmma kernels on Hopper do
// (bsr_wgmma.h: 32x32, 64x64 and 128x128 blocks), and not for a pattern with
// no stored block. The caller then adds it itself (linear_add_fused's contract).
Tensor bsr_matmul_add(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left, std::string_view op,
                      const Tensor& bias, const Tensor& residual);
// The same product on the mma.sync kernels with a gelu in the write-out (a
// transformer MLP's activation, gelu_write_out.h): {gelu(z), z} for z = the
// product plus `bias` (optional: an undefined tensor); and
// gelu_backward(the product, z) for a given z of the product's shape.
// form == GeluForm::kTanh: gelu_tanh and gelu_tanh_backward instead. The
// same bits as the product, then the elementwise op (the kernels round
// once). bsr_kernel_takes(kMmaSync, s) must hold.
std::pair<Tensor, Tensor> bsr_mma_matmul_gelu(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                                              std::string_view op, const Tensor& bias, GeluForm form);
Tensor bsr_mma_matmul_gelu_grad(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                                std::string_view op, const Tensor& z, GeluForm form);

// The values of sddmm(a, b, pattern) for a BSR pattern: (a @ b) over each
// stored block, [nblocks, bh, bw] in the pattern's dtype; `kernel` must
// take the pattern. With row_sums, also a's row sums ([a's rows], a's dtype,
// f32 sums rounded once) into *row_sums: in the same pass on the mma.sync
// and wgmma SDDMMs, else (the WMMA / FMA tiles) by sum().
Tensor bsr_sddmm_values(BsrKernel kernel, const Tensor& a, const Tensor& b, const Tensor& pattern,
                        Tensor* row_sums = nullptr);

// A sparse linear's gradients from one kernel that reads dy and x once for
// all three (bsr_wgmma32_grads.h): dx = dy S (with z defined,
// gelu_backward_of_form(dy S, z, form)), dw = sddmm(dy^T, x, S)'s values
// ([nblocks, 32, 32]) and, with_bias, db = dy's column sums. dy [N, out], x
// and z [N, in] dense, S BSR [out, in], one dtype and device (the caller
// checks). All undefined, nothing launched, where the kernel does not take
// them: 32x32 blocks of bf16/f16 on compute capability 9.0, columns of at
// most kLinearGradsMostBlocks blocks, contiguous 16-byte aligned operands,
// S with a stored block; nor under the route pins linear_grads=apart or any
// bsr_tiles pin (route_choices.h).
struct BsrLinearGrads {
  Tensor dx, dw, db;
};
BsrLinearGrads bsr_linear_grads(const Tensor& dy, const Tensor& x, const Tensor& s, bool with_bias, const Tensor& z,
                                GeluForm form);

}  // namespace coppice::sparse_cuda
