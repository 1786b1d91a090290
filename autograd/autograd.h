// Everything in the autograd layer (ARCHITECTURE.md, layer 3).
#pragma once

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/nn.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/gradcheck.h"
#include "autograd/no_grad.h"
#include "autograd/variable.h"
