// Graph convolution layers over a sparse normalized adjacency
// (models/graph_adjacency.h). Node features h [n, in] may be dense or a CSR
// (a bag of words): the first product is then an SpMM of the CSR by the
// weight, and the features are never densified.
#pragma once

#include <cstdint>
#include <memory>

#include "models/layers.h"
#include "models/module.h"

namespace coppice {

// GCN (Kipf and Welling 2017): h' = Â (h W^T) + b, Â = gcn_adjacency(A). The
// product with the weight comes first (out <= in in practice, and it is the
// product that reads a sparse h). Parameters: linear.weight [out, in], bias [out].
class GCNConv : public Module {
 public:
  GCNConv(int64_t in_features, int64_t out_features, const LayerOptions& options = {},
          Generator& gen = default_generator());
  // normalized: Â, a CSR [n, n]; h [n, in].
  Variable forward(const Tensor& normalized, const Variable& h);
  // Refused: a graph layer needs the adjacency (forward(normalized, h)).
  Variable forward(const Variable& h) override;

 private:
  std::shared_ptr<Linear> linear_;
  Variable* bias_;
};

// GraphSAGE with the mean aggregator (Hamilton et al. 2017):
// h' = h W_self^T + b + M (h W_neigh^T), M = mean_adjacency(A) (the mean of the
// neighbours' rows, so M (h W^T) = mean(h) W^T). Parameters: self.weight,
// self.bias, neighbours.weight.
class SAGEConv : public Module {
 public:
  SAGEConv(int64_t in_features, int64_t out_features, const LayerOptions& options = {},
           Generator& gen = default_generator());
  // mean: M, a CSR [n, n]; h [n, in].
  Variable forward(const Tensor& mean, const Variable& h);
  Variable forward(const Variable& h) override;  // refused, as GCNConv's

 private:
  std::shared_ptr<Linear> self_, neighbours_;
};

}  // namespace coppice
