// The backward engine.
//
// Runs the graph behind some root variables in dependency order (a node runs
// once every node that feeds it a gradient has run), without recursion, so
// graphs of any depth work. Gradients arriving at one output are summed;
// leaves accumulate into their grad. The engine runs under NoGradGuard.
#pragma once

#include <initializer_list>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

// Seeds each root with the matching gradient (an undefined Tensor means ones,
// which needs a one-element root) and runs backward to the leaves. Without
// retain_graph each node frees its saved tensors once it has run, and running
// it again throws.
void run_backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// Inside a backward function (Node::apply): `grad`, one of the gradients it
// returns, is made by work that may still be running beside the stream
// (run_beside's second function). The engine joins that work (join_beside)
// before anything reads `grad` on the device but a leaf's accumulator, which
// joins it itself where it must, and at the end of the pass; until then the
// work overlaps the next nodes'.
void made_beside(const Tensor& grad);
void made_beside_all(std::initializer_list<Tensor> grads);

}  // namespace coppice
