// The job loader's checks across sections, against the model and against
// the data (train/config.cc runs them once every section has been read):
// settings that are each valid but cannot work together, lengths that must
// fit the training, and what the model and the data must agree on. Internal
// to train/.
#pragma once

#include <optional>
#include <string>

#include "train/config.h"
#include "train/config_section.h"

namespace coppice::job_config {

void check_combinations(const JobConfig& job);
void check_lengths(const JobConfig& job);
ValidatedJob check_against_model(JobConfig job);
// The rule that decides `name`: an exact rule over regex rules; null if none.
const ParameterRule* chosen_rule(const SparsitySchedule& sched, const std::string& name);
// The density a rule fixes by itself: its own, or its sparsifier's.
std::optional<double> fixed_density(const ParameterRule& r);

}  // namespace coppice::job_config
