// A node classifier over one graph: graph layers (models/graph_conv.h) with
// ReLU and dropout between, the last giving each node's class logits. The
// model is given its graph once (set_graph), before the first forward, and
// keeps the normalized adjacency its layers multiply by (a constant, not a
// parameter or buffer: it belongs to the data, not to the weights).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/graph_conv.h"
#include "models/layers.h"
#include "models/module.h"

namespace coppice {

enum class GraphLayerKind { kGCN, kSAGE };

struct GraphNetOptions {
  GraphLayerKind kind = GraphLayerKind::kGCN;
  // Input features, hidden sizes, classes: layers conv1..convK for K + 1 sizes.
  std::vector<int64_t> sizes = {2000, 64, 10};
  double dropout = 0.5;  // on the hidden features (the input may be sparse: never dropped)
  uint64_t dropout_seed = 0;
};

class GraphNet : public Module {
 public:
  explicit GraphNet(const GraphNetOptions& graph = {}, const LayerOptions& options = {},
                    Generator& gen = default_generator());
  // The graph's adjacency, a square CSR [nodes, nodes] (edges, any
  // non-negative weights, no self-loops needed); normalized here once for
  // the layers' kind (gcn_adjacency or mean_adjacency) in the layers' dtype,
  // on the adjacency's device (the features' and the weights').
  void set_graph(const Tensor& adjacency);
  bool has_graph() const { return normalized_.defined(); }
  // x: the node features [nodes, sizes[0]], dense or CSR. Throws
  // coppice::Error before set_graph, naming the model.
  Variable forward(const Variable& x) override;

 private:
  GraphNetOptions o_;
  DType dtype_;
  std::vector<std::shared_ptr<Module>> layers_;  // GCNConv or SAGEConv
  std::shared_ptr<Dropout> dropout_;
  Tensor normalized_;
};

}  // namespace coppice
