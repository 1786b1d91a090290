// The CUDA kernels' name for tensor/scalar_math.h: overloads of the math
// functions for float and double, so functors templated on the compute type
// call the right one (expf or exp, ...), IEEE-accurate (no intrinsics; the f32
// gelu's exception is scalar_math.h's to explain).
#pragma once

#include "tensor/scalar_math.h"

namespace coppice::cuda {
namespace math = ::coppice::scalar_math;
}  // namespace coppice::cuda
