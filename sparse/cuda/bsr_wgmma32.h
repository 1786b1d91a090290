// The wgmma BSR product for 32x32 blocks (bsr_wgmma32.cu), which
// bsr_wgmma_product (bsr_wgmma.h) runs for them: the same arguments, the same
// checks before it (bsr_wgmma_runs), the same product and write-out.
#pragma once

#include <cuda_runtime_api.h>

#include "sparse/cuda/bsr_tiles.h"

namespace coppice::sparse_cuda {

template <typename T>
void bsr_wgmma32_product(const BsrProductArgs<T>& p, cudaStream_t stream);

}  // namespace coppice::sparse_cuda
