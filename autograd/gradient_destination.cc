#include "autograd/gradient_destination.h"

namespace coppice {
namespace {

// The destinations of the node the engine is applying on this thread.
thread_local const std::vector<Tensor>* current_destinations = nullptr;

}  // namespace

const Tensor& gradient_destination(size_t input) {
  static const Tensor kNone;
  const std::vector<Tensor>* d = current_destinations;
  return d != nullptr && input < d->size() ? (*d)[input] : kNone;
}

GradientDestinationScope::GradientDestinationScope(const std::vector<Tensor>& destinations)
    : previous_(current_destinations) {
  current_destinations = &destinations;
}

GradientDestinationScope::~GradientDestinationScope() { current_destinations = previous_; }

}  // namespace coppice
