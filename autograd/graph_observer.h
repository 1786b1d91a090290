// Watching a graph being recorded. A pass that needs to know what one step
// computes (models/propagation: the sparsity attributes of every tensor)
// installs an observer for one forward pass and sees each recorded output as
// it is made (Variable::from_node), and the scopes that code opens around
// the ops it owns (Module::run_op: a module's op).
//
// Off (no observer installed), a recorded op costs one thread-local read.
#pragma once

#include <cstdint>
#include <memory>

#include "autograd/node.h"
#include "tensor/tensor.h"

namespace coppice {

class GraphObserver {
 public:
  virtual ~GraphObserver() = default;
  // `value` is output `slot` of the node just made; the node's next_edges()
  // say where its inputs came from.
  virtual void on_output(const std::shared_ptr<Node>& node, uint32_t slot, const Tensor& value) = 0;
  // A scope owned by `owner` opens; it closes with what it returned (an
  // invalid edge: a value that needs no gradient). Scopes nest.
  virtual void on_scope_begin(const void* /*owner*/) {}
  virtual void on_scope_end(const void* /*owner*/, const Edge& /*result*/) {}
};

// The observer of this thread (null: none).
GraphObserver* graph_observer();

// Installs `observer` on this thread for its lifetime; the one before comes
// back when it ends.
class ScopedGraphObserver {
 public:
  explicit ScopedGraphObserver(GraphObserver* observer);
  ~ScopedGraphObserver();
  ScopedGraphObserver(const ScopedGraphObserver&) = delete;
  ScopedGraphObserver& operator=(const ScopedGraphObserver&) = delete;

 private:
  GraphObserver* previous_;
};

}  // namespace coppice
