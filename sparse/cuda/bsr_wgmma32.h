// The wgmma BSR kernels for 32x32 blocks (bsr_wgmma32.cu), which
// bsr_wgmma_product and bsr_wgmma_sddmm (bsr_wgmma.h) run for them: the same
// arguments, the same checks before them (bsr_wgmma_runs,
// bsr_wgmma_sddmm_runs), the same results.
#pragma once

#include <cuda_runtime_api.h>

#include "sparse/cuda/bsr_tiles.h"

namespace coppice::sparse_cuda {

template <typename T>
void bsr_wgmma32_product(const BsrProductArgs<T>& p, cudaStream_t stream);

// Runs of at most kBsrWgmma32MostRun stored blocks (bsr_mma_sddmm_group's
// at 32x32).
constexpr int kBsrWgmma32MostRun = 8;
template <typename T>
void bsr_wgmma32_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream);

}  // namespace coppice::sparse_cuda
