// Conversions between formats, and sparse tensors from dense ones.
//
// Formats are named as in sparse/formats.h's table, a user's registered
// ones included. Conversions keep the stored pattern where the target can hold it
// (explicit zeros included): a block format stores every block that holds a
// stored entry, and a conversion out of a block format stores every entry of
// its blocks. From dense, the pattern is the non-zeros (x != 0, so NaN is
// kept), a given mask, or a threshold (|x| > t). n:m is the exception: it
// always keeps the non-zeros (a group has exactly n slots), and converting
// to it throws naming the first group with more than n. Every conversion
// gives a fresh pattern version, except that converting a tensor to its own
// format and options returns it unchanged. All of them run on the tensor's
// device (patterns are computed on the host; values stay on the device).
#pragma once

#include <cstdint>
#include <string_view>

#include "sparse/blocked_ell.h"
#include "sparse/bsr.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/formats.h"
#include "sparse/masked.h"
#include "sparse/nm.h"
#include "sparse/sparse_impl.h"

namespace coppice {

// `t` (any format) in `format`. Throws naming the format and the reason when
// the conversion cannot be made (shape not 2-D for a matrix format, a block
// that does not divide the shape, an n:m group with too many non-zeros, an
// unknown format name).
Tensor to_format(const Tensor& t, std::string_view format, const FormatOptions& options = {});

// A sparse tensor holding `dense` at the positions where `mask` (bool, the
// same shape and device) is true; zeros elsewhere.
Tensor sparse_from_mask(const Tensor& dense, const Tensor& mask, std::string_view format,
                        const FormatOptions& options = {});
// The same, keeping the positions where |x| > threshold.
Tensor sparse_from_threshold(const Tensor& dense, double threshold, std::string_view format,
                             const FormatOptions& options = {});

// Direct paths (to_format takes them; exposed for kernels and tests).
Tensor dense_to_coo(const Tensor& dense);     // the non-zeros, coalesced
Tensor coo_to_csr(const Tensor& coo);         // coalesces first
Tensor coo_to_csc(const Tensor& coo);         // coalesces first
Tensor compressed_to_coo(const Tensor& csr);  // CSR or CSC -> coalesced COO
// The same matrix re-compressed along the other dimension: a counting sort of
// the entries by column (row), values permuted on the device.
Tensor csr_to_csc(const Tensor& csr);
Tensor csc_to_csr(const Tensor& csc);
Tensor dense_to_bsr(const Tensor& dense, int64_t block_rows, int64_t block_cols);
Tensor bsr_to_dense(const Tensor& bsr);
Tensor coo_to_bsr(const Tensor& coo, int64_t block_rows, int64_t block_cols);
Tensor bsr_to_coo(const Tensor& bsr);

// The transpose of a 2-D tensor of any format, in the same format except
// that CSR gives CSC and CSC gives CSR, for free (transpose_compressed: the
// same arrays and pattern version). Dense gives a view; COO swaps its index
// rows; BSR and Blocked-ELL transpose their blocks; n:m re-compresses along
// the new last dim (throwing when a group then has more than n non-zeros);
// masked transposes both parts. All but the free ones get a fresh version.
Tensor sparse_transpose(const Tensor& t);

// The building blocks of the format table's rows (sparse/formats.cc).
namespace sparse_detail {
Tensor mask_to_coo(const Tensor& dense, const Tensor& mask);  // coalesced
// CSR or CSC (`layout`) of a 2-D tensor, on the tensors' device where it
// has the kernel, else through COO on the host.
Tensor mask_to_compressed(const Tensor& dense, const Tensor& mask, Layout layout);
Tensor mask_to_bsr(const Tensor& dense, const Tensor& mask, int64_t block_rows, int64_t block_cols,
                   std::string_view op);
Tensor coo_to_masked(const Tensor& coo);
Tensor nm_to_coo(const Tensor& nm);
}  // namespace sparse_detail

}  // namespace coppice
