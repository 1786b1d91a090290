// 2:4 products on Hopper's sparse warpgroup MMA (wgmma.mma_async.sp,
// sm_90a only), the same product as nm24_mma.h's mma.sp kernel and the same
// operand form (Nm24ProductArgs: values [rows, cols / 2], metadata u16
// [rows, cols / 16]); nm24_wgmma.cu has the design. nm_products.cc picks this
// kernel where nm24_wgmma_runs says it can.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sparse/cuda/nm24_mma.h"

namespace coppice::sparse_cuda {

// The dense width (cols of S) the kernel walks per step: cols must be a
// multiple of it.
constexpr int64_t kNm24WgmmaStepCols = 64;

// Whether the current device runs the kernel (compute capability 9.0: the
// kernel is built for sm_90a alone) and cols fits its step.
bool nm24_wgmma_runs(int64_t cols);

// The metadata in the order the kernel's threads read it (nm24_wgmma.cu),
// from S's metadata words (u16 [rows, cols / 16], nm24_metadata's): a
// buffer of nm24_wgmma_metadata_words(rows, cols) u32, 16-byte aligned.
int64_t nm24_wgmma_metadata_words(int64_t rows, int64_t cols);
void nm24_wgmma_metadata(const uint16_t* meta, uint32_t* out, int64_t rows, int64_t cols, cudaStream_t stream);

// T is __nv_bfloat16 or __half; nm24_wgmma_runs(args.cols) must hold, x,
// values and out 16-byte aligned; args.meta is not read, wgmma_meta is S's
// metadata as nm24_wgmma_metadata writes it.
template <typename T>
void nm24_product_wgmma(const Nm24ProductArgs<T>& args, const uint32_t* wgmma_meta, cudaStream_t stream);

}  // namespace coppice::sparse_cuda
