// BSR-of-2:4 on sparse tensor cores (issue 35's hybrid, "V:N:M"): a tensor of
// the level declaration bsr_nm24_declaration() (BSR of 128 x 64 blocks
// outside, 2:4 along each block's columns inside) put in the form
// nm24_mma.h's bsr_nm24_product reads, and its linear product. The level
// family's CUDA cell of linear (level_cells.cc) runs it for a format
// declared so; its parity test (tests/sparse/cuda/bsr_nm24_test, against the
// level family's generic CPU kernel) and `bench bsr_nm24` call it directly too.
#pragma once

#include <string_view>

#include "sparse/levels/level_tensor.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// blocked 128x64 (dense(0), compressed(1), dense(2), n_out_of_m(3, 2:4)).
levels::LevelFormat bsr_nm24_declaration();

struct BsrNm24Weight {
  Tensor block_row_ptr, block_cols;  // i32 [rows / 128 + 1], [nblocks]
  Tensor values;                     // [nblocks * 128, 32], bf16 or f16
  Tensor metadata;                   // u8 [nblocks * 128, 8]: the u16 words of nm_metadata.h
  Shape shape;                       // [rows, cols]
};

// The weight on `device` (a GPU) from a level tensor (on the CPU, checked
// here, or on the GPU) with the levels of bsr_nm24_declaration() (any index
// dtypes) and bf16 or f16 values; throws naming `op` and what differs. The
// values and block indices are the level tensor's parts as they are; the
// metadata words are made on the device.
BsrNm24Weight bsr_nm24_weight(const levels::LevelTensor& t, Device device, std::string_view op);

// x [m, cols] @ W^T (+ bias [rows]) -> [m, rows], in x's dtype (the weight's).
Tensor bsr_nm24_linear(const Tensor& x, const BsrNm24Weight& w, const Tensor& bias = Tensor());

}  // namespace coppice::sparse_cuda
