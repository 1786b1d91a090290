#include "models/graph_conv.h"

#include <cmath>
#include <string_view>

#include "autograd/autograd.h"
#include "tensor/error.h"

namespace coppice {
namespace {

void check_graph_input(std::string_view op, const Tensor& adjacency, const Variable& h, int64_t in_features) {
  COPPICE_CHECK(adjacency.defined() && adjacency.dim() == 2 && adjacency.size(0) == adjacency.size(1), op,
                ": the adjacency must be a square [n, n] matrix, got ",
                adjacency.defined() ? shape_to_string(adjacency.shape()) : std::string("none"));
  COPPICE_CHECK(h.dim() == 2 && h.size(0) == adjacency.size(0) && h.size(1) == in_features, op,
                ": the node features must be [", adjacency.size(0), ", ", in_features, "] (nodes, in_features), got ",
                shape_to_string(h.shape()));
}

}  // namespace

GCNConv::GCNConv(int64_t in_features, int64_t out_features, const LayerOptions& options, Generator& gen)
    : Module("GCNConv") {
  linear_ =
      register_module("linear", std::make_shared<Linear>(in_features, out_features, /*bias=*/false, options, gen));
  // The bias is added after the aggregation (a bias inside would be
  // weighted by each row's sum of Â).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  bias_ = register_parameter("bias", Variable(uniform_init({out_features}, bound, options, gen), true));
}

Variable GCNConv::forward(const Tensor& normalized, const Variable& h) {
  check_graph_input("GCNConv", normalized, h, linear_->in_features());
  return add(matmul(Variable(normalized), linear_->forward(h)), *bias_);
}

Variable GCNConv::forward(const Variable&) {
  fail("GCNConv: forward needs the graph: call forward(normalized_adjacency, h)");
}

SAGEConv::SAGEConv(int64_t in_features, int64_t out_features, const LayerOptions& options, Generator& gen)
    : Module("SAGEConv") {
  self_ = register_module("self", std::make_shared<Linear>(in_features, out_features, /*bias=*/true, options, gen));
  neighbours_ =
      register_module("neighbours", std::make_shared<Linear>(in_features, out_features, /*bias=*/false, options, gen));
}

Variable SAGEConv::forward(const Tensor& mean, const Variable& h) {
  check_graph_input("SAGEConv", mean, h, self_->in_features());
  return add(self_->forward(h), matmul(Variable(mean), neighbours_->forward(h)));
}

Variable SAGEConv::forward(const Variable&) {
  fail("SAGEConv: forward needs the graph: call forward(mean_adjacency, h)");
}

}  // namespace coppice
