// Parameter groups: Variables plus the hyperparameters that override an
// optimizer's defaults for them (torch.optim's param_groups).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

// Hyperparameters by name ("lr", "momentum", "weight_decay", "beta1", ...);
// flags (Nesterov) are 0 or 1.
using Hyperparameters = std::map<std::string, double>;

struct ParamGroup {
  std::vector<Variable> params;
  // Overrides of the optimizer's defaults; keys must be among them.
  Hyperparameters options;
};

}  // namespace coppice
