// What a fused kernel may ask of an inline sparsifier.
//
// The Sparsifier interface decides on whole tensors (keep_mask), which a
// kernel that produces values one at a time cannot call without
// materializing its output first. A sparsifier whose decision for an entry
// depends on that entry's value alone can say so here, and a fused kernel
// (fused_relu.h: CPU and CUDA) then applies it while producing the value. Sparsifiers that do not
// implement it still work: the op falls back to sparsifying after the kernel.
#pragma once

#include "sparsifiers/builtin.h"
#include "sparsifiers/sparsifier.h"

namespace coppice {

// Keeps exactly the entries with |x| > threshold(), unscaled. Applied to
// relu's output this keeps relu(x) > threshold(), which for threshold() >= 0
// is x > threshold() (fused_relu.h fuses it so, on the CPU and on CUDA);
// a fused kernel declines a negative threshold (|y| > t < 0 keeps every
// entry, zeros too, which a kernel storing only kept entries cannot give).
class ThresholdFusable {
 public:
  virtual ~ThresholdFusable() = default;
  virtual double threshold() const = 0;
};

// The threshold a fused kernel may apply for `s`, or false when there is
// none: 0 for null (keep-all into a sparse format stores the non-zeros),
// else the threshold of a ThresholdFusable or of the built-in
// ThresholdSparsifier, provided it does not rescale.
inline bool fusable_threshold(const Sparsifier* s, double* threshold) {
  if (s == nullptr) {
    *threshold = 0.0;
    return true;
  }
  if (s->value_scale() != 1.0) return false;
  if (const auto* f = dynamic_cast<const ThresholdFusable*>(s)) {
    *threshold = f->threshold();
    return true;
  }
  if (const auto* b = dynamic_cast<const ThresholdSparsifier*>(s)) {
    *threshold = b->threshold();
    return true;
  }
  return false;
}

}  // namespace coppice
