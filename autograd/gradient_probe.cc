#include "autograd/gradient_probe.h"

#include "tensor/error.h"

namespace coppice {

namespace {

// The engine (autograd/engine.h) runs backward on the calling thread, with
// no threads of its own, so the probe a thread opened is the one its
// products offer to; trainers on other threads open their own.
thread_local GradientProbe* open_probe = nullptr;

}  // namespace

GradientProbe::GradientProbe() {
  COPPICE_CHECK(open_probe == nullptr, "GradientProbe: another probe is already open on this thread");
  open_probe = this;
}

GradientProbe::~GradientProbe() {
  if (open_probe == this) open_probe = nullptr;
}

void GradientProbe::watch(const std::string& name, const Tensor& weight) {
  COPPICE_CHECK(weight.defined() && weight.is_sparse() && weight.dim() == 2, "GradientProbe: '", name,
                "' must be a sparse matrix");
  std::lock_guard<std::mutex> lock(mu_);
  COPPICE_CHECK(watched_.count(name) == 0, "GradientProbe: '", name, "' is already watched");
  watched_[name].weight = weight;
}

const GradientProbe::Factors& GradientProbe::factors(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watched_.find(name);
  COPPICE_CHECK(it != watched_.end(), "GradientProbe: '", name, "' is not watched");
  return it->second.factors;
}

void GradientProbe::offer(const Tensor& pattern, const Tensor& a, const Tensor& b) {
  GradientProbe* probe = open_probe;
  if (probe == nullptr) return;
  std::lock_guard<std::mutex> watched_lock(probe->mu_);
  for (auto& [name, w] : probe->watched_) {
    if (w.weight.is_same(pattern)) w.factors.emplace_back(a, b);
  }
}

}  // namespace coppice
