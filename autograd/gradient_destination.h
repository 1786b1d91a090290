// Gradients written where they are wanted: a leaf may name a tensor its next
// gradient is to be written into (Variable::set_grad_destination: a
// data-parallel exchange's bucket, distributed/grad_sync.h), and the backward
// engine offers it to the node that gives the leaf its only gradient in the
// pass. A backward function that can write its result in place asks for it
// with gradient_destination(input); the rest ignore it, and the leaf stores
// their gradient as usual. A gradient written into its destination is stored
// as the destination itself: no copy on either side.
#pragma once

#include <cstddef>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

// Inside a backward function (Node::apply): where the gradient for `input`
// may be written (contiguous, of the input's shape, dtype and device), or an
// undefined tensor. Offered only for an input that is a leaf with a
// destination and no gradient yet, which this node alone still sends a
// gradient to in this pass.
const Tensor& gradient_destination(size_t input);

// True when `grad` was written into `destination` (defined): the same data,
// shape and dtype, contiguous. What the accumulator stores as is, and what a
// data-parallel exchange needs not copy.
bool is_written_into(const Tensor& grad, const Tensor& destination);

// What gradient_destination returns while it lives (the engine's, around one
// node's apply): `destinations` by input, empty for none. Scopes nest.
class GradientDestinationScope {
 public:
  explicit GradientDestinationScope(const std::vector<Tensor>& destinations);
  ~GradientDestinationScope();
  GradientDestinationScope(const GradientDestinationScope&) = delete;
  GradientDestinationScope& operator=(const GradientDestinationScope&) = delete;

 private:
  const std::vector<Tensor>* previous_;
};

}  // namespace coppice
