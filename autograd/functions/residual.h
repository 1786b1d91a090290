// A pre-norm transformer's residual stream, with each add formed inside a
// kernel that runs anyway: the projection's write-out before it
// (linear_residual: tensor's linear_add_fused) or the norm's pass after it
// (add_layer_norm, nn.h). Either way the values are those of the plain adds.
#pragma once

#include "autograd/variable.h"

namespace coppice {

// The stream's value is h + pending, where pending is what a layer adds to
// it and has not added yet (undefined: the stream is h).
struct ResidualStream {
  Variable h, pending;
};

// h + linear(x, weight, bias) as a stream: {the sum, undefined} from one
// kernel where the weight's product adds h in its write-out (a BSR weight of
// 32x32, 64x64 or 128x128 blocks on Hopper: linear_add_fused), else {h,
// linear(x, weight, bias)}, the add left pending for the next norm's
// add_layer_norm, which fuses it there. h has the product's shape and dtype.
ResidualStream linear_residual(const Variable& h, const Variable& x, const Variable& weight, const Variable& bias);

}  // namespace coppice
