// BSR products on CUDA through the tiled kernels of bsr_tiles.cu (internal):
// the "bsr_tiles" routes of the SpMM and SDDMM planners (spmm.cc, sddmm.cc),
// which bsr_tiles_apply decides.
//
// Where they apply: a BSR tensor on a CUDA device, f32, bf16 or f16, blocks
// [bh, bw] with bh and bw in {16, 32}, and square 64x64 blocks of bf16/f16
// or TF32. f32 computes in f32 FMAs, or on TF32 tensor cores when
// allow_tf32() (tensor/precision.h) is on; bf16/f16 on their tensor cores;
// square 16, 32 and 64 blocks of those through mma.sync (bsr_mma.h); all
// accumulate in f32 and round once. Other block
// shapes and f64 keep the routes they had (block_spmm.cu's element kernel
// for S @ X, the CSR view and cuSPARSE otherwise). The pin bsr_tiles=off
// (sparse/route_choices.h; COPPICE_ROUTES) turns the tiled routes off, asked
// per call, so that a test or a benchmark can compare both in one run.
#pragma once

#include <string_view>
#include <utility>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

bool bsr_tiles_apply(const Tensor& s);

// op(S) @ x (sparse_left) or x @ op(S), op(S) = S^T when transpose_s: no
// transposed copy of S or of x is made (S^T walks S's blocks by block column,
// through a column index cached per pattern version).
// `bias` (optional, dense [op(S) rows] for op(S) @ x, [op(S) columns] for
// x @ op(S): the product's feature dimension) is added in the kernel's
// write-out, and `relu` (linear_relu) applied there after it.
Tensor bsr_tiled_matmul(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left, std::string_view op,
                        const Tensor& bias = Tensor(), bool relu = false);

// The same product with a gelu in the write-out (a transformer MLP's
// activation, gelu_write_out.h): {gelu(z), z} for z = the product plus
// `bias`; and gelu_backward(the product, z) for a given z of the product's
// shape. The mma.sync kernels fuse them; other blocks and types run the
// product, then the elementwise op, with the same result.
std::pair<Tensor, Tensor> bsr_tiled_matmul_gelu(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                                                std::string_view op, const Tensor& bias = Tensor());
Tensor bsr_tiled_matmul_gelu_grad(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                                  std::string_view op, const Tensor& z);

// The values of sddmm(a, b, pattern) for a BSR pattern: (a @ b) over each
// stored block, [nblocks, bh, bw] in the pattern's dtype.
Tensor bsr_tiled_sddmm_values(const Tensor& a, const Tensor& b, const Tensor& pattern);

}  // namespace coppice::sparse_cuda
