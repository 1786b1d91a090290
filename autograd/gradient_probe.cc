#include "autograd/gradient_probe.h"

#include "tensor/error.h"

namespace coppice {

namespace {

std::mutex& open_mu() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

GradientProbe*& open_probe() {
  static GradientProbe* probe = nullptr;
  return probe;
}

}  // namespace

GradientProbe::GradientProbe() {
  std::lock_guard<std::mutex> lock(open_mu());
  COPPICE_CHECK(open_probe() == nullptr, "GradientProbe: another probe is already open");
  open_probe() = this;
}

GradientProbe::~GradientProbe() {
  std::lock_guard<std::mutex> lock(open_mu());
  if (open_probe() == this) open_probe() = nullptr;
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
  std::lock_guard<std::mutex> lock(open_mu());
  GradientProbe* probe = open_probe();
  if (probe == nullptr) return;
  std::lock_guard<std::mutex> watched_lock(probe->mu_);
  for (auto& [name, w] : probe->watched_) {
    if (w.weight.is_same(pattern)) w.factors.emplace_back(a, b);
  }
}

}  // namespace coppice
