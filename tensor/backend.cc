#include "tensor/backend.h"

#include <array>
#include <cstring>

#include "tensor/error.h"
#include "tensor/generator.h"

namespace coppice {
namespace {
std::array<DeviceBackend*, 2>& backends() {
  static std::array<DeviceBackend*, 2> table{nullptr, nullptr};
  return table;
}
}  // namespace

void register_backend(DeviceType type, DeviceBackend* backend) { backends()[static_cast<size_t>(type)] = backend; }

DeviceBackend* find_backend(DeviceType type) { return backends()[static_cast<size_t>(type)]; }

DeviceBackend& backend_for(Device device) {
  DeviceBackend* b = find_backend(device.type);
  COPPICE_CHECK(b != nullptr, "device ", device.to_string(), ": this build of Coppice has no ",
                device_type_name(device.type), " backend (built without CUDA; run tools/setup where nvcc exists)");
  int count = b->device_count();
  COPPICE_CHECK(device.index >= 0 && device.index < count, "device ", device.to_string(), ": no such device (", count,
                " visible)");
  return *b;
}

void copy_pieces_on_host(const PieceCopy& copy) {
  char* dst = static_cast<char*>(copy.dst);
  for (size_t k = 0; k < copy.src.size(); ++k) {
    const char* src = static_cast<const char*>(copy.src[k]);
    const int64_t n = copy.row_bytes[k];
    for (int64_t r = 0; r < copy.rows; ++r) {
      std::memcpy(dst + r * copy.dst_row_bytes + copy.col_bytes[k], src + r * n, static_cast<size_t>(n));
    }
  }
}

int cuda_device_count() {
  DeviceBackend* b = find_backend(DeviceType::kCuda);
  return b == nullptr ? 0 : b->device_count();
}

bool cuda_available() { return cuda_device_count() > 0; }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return backend_for(device).allocator(device.index);
}

void synchronize(Device device) {
  if (device.is_cuda()) backend_for(device).synchronize(device.index);
}

std::unique_ptr<CapturedWork> capture_work(Device device, const std::function<void()>& fn, std::string* why_not) {
  if (device.is_cpu()) {
    *why_not = "the CPU has no graph capture";
    return nullptr;
  }
  const uint64_t draws = Generator::draws_on_this_thread();
  std::unique_ptr<CapturedWork> work = backend_for(device).capture(device.index, fn, why_not);
  if (work != nullptr && Generator::draws_on_this_thread() != draws) {
    *why_not = "the work draws random numbers (dropout, a random sparsifier), which a replay would repeat";
    return nullptr;
  }
  return work;
}

void DeviceBackend::run_in_foreign_capture(int /*index*/, void* /*stream*/, const std::function<void()>& /*fn*/) {
  fail("graph capture: this device has no graph capture");
}

void run_in_foreign_capture(Device device, void* stream, const std::function<void()>& fn) {
  COPPICE_CHECK(!device.is_cpu(), "graph capture: the CPU has no graph capture");
  backend_for(device).run_in_foreign_capture(device.index, stream, fn);
}

void run_beside(Device device, const std::function<void()>& first, const std::function<void()>& second) {
  if (device.is_cpu()) {
    first();
    second();
    return;
  }
  backend_for(device).run_beside(device.index, first, second);
}

void join_beside(Device device) {
  if (device.is_cpu()) return;
  backend_for(device).join_beside(device.index);
}

}  // namespace coppice
