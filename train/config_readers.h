// The job loader's per-section readers (train/config.cc reads the job
// section by section with them): each reads its section of the YAML tree
// into JobConfig and refuses what is wrong within it, naming the key; checks
// across sections are train/config_checks.h's. Internal to train/.
#pragma once

#include "train/config.h"
#include "train/config_section.h"

namespace coppice::job_config {

PrecisionConfig read_precision(const Section& s);
void read_sparsity(const Section& sp, JobConfig& job);
void read_optimizer(const Section& o, OptimizerConfig& c);
void read_lr_schedule(const Section& s, double lr, LrScheduleConfig& c);
void read_mask_update(const Section& s, const JobConfig& job, MaskUpdateConfig& c);
void read_data(const Section& d, JobConfig& job);
void read_device(const Section& top, JobConfig& job);
void read_model(const Section& model, JobConfig& job);
void read_training(const Section& training, JobConfig& job);
void read_evaluation(const Section& eval, JobConfig& job);
void read_checkpoint_settings(const Section& ckpt, JobConfig& job);
void read_logging(const Section& log, JobConfig& job);
void read_distributed(const Section& dist, JobConfig& job);

}  // namespace coppice::job_config
