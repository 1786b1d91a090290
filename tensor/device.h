// Where a tensor lives: the CPU or one CUDA device.
#pragma once

#include <string>
#include <string_view>

namespace coppice {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCuda, index}; }

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string to_string() const;  // "cpu" or "cuda:N"

  // Parses "cpu", "cuda" (device 0) or "cuda:N"; throws coppice::Error otherwise.
  static Device parse(std::string_view text);

  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
};

std::string_view device_type_name(DeviceType t);

}  // namespace coppice
