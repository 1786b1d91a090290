// What a checkpoint keeps of the method that drives the masks, beyond the
// parameters themselves (train/checkpoint.h saves it as "updater.<key>"):
// the prune-and-regrow updater's ITOP record and movement scores
// (mask_updater.h), SR-STE's masks (sr_ste.h).
#pragma once

#include <map>
#include <string>

#include "tensor/tensor.h"

namespace coppice {

class MaskState {
 public:
  virtual ~MaskState() = default;

  // The state as named tensors.
  virtual std::map<std::string, Tensor> state_tensors() const = 0;
  // The checks load_state_tensors makes before it changes anything; with
  // `params` (layer name -> the parameter the layer will hold), also against
  // those. Throws coppice::Error naming the first missing or mismatched entry.
  virtual void check_state_tensors(const std::map<std::string, Tensor>& state,
                                   const std::map<std::string, Tensor>* params) const = 0;
  // Restores what state_tensors gave (checking it first).
  virtual void load_state_tensors(const std::map<std::string, Tensor>& state) = 0;
};

}  // namespace coppice
