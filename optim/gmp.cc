// Gradual magnitude pruning (gmp.h).
#include "optim/gmp.h"

#include <cmath>

#include "optim/prune.h"
#include "sparse/sparse_impl.h"

namespace coppice {

void validate(const GmpConfig& c) {
  COPPICE_CHECK(c.initial_density >= 0.0 && c.initial_density <= 1.0, "gmp: initial_density must be in [0, 1], got ",
                c.initial_density);
  COPPICE_CHECK(c.final_density >= 0.0 && c.final_density <= 1.0, "gmp: final_density must be in [0, 1], got ",
                c.final_density);
  COPPICE_CHECK(c.final_density <= c.initial_density, "gmp: final_density (", c.final_density,
                ") is above initial_density (", c.initial_density, ")");
  COPPICE_CHECK(c.end_step >= c.start_step, "gmp: end_step (", c.end_step, ") is before start_step (", c.start_step,
                ")");
  COPPICE_CHECK(c.frequency >= 1, "gmp: frequency must be >= 1, got ", c.frequency);
}

double gmp_density_at(const GmpConfig& c, int64_t step) {
  if (step < c.start_step) return c.initial_density;
  if (step >= c.end_step) return c.final_density;
  const double progress = static_cast<double>(step - c.start_step) / static_cast<double>(c.end_step - c.start_step);
  const double s_i = 1.0 - c.initial_density, s_f = 1.0 - c.final_density;
  const double r = 1.0 - progress;
  return 1.0 - (s_f + (s_i - s_f) * r * r * r);
}

GmpPruner::GmpPruner(GmpConfig config) : config_(config) { validate(config_); }

bool GmpPruner::is_prune_step(int64_t step) const {
  if (step < config_.start_step || step > config_.end_step) return false;
  return step == config_.end_step || (step - config_.start_step) % config_.frequency == 0;
}

MaskChange GmpPruner::prune(int64_t step, const Tensor& param) const {
  if (!is_prune_step(step)) {
    pattern_view(param, "gmp");  // the same format checks on every step
    MaskChange none;
    none.param = param;
    return none;
  }
  return prune_to_density(param, gmp_density_at(config_, step));
}

}  // namespace coppice
