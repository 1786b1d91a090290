// Density distributions over layers (docs/architecture.md, layer 5): how a target
// overall density is split among a model's sparse layers.
//
//   uniform  every free layer gets the same density
//   er       Erdős–Rényi (Mocanu et al. 2018): density ∝ (n_in + n_out) / (n_in n_out),
//            with n_out, n_in the first two dims (a conv's channels)
//   erk      ER-Kernel (Evci et al. 2020): density ∝ (sum of all dims) / (product of all dims)
//
// Layers named in `dense` get density 1 and layers in `overrides` their given
// density; the rest share what is left of the target nnz, density_l = eps *
// raw_l with eps chosen so that sum_l density_l n_l = density * sum_l n_l.
// A layer whose density would exceed 1 is made dense and eps recomputed over
// the others, repeatedly (RigL's sparse_utils procedure), so the total is
// still the target. 1-D shapes count as (n, 1) for er.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/shape.h"

namespace coppice {

enum class DensityDistribution { kUniform, kErdosRenyi, kErdosRenyiKernel };
// "uniform", "er" (or "erdos_renyi"), "erk" (or "erdos_renyi_kernel"); throws listing them.
DensityDistribution parse_density_distribution(std::string_view name);
const char* density_distribution_name(DensityDistribution d);

struct LayerShape {
  std::string name;
  Shape shape;
};

struct DensityOptions {
  DensityDistribution distribution = DensityDistribution::kErdosRenyiKernel;
  double density = 0.1;                     // the overall target, in [0, 1]
  std::map<std::string, double> overrides;  // fixed densities by layer name
  std::set<std::string> dense;              // layers kept dense by name
};

struct LayerDensity {
  std::string name;
  int64_t numel = 0;
  double density = 0.0;
  int64_t nnz = 0;          // round(density * numel)
  bool made_dense = false;  // capped at 1 by the procedure (not asked for)
};

// One entry per layer, in order. Throws for an empty or repeated name, a
// density or override outside [0, 1], an override or dense name that names
// no layer, and fixed layers that alone exceed the target.
std::vector<LayerDensity> layer_densities(const std::vector<LayerShape>& layers, const DensityOptions& options);

}  // namespace coppice
