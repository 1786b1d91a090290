#include "train/graph_step.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

// A tensor's dtype, device and shape.
void append_shape(std::vector<int64_t>& key, const Tensor& t) {
  key.push_back(static_cast<int64_t>(t.dtype()));
  key.push_back(static_cast<int64_t>(t.device().type));
  key.push_back(t.device().index);
  key.push_back(t.dim());
  for (int64_t d : t.shape()) key.push_back(d);
}

// A tensor's words: "undefined", or its format, its shape's words, and
// where its data lives (a sparse tensor: its pattern version and each part's
// address and size).
void append_tensor(std::vector<int64_t>& key, const Tensor& t) {
  if (!t.defined()) {
    key.push_back(-1);
    return;
  }
  key.push_back(static_cast<int64_t>(std::hash<std::string_view>{}(t.format())));
  append_shape(key, t);
  if (t.is_sparse()) {
    const SparseImpl& s = sparse_impl(t, "GraphedStep");
    key.push_back(s.pattern_version());
    for (const auto& [name, part] : s.parts()) {
      key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(part.data_ptr())));
      key.push_back(part.numel());
    }
  } else {
    key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr())));
  }
}

}  // namespace

GraphedStep::Key GraphedStep::key_of(const Module& model, const Tensor& inputs, const Tensor& targets,
                                     double scalar_key) const {
  Key key;
  key.state.reserve(last_key_.state.size());
  key.state.push_back(model.is_training() ? 1 : 0);
  int64_t scalar_bits = 0;
  static_assert(sizeof(scalar_bits) == sizeof(scalar_key));
  std::memcpy(&scalar_bits, &scalar_key, sizeof(scalar_bits));
  key.state.push_back(scalar_bits);
  for (const auto& [name, p] : model.named_parameters()) {
    key.state.push_back(p.requires_grad() ? 1 : 0);
    append_tensor(key.state, p.value());
  }
  key.state.push_back(-2);  // the buffers after the parameters
  for (const auto& [name, b] : model.named_buffers()) append_tensor(key.state, b);
  append_shape(key.batch, inputs);
  append_shape(key.batch, targets);
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
