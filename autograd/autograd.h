// The autograd layer (docs/architecture.md, layer 3), in one include.
//
//   Variable w(randn({4, 3}), /*requires_grad=*/true, "w");
//   Variable x(input);                       // a constant: no gradient
//   Variable loss = cross_entropy(matmul(x, w), target);
//   loss.backward();                         // w.grad() now holds d loss / d w
//
// Every op of tensor/ops.h has an overload on Variables here (functions/);
// results record a graph node unless grad mode is off (NoGradGuard) or no
// input requires grad. Integer and bool results (argmax, comparisons) are
// plain Tensors.
#pragma once

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/functions/einsum.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/mlp.h"
#include "autograd/functions/nn.h"
#include "autograd/functions/rearrange.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/residual.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/straight_through.h"
#include "autograd/gradcheck.h"
#include "autograd/no_grad.h"
#include "autograd/sparse_grad.h"
#include "autograd/variable.h"
