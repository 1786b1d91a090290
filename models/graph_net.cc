#include "models/graph_net.h"

#include "autograd/autograd.h"
#include "models/graph_adjacency.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

const char* kind_name(GraphLayerKind k) { return k == GraphLayerKind::kGCN ? "gcn" : "sage"; }

}  // namespace

GraphNet::GraphNet(const GraphNetOptions& graph, const LayerOptions& options, Generator& gen)
    : Module("GraphNet"), o_(graph), dtype_(options.dtype) {
  COPPICE_CHECK(o_.sizes.size() >= 2, "GraphNet (", kind_name(o_.kind),
                "): sizes needs the input features and the classes at least, got ", o_.sizes.size(), " sizes");
  for (size_t i = 0; i + 1 < o_.sizes.size(); ++i) {
    const std::string name = "conv" + std::to_string(i + 1);
    if (o_.kind == GraphLayerKind::kGCN) {
      layers_.push_back(register_module(name, std::make_shared<GCNConv>(o_.sizes[i], o_.sizes[i + 1], options, gen)));
    } else {
      layers_.push_back(register_module(name, std::make_shared<SAGEConv>(o_.sizes[i], o_.sizes[i + 1], options, gen)));
    }
  }
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o_.dropout, o_.dropout_seed));
}

void GraphNet::set_graph(const Tensor& adjacency) {
  // In the weights' dtype as they are now (a job may have cast them since
  // the model was built: precision.dtype).
  const DType dtype = parameters().empty() ? dtype_ : parameters().front().dtype();
  const Tensor n = o_.kind == GraphLayerKind::kGCN ? gcn_adjacency(adjacency, dtype) : mean_adjacency(adjacency, dtype);
  normalized_ = to_device(n, adjacency.device());  // made on the host, used where the graph lives
}

Variable GraphNet::forward(const Variable& x) {
  COPPICE_CHECK(has_graph(), "GraphNet (", kind_name(o_.kind),
                "): no graph: set_graph(adjacency) before forward (the job's data.dataset must be a graph)");
  // Features of another floating dtype than the graph's (weights cast after
  // set_graph): the graph follows the features, once.
  if (is_floating(x.dtype()) && normalized_.dtype() != x.dtype())
    normalized_ = with_values(normalized_, values(normalized_).to(x.dtype()));
  Variable h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = o_.kind == GraphLayerKind::kGCN ? static_cast<GCNConv&>(*layers_[i]).forward(normalized_, h)
                                        : static_cast<SAGEConv&>(*layers_[i]).forward(normalized_, h);
    if (i + 1 < layers_.size()) h = dropout_->forward(relu(h));
  }
  return h;
}

}  // namespace coppice
