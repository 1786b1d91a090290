#include "tensor/device.h"

#include <charconv>

#include "tensor/error.h"

namespace coppice {

std::string_view device_type_name(DeviceType t) { return t == DeviceType::kCpu ? "cpu" : "cuda"; }

std::string Device::to_string() const { return is_cpu() ? "cpu" : str_cat("cuda:", index); }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:") {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0) {
      return cuda(index);
    }
  }
  fail("device: cannot parse '", text, "'; expected 'cpu', 'cuda' or 'cuda:N'");
}

}  // namespace coppice
