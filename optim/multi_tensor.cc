#include "optim/multi_tensor.h"

#include <map>

namespace coppice {
namespace {

// Filled by static initializers before main and read-only afterwards, so
// reads take no lock.
std::map<DeviceType, MultiTensorKernels>& registry() {
  static auto* r = new std::map<DeviceType, MultiTensorKernels>();
  return *r;
}

}  // namespace

void register_multi_tensor_kernels(DeviceType device, MultiTensorKernels kernels) { registry()[device] = kernels; }

const MultiTensorKernels* multi_tensor_kernels(DeviceType device) {
  auto it = registry().find(device);
  return it == registry().end() ? nullptr : &it->second;
}

}  // namespace coppice
