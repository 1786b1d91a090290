// Gradual magnitude pruning (Zhu & Gupta 2017, "To prune, or not to
// prune"): the density falls from `initial_density` at `start_step` to
// `final_density` at `end_step` on the cubic schedule
//   s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3      (sparsity s = 1 - density)
// with a pruning step every `frequency` steps (n dt = end_step - start_step),
// and at end_step. Pruning only removes entries (the smallest |w| among the
// stored ones); one-shot pruning is prune_to_density (prune.h).
#pragma once

#include <cstdint>

#include "optim/mask_change.h"
#include "tensor/tensor.h"

namespace coppice {

struct GmpConfig {
  double initial_density = 1.0;
  double final_density = 0.1;
  int64_t start_step = 0;
  int64_t end_step = 0;
  int64_t frequency = 100;
};

// Throws naming the bad field (densities outside [0, 1], final above
// initial, end before start, frequency < 1).
void validate(const GmpConfig& config);

// The scheduled density at `step`: initial before start_step, final from
// end_step on (equal steps: final from start on).
double gmp_density_at(const GmpConfig& config, int64_t step);
inline double gmp_sparsity_at(const GmpConfig& config, int64_t step) { return 1.0 - gmp_density_at(config, step); }

class GmpPruner {
 public:
  explicit GmpPruner(GmpConfig config);
  // start_step + j * frequency up to end_step, and end_step itself.
  bool is_prune_step(int64_t step) const;
  // On a pruning step, `param` pruned by magnitude to round(density * numel)
  // entries (whole blocks for BSR and Blocked-ELL: prune_to_density);
  // otherwise, and when nothing is pruned, change.param is `param` and
  // keep_from is undefined.
  MaskChange prune(int64_t step, const Tensor& param) const;
  const GmpConfig& config() const { return config_; }

 private:
  GmpConfig config_;
};

}  // namespace coppice
