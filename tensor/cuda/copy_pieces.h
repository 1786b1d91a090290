// PieceCopy (tensor/backend.h) on a CUDA device, queued on its stream.
#pragma once

#include "tensor/backend.h"

namespace coppice::cuda {

void copy_pieces(int device, const PieceCopy& copy);

}  // namespace coppice::cuda
