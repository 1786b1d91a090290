// The hardware form of a 2:4 matrix: what sparse tensor cores (PTX mma.sp
// with .f16 / .bf16 operands) read, as a CPU twin of what the GPU kernels
// load. A 2:4 NmImpl tensor [rows, cols] becomes
//  - values [rows, cols / 2]: the kept values of each group of four, in
//    increasing column order (NmImpl's values as they are, shared);
//  - metadata: one 16-bit word per (row, 16 columns), row-major, i.e. a
//    u16 [rows, cols / 16] array. The library has no u16 dtype, so it is held
//    as u8 [rows, cols / 8], each word little-endian (low byte first): the
//    same bytes as the u16 array on the GPU (and x86), which a kernel reads
//    through a uint16_t pointer.
// Group j (0..3) of a word's 16 columns takes bits [4j, 4j + 4): the low two
// bits hold the in-group index of the first kept element, the next two that
// of the second, first < second. Keeping (0, 1), (0, 2), (1, 3), (2, 3) in
// one 16-column chunk gives the nibbles 0x4, 0x8, 0xD, 0xE, the word 0xED84.
//
// Why this layout (PTX ISA, "Sparse matrix storage", 9.7.14.6.1, and
// "Matrix Fragments for sparse mma.m16n8k16 with .f16 and .bf16 types",
// 9.7.14.6.2.1): for 16-bit types every chunk of four elements of a row of A
// has a 4-bit metadata field, two 2-bit indices of its non-zeros, the index
// of the lower column in the lower bits (as CUTLASS's and PyTorch's 2:4
// compressors write it, torch/sparse/_semi_structured_conversions.py:
// idxs0 | idxs1 << 2, chunks from bit 0 up); the fields 0b0000, 0b0101,
// 0b1010 and 0b1111 (an index twice) are undefined behaviour. The metadata
// operand is one 32-bit register per thread, and the threads that the
// sparsity selector names hold the fields of one row's 16 columns in 16 bits
// and those of another row in the other 16: for m16n8k32 with selector 0,
// lane 4g + p holds rows g (low half) and g + 8 (high half) for columns
// 16p..16p+15 of the k32 step (confirmed on an H200 by
// tools/device/experiments/mma_sp_rate.cu; sparse/cuda/nm24_mma.cu reads it
// so). So 16 bits per (row, 16 columns) is the unit a kernel loads; it
// assembles the registers from two such words. Indices are always written increasing,
// which mma.sp::ordered_metadata requires and plain mma.sp accepts.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

struct Nm24Packed {
  Tensor values;    // [rows, cols / 2], the n:m tensor's dtype and device
  Tensor metadata;  // u8 [rows, cols / 8]: u16 [rows, cols / 16], little-endian
};

// The hardware form of a 2-D 2:4 NmImpl tensor whose cols is a multiple of 16
// (one metadata word covers 16 columns); throws naming what differs. A group
// holding an explicit zero still has two distinct increasing indices (NmImpl
// guarantees it), so every field is valid for the hardware.
Nm24Packed pack_nm24(const Tensor& nm);

// The hardware form of S^T for a 2-D 2:4 tensor S [rows, cols] whose rows are
// a multiple of 16 and whose pattern is transposable (every group of four
// rows stores at most two entries in each column, as nm_transposable.h's masks
// do): what the tensor-core kernels multiply for dx = dy @ S. A group of S^T
// with fewer than two stored entries keeps explicit zeros at its lowest free
// positions (as nm_compress from a mask). Throws naming the first column and
// rows that hold more than two, and anything pack_nm24 refuses.
Nm24Packed pack_nm24_transposed(const Tensor& nm);

// The column of every entry that `metadata` (as pack_nm24 makes it, on any
// device) describes for a 2:4 tensor of `shape`, row by row: what the CPU's
// products read (sparse/cpu/spmm.cc), without building the tensor. Throws as
// unpack_nm24 does.
std::vector<int32_t> nm24_columns(const Tensor& metadata, const Shape& shape);

// The 2:4 NmImpl tensor of `shape` ([rows, cols], cols a multiple of 16) that
// `values` and `metadata` (as pack_nm24 makes them, on one device) describe.
// Throws naming the row and group of the first field whose indices do not
// strictly increase.
Tensor unpack_nm24(const Tensor& values, const Tensor& metadata, const Shape& shape);

}  // namespace coppice
