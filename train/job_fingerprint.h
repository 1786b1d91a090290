// The fingerprint (train/fingerprint.h) of a job file's settings.
#pragma once

#include "sparsifiers/schedule.h"
#include "train/config.h"
#include "train/fingerprint.h"

namespace coppice {

// The fingerprint of `job` whose sparsity rules resolved to `resolved`
// (resolve_schedule over the model's parameters). Reads the dataset's files
// (bounded and opened safely by tensor/io/input_file.h) to record their sizes and CRC-32s; throws
// coppice::Error naming a file it cannot read.
Fingerprint job_fingerprint(const JobConfig& job, const SparsitySchedule& resolved);

}  // namespace coppice
