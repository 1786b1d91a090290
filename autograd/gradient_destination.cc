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

bool is_written_into(const Tensor& grad, const Tensor& destination) {
  return destination.defined() && grad.is_dense() && grad.is_contiguous() &&
         grad.data_ptr() == destination.data_ptr() && grad.shape() == destination.shape() &&
         grad.dtype() == destination.dtype() && grad.device() == destination.device();
}

GradientDestinationScope::GradientDestinationScope(const std::vector<Tensor>& destinations)
    : previous_(current_destinations) {
  current_destinations = &destinations;
}

GradientDestinationScope::~GradientDestinationScope() { current_destinations = previous_; }

}  // namespace coppice
