// Sparse to dense: every sparse weight becomes a dense one at a chosen step
// and training goes on dense (SPDF, Thangarasa et al. 2023, "SPDF: Sparse
// Pre-training and Dense Fine-tuning for Large Language Models"). The
// trainer does it after step densify_step - 1 (train/components.h).
//
// A densified weight holds its stored values where they were, bit for bit,
// and zeros at every position it did not store; the optimizer's state
// follows through ParameterStore::replace, as after a mask change
// (mask_change.h): the kept entries keep theirs (moments, master weights,
// the step count), the new ones start at zero (their master weights at
// their value, zero).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "optim/parameter_store.h"
#include "tensor/tensor.h"

namespace coppice {

struct Densified {
  Tensor param;  // dense, of the parameter's shape, dtype and device
  // i64 [numel] on the parameter's device: for each dense element (row-major),
  // the slot of values(param) it continues, or -1 where nothing was stored.
  Tensor keep_from;
};

// `param` (sparse, in any format with values) as a dense tensor and where
// its values came from; throws naming `op` for a dense or undefined one.
// Formed on the parameter's device: the slots are scattered as the values
// are (to_dense of the pattern holding slot + 1), so no entry is visited on
// the host.
Densified densify(const Tensor& param, const std::string& op = "densify");

// Every sparse parameter among `names` made dense through `store` (the
// model and the optimizer at once); dense ones are left alone. Returns, per
// parameter made dense, the entries it gained (numel - nnz).
std::map<std::string, int64_t> densify_parameters(ParameterStore& store, const std::vector<std::string>& names);

}  // namespace coppice
