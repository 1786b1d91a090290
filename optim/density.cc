// Density distributions over layers (density.h).
#include "optim/density.h"

#include <cmath>

#include "tensor/error.h"

namespace coppice {

DensityDistribution parse_density_distribution(std::string_view name) {
  if (name == "uniform") return DensityDistribution::kUniform;
  if (name == "er" || name == "erdos_renyi") return DensityDistribution::kErdosRenyi;
  if (name == "erk" || name == "erdos_renyi_kernel") return DensityDistribution::kErdosRenyiKernel;
  fail("density distribution: unknown name '", name, "'; known: er, erk, uniform");
}

const char* density_distribution_name(DensityDistribution d) {
  switch (d) {
    case DensityDistribution::kUniform: return "uniform";
    case DensityDistribution::kErdosRenyi: return "er";
    default: return "erk";
  }
}

namespace {

double raw_density(DensityDistribution d, const Shape& s) {
  switch (d) {
    case DensityDistribution::kUniform: return 1.0;
    case DensityDistribution::kErdosRenyi: {
      const double n_out = static_cast<double>(s[0]);
      const double n_in = s.size() > 1 ? static_cast<double>(s[1]) : 1.0;
      return (n_in + n_out) / (n_in * n_out);
    }
    default: {
      double sum = 0.0, prod = 1.0;
      for (int64_t x : s) {
        sum += static_cast<double>(x);
        prod *= static_cast<double>(x);
      }
      return sum / prod;
    }
  }
}

}  // namespace

std::vector<LayerDensity> layer_densities(const std::vector<LayerShape>& layers, const DensityOptions& o) {
  constexpr const char* op = "layer_densities";
  COPPICE_CHECK(o.density >= 0.0 && o.density <= 1.0, op, ": density must be in [0, 1], got ", o.density);
  std::set<std::string> names;
  for (const LayerShape& l : layers) {
    COPPICE_CHECK(!l.name.empty(), op, ": a layer has no name");
    COPPICE_CHECK(names.insert(l.name).second, op, ": layer '", l.name, "' appears twice");
    COPPICE_CHECK(!l.shape.empty() && shape_numel(l.shape) > 0, op, ": layer '", l.name, "' has shape ",
                  shape_to_string(l.shape), "; needs at least one dimension and elements");
  }
  for (const auto& [name, d] : o.overrides) {
    COPPICE_CHECK(names.count(name), op, ": override for '", name, "', which names no layer");
    COPPICE_CHECK(d >= 0.0 && d <= 1.0, op, ": override for '", name, "' must be in [0, 1], got ", d);
    COPPICE_CHECK(!o.dense.count(name), op, ": layer '", name, "' is both kept dense and overridden");
  }
  for (const std::string& name : o.dense)
    COPPICE_CHECK(names.count(name), op, ": dense layer '", name, "' names no layer");

  const size_t n = layers.size();
  std::vector<double> numel(n), raw(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    numel[i] = static_cast<double>(shape_numel(layers[i].shape));
    raw[i] = raw_density(o.distribution, layers[i].shape);
    total += numel[i];
  }
  std::vector<LayerDensity> out(n);
  std::vector<bool> fixed(n, false);
  for (size_t i = 0; i < n; ++i) {
    out[i].name = layers[i].name;
    out[i].numel = shape_numel(layers[i].shape);
    if (o.dense.count(layers[i].name)) {
      out[i].density = 1.0;
      fixed[i] = true;
    } else if (auto it = o.overrides.find(layers[i].name); it != o.overrides.end()) {
      out[i].density = it->second;
      fixed[i] = true;
    }
  }
  // Cap the free layer(s) of largest raw density at 1 until eps is valid.
  for (;;) {
    double budget = o.density * total, divisor = 0.0, max_raw = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (fixed[i]) {
        budget -= out[i].density * numel[i];
      } else {
        divisor += raw[i] * numel[i];
        max_raw = std::max(max_raw, raw[i]);
      }
    }
    COPPICE_CHECK(budget >= -1e-9 * total, op, ": the dense and overridden layers alone hold ",
                  o.density * total - budget, " entries, more than the target ", o.density * total);
    if (divisor == 0.0) break;  // every layer fixed
    const double eps = std::max(budget, 0.0) / divisor;
    if (eps * max_raw <= 1.0) {
      for (size_t i = 0; i < n; ++i) {
        if (!fixed[i]) out[i].density = eps * raw[i];
      }
      break;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!fixed[i] && raw[i] == max_raw) {
        fixed[i] = true;
        out[i].density = 1.0;
        out[i].made_dense = true;
      }
    }
  }
  for (LayerDensity& l : out) l.nnz = std::llround(l.density * static_cast<double>(l.numel));
  return out;
}

}  // namespace coppice
