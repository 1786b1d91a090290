// One forward pass of a model, traced: every tensor the graph records (each
// op's output, each parameter and the input), the op and the kernels that
// made it, the module whose op it belongs to, its shape, dtype and format,
// and where it goes. What the attribute propagation (propagation.h) reads; it runs the
// model once under a GraphObserver (autograd/graph_observer.h) and keeps
// nothing of the graph.
//
// Only recorded ops are seen: ops on values that need no gradient (the
// input's own preprocessing) are not, and a tensor that reaches an op from
// outside the graph is an input of id kUntraced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "models/module.h"
#include "sparse/formats.h"
#include "tensor/shape.h"

namespace coppice::propagation {

inline constexpr int kUntraced = -1;

struct TracedTensor {
  enum class Kind { kInput, kParameter, kOp };
  int id = 0;
  Kind kind = Kind::kOp;
  // kOp: the recording function's name without "Backward" ("Linear",
  // "LinearRelu", "Relu"); kParameter: the parameter's dotted name; kInput: "input".
  std::string op;
  uint32_t slot = 0;        // which output of its op
  std::string module;       // the innermost module whose op made it ("" for the model's own)
  std::vector<int> inputs;  // the op's inputs' ids, in the op's order (kUntraced: from outside the graph)
  // The modules whose op returned this tensor, innermost first (a module
  // whose op is one child's returns what the child returned).
  std::vector<std::string> returned_by;
  Shape shape;
  DType dtype = DType::kF32;
  std::string format;     // "dense", "csr", ...
  FormatOptions options;  // block shape or n:m, where the format has them
  Tensor value;           // as it was made (held for the trace's lifetime)

  // kOp: the kernels dispatched since the op recorded before it, as
  // "linear(csr, dense) on cpu" (tensor/dispatcher.h): the kernels that made it.
  std::vector<std::string> kernels;

  // (consumer id, input position) for every op that took this tensor.
  std::vector<std::pair<int, int>> consumers;
};

struct StepTrace {
  std::vector<TracedTensor> tensors;  // by id, in recording order (inputs and parameters first)
  int output = kUntraced;             // what the model returned
};

// Runs model.forward(input) once with gradients recorded (the model in
// evaluation mode for the pass: no dropout draws, no running statistics
// changed; its training mode comes back) and returns the trace. The model's
// parameters and output rules are used as they are.
StepTrace trace_forward(Module& model, const Variable& input);

}  // namespace coppice::propagation
