// What coppice.optim.MaskUpdater (bind_optim.cc: prune and regrow over a
// model and its optimizer) and coppice.optim.PatternUpdater
// (bind_pattern_update.cc: the same selection over plain tensors) share: the
// schedule's keywords turned into a MaskUpdaterConfig, and the updater's own
// state (optim/mask_state.h) as a dict of name to Tensor. Defined in
// bind_optim.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "optim/mask_state.h"
#include "optim/mask_updater.h"
#include "python/bindings.h"

namespace coppice::python {

// The keywords both classes take besides what they update, as a validated
// config: drop_schedule by name, prune "magnitude", "movement" or a criterion
// registered from Python (coppice.register_prune_criterion), growth a
// registered policy. A bad one raises coppice.Error; `who` ("MaskUpdater")
// names the class in what this file adds to optim/'s messages.
MaskUpdaterConfig updater_config(const char* who, int64_t start_step, int64_t end_step, int64_t interval,
                                 double drop_fraction, const std::string& drop_schedule, const std::string& prune,
                                 const std::string& growth, bool allow_regrow_dropped, uint64_t seed);

// MaskState::state_tensors as a dict of name to Tensor copies (what a trainer
// checkpoint keeps as "updater.<key>").
py::dict mask_state_dict(const MaskState& state);

// Restores a dict from mask_state_dict (arrays are taken for Tensors) into
// `state` after checking all of it (MaskState::check_state_tensors, with
// `params`: layer name -> the parameter the layer holds now, when given);
// the first missing, unknown or mismatched entry raises coppice.Error that
// begins with `who` ("MaskUpdater.load_state_dict"), and nothing changes.
void load_mask_state_dict(MaskState& state, const py::object& state_dict, const std::map<std::string, Tensor>* params,
                          const std::string& who);

}  // namespace coppice::python
