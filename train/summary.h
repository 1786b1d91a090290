// A training run's summary as text for people (format_summary) and as the
// closing record of the metrics file (summary_json).
#pragma once

#include <string>

#include "train/components.h"
#include "train/metrics.h"

namespace coppice {

// The summary as readable lines (test accuracy, per-layer densities,
// parameters and Linear FLOPs dense vs sparse, fallbacks, peak memory).
std::string format_summary(const TrainingSummary& summary);
JsonObject summary_json(const TrainingSummary& summary);

}  // namespace coppice
