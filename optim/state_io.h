// Saving and loading an optimizer's state in safetensors (tensor/io).
//
// Tensors: "<param name>.<state>" (e.g. "fc1.weight.exp_avg", and
// "fc1.weight.master" for the f32 master weights of a bf16/f16 parameter),
// each shaped like values(param) (nnz-sized for a sparse parameter), as the
// optimizer holds them. Metadata: "coppice.optimizer" (its name), "coppice.groups"
// (count), per group g "group.<g>.params" (count), "group.<g>.param.<i>" (the
// names, in order) and "group.<g>.<hyperparameter>" (exact decimal), and per
// parameter with state "step.<param name>". Every parameter needs a unique,
// non-empty name.
//
// Loading restores hyperparameters, step counts and state tensors (moved to
// each parameter's device) after validating everything: the optimizer name,
// groups, parameter names, hyperparameter names, state names, shapes and
// dtypes must match, and the first mismatch is returned as an error naming
// it, with the optimizer left unchanged. The state is taken to be aligned
// with each parameter's current pattern (save and load the parameters with
// the same patterns; sparse/io saves them).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "optim/optimizer.h"
#include "tensor/io/safetensors.h"

namespace coppice {

absl::Status save_optimizer_state(const Optimizer& optimizer, const std::string& path);
absl::Status load_optimizer_state(Optimizer& optimizer, const std::string& path);

// The same in memory (the bytes save_optimizer_state writes).
absl::StatusOr<std::string> serialize_optimizer_state(const Optimizer& optimizer);
absl::Status parse_optimizer_state(Optimizer& optimizer, const std::string& bytes,
                                   const std::string& source = "<memory>");

// Loading in two stages, for a caller that must check everything (the
// optimizer's state among other things) before changing anything: plan
// validates a parsed state file against `optimizer` and returns what to
// apply; apply cannot fail for the reasons plan checks. `values_after`, when
// given, holds for each parameter name the values tensor the parameter will
// have when the plan is applied (a checkpoint loads new sparse patterns
// first), so that the state's shapes are checked against those.
struct OptimizerStatePlan {
  struct Entry {
    size_t group = 0;
    size_t index = 0;  // in the group
    ParamState state;  // pattern_version is set when applied
  };
  std::vector<Entry> entries;
  std::vector<std::pair<size_t, std::pair<std::string, double>>> options;  // (group, (name, value))
};
absl::StatusOr<OptimizerStatePlan> plan_optimizer_state(const Optimizer& optimizer, const SafetensorsFile& file,
                                                        const std::string& source,
                                                        const std::map<std::string, Tensor>* values_after = nullptr);
// Replaces every parameter's state with the plan's; with
// restore_hyperparameters, also the groups' hyperparameters (an error,
// leaving them as they were, when the optimizer refuses one).
absl::Status apply_optimizer_state(Optimizer& optimizer, OptimizerStatePlan plan, bool restore_hyperparameters,
                                   const std::string& source = "<memory>");

}  // namespace coppice
