// The device kernels that build 2:4 (and n:m) operands and take them apart
// (internal; nm24_pack.cu): the metadata words the sparse tensor-core
// products read (nm24_mma.h, nm24_wgmma.h), the transposable check and the
// transposed pack of S^T, the selection by magnitude and by mask, the
// transposable mask, and the gather and scatter between n:m values and
// dense rows. nm_products.cc calls them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppice::sparse_cuda {

// The metadata words of a 2:4 NmImpl's indices (u8 [rows, cols / 2]):
// meta u16 [rows, cols / 16], as pack_nm24 writes them.
void nm24_metadata(const uint8_t* indices, uint16_t* meta, int64_t rows, int64_t cols, cudaStream_t stream);

// Sets *flag (an int on the device, 0 before) to 1 where S^T is not 2:4: a
// group of four rows holds more than two stored entries in some column.
void nm24_check_transposable(const uint8_t* indices, int64_t rows, int64_t cols, int* flag, cudaStream_t stream);

// S^T [cols, rows] in the hardware form, from S's NmImpl parts (values and
// u8 indices [rows, cols / 2]); rows and cols multiples of 64, and S^T must be 2:4
// (nm24_check_transposable; every group of S^T then holds exactly two
// stored entries, explicit zeros of S included).
template <typename T>
void nm24_pack_transposed(const T* values, const uint8_t* indices, T* values_t, uint16_t* meta_t, int64_t rows,
                          int64_t cols, cudaStream_t stream);

// The 2:4 selection by magnitude on the device: every group of four of
// dense [rows, cols] keeps its two largest |x| (NaN largest, ties to the lower
// index, as nm_compress), written as NmImpl parts (values, u8 indices
// [rows, cols / 2]) and, where meta is not null (cols % 16 == 0), the
// metadata words. T is float, __nv_bfloat16 or __half.
template <typename T>
void nm24_select(const T* dense, T* values, uint8_t* indices, uint16_t* meta, int64_t rows, int64_t cols,
                 cudaStream_t stream);

// nm_compress(dense, mask, 2, 4) on the device: each group of four of dense
// [rows, cols] keeps the entries mask keeps and explicit zeros at its lowest
// free positions up to two, written as NmImpl parts (values, u8 indices
// [rows, cols / 2]). A group keeping more than two lowers *bad_group (a u64
// on the device, set to ~0 before) to its index and writes nothing. T is
// float, double, __nv_bfloat16 or __half.
template <typename T>
void nm24_select_masked(const T* dense, const bool* mask, T* values, uint8_t* indices, int64_t rows, int64_t cols,
                        unsigned long long* bad_group, cudaStream_t stream);

// The transposable 2:4 mask of w [rows, cols] (4 dividing both) on the
// device, bit for bit what transposable_nm_mask computes on the host
// (sparse/nm_transposable.h: the same patterns, order, f64 scores and ties).
// T is float, double, __nv_bfloat16 or __half.
template <typename T>
void nm24_transposable_mask(const T* w, bool* mask, int64_t rows, int64_t cols, cudaStream_t stream);

// values[r, g*n + s] = product[r, g*m + indices[r, g*n + s]] for an n:m
// pattern over product [rows, cols] (the SDDMM of a pattern whose product is
// computed densely). T is float, double, __nv_bfloat16 or __half.
template <typename T>
void nm_gather(const T* product, const uint8_t* indices, T* values, int64_t rows, int64_t cols, int n, int m,
               cudaStream_t stream);

// dense[r, g*m + indices[r, g*n + s]] = values[r, g*n + s], every other
// element of dense [rows, cols] zero: the decompression of an n:m tensor.
// T is float, double, __nv_bfloat16 or __half.
template <typename T>
void nm_scatter(const T* values, const uint8_t* indices, T* dense, int64_t rows, int64_t cols, int n, int m,
                cudaStream_t stream);

}  // namespace coppice::sparse_cuda
