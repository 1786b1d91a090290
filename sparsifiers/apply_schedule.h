// Applying a SparsitySchedule (schedule.h) to a model, given as its named
// parameters and the names of its modules (models/ is a higher layer: a
// Module hands these over, and asks output_rule(name) at forward time).
//
// Every error is found here, before training, and thrown as one
// coppice::Error line that names the rule: a selector that selects nothing,
// a regex that does not parse, one name selected by two rules of the same
// kind with different settings (an exact rule wins over regex rules, see
// schedule.h), an unknown sparsifier or a bad parameter of one (through the
// registry), a format that cannot hold what the sparsifier produces
// (Sparsifier::format_mismatch), a density outside (0, 1] or one that
// contradicts the sparsifier's sparsity.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "sparsifiers/schedule.h"
#include "sparsifiers/sparsified_op.h"

namespace coppice {

using NamedParameters = std::vector<std::pair<std::string, Variable>>;

struct ScheduledParameter {
  std::string name;
  // A new leaf holding the sparsified value in the rule's format (requires
  // grad as the old one did), or the old Variable when no rule selects it.
  Variable value;
  std::optional<size_t> rule;  // index into SparsitySchedule::parameters
  std::optional<double> density;
  SparsifierPtr sparsifier;  // the initial sparsifier (null: only converted)
};

// A module's sparsified op settings, with its own sparsifier instances (a
// stateful sparsifier, movement, keeps state per module).
struct OutputSparsity {
  size_t rule = 0;  // index into SparsitySchedule::outputs
  std::vector<ValueSparsity> forward;
  std::vector<ValueSparsity> backward;

  // `op` wrapped with these settings.
  SparsifiedOp sparsified(OpFn op) const { return SparsifiedOp(std::move(op), forward, backward); }
};

class AppliedSchedule {
 public:
  // Every parameter, in the order given, selected or not.
  const std::vector<ScheduledParameter>& parameters() const { return parameters_; }
  // The parameter called `name` (throws naming it when there is none).
  const ScheduledParameter& parameter(const std::string& name) const;
  // The settings for module `module`'s outputs, or null when no rule selects it.
  const OutputSparsity* output_rule(const std::string& module) const;

 private:
  friend AppliedSchedule apply_schedule(const SparsitySchedule&, const NamedParameters&,
                                        const std::vector<std::string>&, const SparsifyContext&);
  std::vector<ScheduledParameter> parameters_;
  std::unordered_map<std::string, OutputSparsity> outputs_;
};

// The checks of apply_schedule without touching any tensor.
void check_schedule(const SparsitySchedule& schedule, const std::vector<std::string>& parameter_names,
                    const std::vector<std::string>& module_names);

// Checks, then sparsifies each selected parameter once with its rule's
// initial sparsifier into its format. `ctx` seeds random sparsifiers; each
// parameter draws with ctx.purpose mixed with a hash of its name, so that the
// same schedule gives the same masks on every rank.
AppliedSchedule apply_schedule(const SparsitySchedule& schedule, const NamedParameters& parameters,
                               const std::vector<std::string>& module_names, const SparsifyContext& ctx = {});

}  // namespace coppice
