// A training step's forward and backward passes captured as one CUDA graph
// (tensor/backend.h capture_work) and replayed, one launch per step instead
// of hundreds, while nothing the capture read has moved.
//
// What a replay reuses from the capture: every address (the parameters'
// values and index arrays, the model's buffers, the static input and target
// tensors the batch is copied into), every shape, and every host-side scalar
// (the loss scale). The step's key lists them; a step whose key differs runs
// eagerly (a batch of another shape, such as an epoch's smaller last one,
// leaves the graph in place for the next full batch; anything else drops
// it), and the second eager step in a row with one key is captured (the
// first fills the caches a capture cannot fill: pattern-derived device
// arrays, kernels chosen by timing). So a mask update costs one eager step
// and one capture; a learning-rate schedule costs nothing, because the
// optimizer step stays outside the graph (it reads each gradient from the
// buffer the replay wrote, set back on the parameter after every replay).
//
// What cannot be captured is found out, not guessed: a step that reads a
// result back on the host, synchronizes, or draws random numbers (dropout)
// fails its capture, and GraphedStep then runs every later step eagerly and
// says why (declined()). The caller decides up front what it knows the key
// cannot see: the trainer does not use graphs for a model with output
// sparsifiers, whose decisions may depend on the step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "models/module.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace coppice {

// What a step's forward and backward leave for the caller: the loss (a
// scalar), the logits [N, C] and the targets [N] the loss compared them with.
struct StepOutputs {
  Tensor loss;
  Tensor logits;
  Tensor targets;
};

class GraphedStep {
 public:
  // Runs the forward pass on (inputs, targets), then backward; returns the outputs.
  using ForwardBackward = std::function<StepOutputs(const Tensor& inputs, const Tensor& targets)>;

  explicit GraphedStep(Device device) : device_(device) {}

  // One step: replays the graph when the key matches, else runs `fn` eagerly
  // (capturing it when the previous step had this key). `scalar_key` holds
  // the host scalars `fn` bakes into its work (the loss scale). Afterwards
  // every parameter of `model` has the gradient `fn` gives it.
  StepOutputs run(Module& model, const Tensor& inputs, const Tensor& targets, double scalar_key,
                  const ForwardBackward& fn);

  // Stops capturing for good (later steps eager); `why` is what declined() says.
  void decline(const std::string& why) { declined_ = why; }
  // Why graphs are off ("" while they are on).
  const std::string& declined() const { return declined_; }
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }

 private:
  // What a capture bakes in: `state` (the parameters' and buffers' formats,
  // dtypes, devices, shapes, pattern versions and addresses, the mode and
  // the host scalars; a graph is dropped once it differs) and `batch` (the
  // dtypes, shapes and devices of inputs and targets; a graph only replays
  // batches of its own). Integers, not text: the key is made before every
  // step, and formatting it over a GPT's hundred parameters took the host
  // about 0.15 ms a step while the GPU waited.
  struct Key {
    std::vector<int64_t> state, batch;
    bool operator==(const Key& o) const { return state == o.state && batch == o.batch; }
  };
  Key key_of(const Module& model, const Tensor& inputs, const Tensor& targets, double scalar_key) const;
  StepOutputs replay(Module& model, const Tensor& inputs, const Tensor& targets);

  Device device_;
  std::string declined_;
  Key last_key_;  // of the last eager step
  Key graph_key_;
  std::unique_ptr<CapturedWork> graph_;
  Tensor static_inputs_, static_targets_;
  StepOutputs outputs_;
  std::vector<std::pair<Variable, Tensor>> grads_;  // each parameter's gradient buffer in the graph
  int64_t captures_ = 0;
  int64_t replays_ = 0;
};

}  // namespace coppice
