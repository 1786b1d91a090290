// Recording a differentiable function: what every function in
// autograd/functions/ (and a user's own) calls after computing its value.
//
//   Variable exp(const Variable& x) {
//     Tensor y = exp(x.value());
//     return record(y, "ExpBackward", {x}, [y](const Tensor& g, const GradNeeds&) {
//       return std::vector<Tensor>{mul(g, y)};
//     });
//   }
//
// The backward closure captures what it needs (Tensor handles: no copies) and
// returns one gradient per input, in the order of `inputs`, each of that
// input's shape, or undefined where `needs` says the input needs none.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "autograd/no_grad.h"
#include "autograd/node.h"
#include "autograd/variable.h"

namespace coppice {

// True when a result computed now from `inputs` gets a graph node: grad mode
// is on, the value is floating and some (defined) input requires grad.
bool should_record(const Tensor& value, const std::vector<Variable>& inputs);

// The result `value` with a FunctionNode named `name` whose edges point at
// `inputs` (undefined inputs get null edges).
Variable attach(Tensor value, std::string_view name, const std::vector<Variable>& inputs, BackwardFn backward);

// The result of a differentiable function: attached to the graph when
// should_record, else a leaf that does not require grad (and the closure is
// never made into a node).
template <typename Backward>
Variable record(Tensor value, std::string_view name, const std::vector<Variable>& inputs, Backward&& backward) {
  if (!should_record(value, inputs)) return Variable(std::move(value));
  return attach(std::move(value), name, inputs, BackwardFn(std::forward<Backward>(backward)));
}

}  // namespace coppice
