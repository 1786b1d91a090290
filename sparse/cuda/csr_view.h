// Any sparse/ format read as CSR, so that the cuSPARSE kernels (SpMM, SDDMM)
// serve the formats cuSPARSE has no kernel for in a given direction: BSR and
// n:m on the left of a product, Blocked-ELL in f32/f64 (cuSPARSE's Blocked-ELL
// SpMM computes f32 in TF32), an uncoalesced COO pattern of an SDDMM.
//
// The map from a format's value slots to CSR entries is built once per
// pattern version and device, and cached while the pattern lives
// (pattern_cache.h): for CSR and CSC on the device by one cuSPARSE csr2csc
// (compressed_transpose.h; a relu output made CSR has a new pattern every
// step), for the other formats on the host
// from stored_positions (sparse/stored_positions.h); each call then costs one gather or
// one scatter of the values on the device. Slots that store nothing
// (Blocked-ELL padding) are left out; repeated positions (an uncoalesced
// COO) share an entry, so their values add up on the way in and each gets
// the entry's value on the way out, which is what SpMM and SDDMM mean for
// duplicates (sparse/ops.h). The same cache keeps each slot's flat position,
// which the elementwise kernels (elementwise.cc) sample dense operands at.
#pragma once

#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// `t` (2-D, any sparse/ format, on a CUDA device) as a CSR tensor of the same
// shape, dtype and device: its values moved into CSR order, the index arrays
// shared with the cache, and a pattern version that is the same for every
// view of one pattern (so the cuSPARSE plan cache hits).
Tensor csr_view(const Tensor& t, std::string_view op);

// Values in t's slot order (the shape of values(t)) from `csr_values` in the
// order of csr_view(t): each slot gets its entry's value, unstored slots 0.
Tensor values_from_csr_order(const Tensor& t, const Tensor& csr_values, std::string_view op);

// stored_positions(t) on t's device (i64, the shape of values(t) flattened;
// -1 where a slot stores nothing), from the same cache; a BSR pattern's are
// formed on the device from its block indices instead (a mask update makes a
// new pattern of millions of entries whose walk on the host took 0.2 s).
Tensor device_positions(const Tensor& t, std::string_view op);

// Whether SpMM with `t` runs on its dense form (nm_products.h's nm_dense)
// and cuBLAS: n:m keeping at least one entry in 8 (2:4 keeps half). No SIMT
// sparse kernel beats cuBLAS at such densities (H100, MLP-4096 step with 2:4
// weights: 48.7 ms through the CSR view and the element kernel, against 23
// for dense); 2:4 in bf16/f16 may instead take sparse tensor cores (the
// nm24_mma route of spmm.cc). The weight, its gradient and optimizer state
// stay compact; the dense form is a temporary of the product.
bool multiplies_densely(const Tensor& t);

}  // namespace coppice::sparse_cuda
