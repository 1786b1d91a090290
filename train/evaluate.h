// Evaluation of a model over a loader, and the loss and accuracy helpers
// that training shares with it: both flatten the logits the same way and
// count the same hits, so training and evaluation numbers compare.
#pragma once

#include <cstdint>
#include <utility>

#include "autograd/variable.h"
#include "data/loader.h"
#include "distributed/communicator.h"
#include "models/module.h"
#include "tensor/tensor.h"
#include "train/components.h"

namespace coppice {

// Mean loss and accuracy of `model` (in eval mode, no grad) over `loader`'s
// epoch 0, at most max_batches batches (0: all). Restores the model's mode.
// With `comm`, rank r evaluates batches r, r + world_size, ... and the sums
// are reduced, so every rank gets the result over all the batches.
EvalResult evaluate(Module& model, const DataLoader& loader, int64_t max_batches = 0, Communicator* comm = nullptr);

// Logits [..., C] as [N, C], targets [...] as [N].
std::pair<Variable, Tensor> flatten_for_loss(const Variable& logits, const Tensor& targets);

// Two counts as an f64 [2] tensor on the logits' device, computed there
// (exact): correct, the rows of `logits2d` [N, C] whose argmax is their
// target in `targets` [N] (a target the loss ignores never matches); and
// scored, the targets the loss scores, those not equal to its ignore_index
// (CrossEntropyOptions' default, -100; a graph's split marks the other
// splits' nodes so, data/doc_graph.h). A training step and an evaluation
// batch read them to the host with their loss, in one read.
Tensor correct_and_scored(const Tensor& logits2d, const Tensor& targets);

}  // namespace coppice
