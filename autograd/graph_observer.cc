#include "autograd/graph_observer.h"

namespace coppice {
namespace {
thread_local GraphObserver* current_observer = nullptr;
}  // namespace

GraphObserver* graph_observer() { return current_observer; }

ScopedGraphObserver::ScopedGraphObserver(GraphObserver* observer) : previous_(current_observer) {
  current_observer = observer;
}

ScopedGraphObserver::~ScopedGraphObserver() { current_observer = previous_; }

}  // namespace coppice
