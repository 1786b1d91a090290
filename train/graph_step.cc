#include "train/graph_step.h"

#include <cstdio>
#include <utility>

#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

void append_tensor(std::string& key, const Tensor& t) {
  if (!t.defined()) {
    key += "-;";
    return;
  }
  key += str_cat(t.format(), dtype_name(t.dtype()), shape_to_string(t.shape()), t.device().to_string());
  if (t.is_sparse()) {
    const SparseImpl& s = sparse_impl(t, "GraphedStep");
    key += str_cat("v", s.pattern_version());
    for (const auto& [name, part] : s.parts()) key += str_cat(" ", name, "@", part.data_ptr());
  } else {
    key += str_cat("@", t.data_ptr());
  }
  key += ";";
}

std::string shape_key(const Tensor& t) {
  return str_cat(dtype_name(t.dtype()), shape_to_string(t.shape()), t.device().to_string());
}

}  // namespace

GraphedStep::Key GraphedStep::key_of(const Module& model, const Tensor& inputs, const Tensor& targets,
                                     double scalar_key) const {
  char scalar[32];
  std::snprintf(scalar, sizeof scalar, "%.17g", scalar_key);
  Key key;
  key.state = str_cat(model.is_training() ? "train " : "eval ", scalar, "\n");
  for (const auto& [name, p] : model.named_parameters()) {
    key.state += str_cat(name, p.requires_grad() ? " grad " : " ");
    append_tensor(key.state, p.value());
  }
  for (const auto& [name, b] : model.named_buffers()) {
    key.state += name + " ";
    append_tensor(key.state, b);
  }
  key.batch = str_cat("in ", shape_key(inputs), " target ", shape_key(targets));
  return key;
}

StepOutputs GraphedStep::run(Module& model, const Tensor& inputs, const Tensor& targets, double scalar_key,
                             const ForwardBackward& fn) {
  if (!declined_.empty()) return fn(inputs, targets);
  const Key key = key_of(model, inputs, targets, scalar_key);
  if (graph_ != nullptr && key.state != graph_key_.state) {  // something it read has moved: it can never replay again
    graph_.reset();
    grads_.clear();
    outputs_ = StepOutputs{};
  }
  if (graph_ != nullptr && key.batch == graph_key_.batch) return replay(model, inputs, targets);
  // A batch of another shape (an epoch's last, smaller one) runs eagerly and
  // leaves the graph for the next full batch; a shape seen twice in a row is
  // captured in its place.
  if (key == last_key_) {
    // The inputs are copied in before each replay: the capture reads tensors
    // of its own, never the loader's.
    graph_.reset();
    grads_.clear();
    static_inputs_ = inputs.to(device_).clone();
    static_targets_ = targets.to(device_).clone();
    model.zero_grad();
    // The graph's memory is its own pool: hand the eager steps' cached blocks
    // back first, or the run would hold a step's activations twice.
    allocator_for(device_).empty_cache();
    StepOutputs captured;
    std::string why;
    graph_ = capture_work(
        device_, [&] { captured = fn(static_inputs_, static_targets_); }, &why);
    if (graph_ != nullptr) {
      graph_key_ = key;
      outputs_ = captured;
      for (const auto& [name, p] : model.named_parameters()) {
        if (p.grad().defined()) grads_.emplace_back(p, p.grad());
      }
      ++captures_;
      return replay(model, inputs, targets);
    }
    declined_ = why.empty() ? std::string("the capture failed") : why;
    model.zero_grad();  // a failed capture may have set some
  }
  last_key_ = key;
  return fn(inputs, targets);
}

StepOutputs GraphedStep::replay(Module& model, const Tensor& inputs, const Tensor& targets) {
  static_inputs_.copy_(inputs);
  static_targets_.copy_(targets);
  model.zero_grad();
  graph_->replay();
  for (const auto& [p, g] : grads_) p.set_grad(g);
  ++replays_;
  return outputs_;
}

}  // namespace coppice
