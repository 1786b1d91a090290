// Fuzz harness: parse_safetensors (tensor/io/safetensors.h) on arbitrary
// bytes. Besides never crashing: whatever it accepts, serialize_safetensors
// writes back, and the bytes written parse to the same tensors and metadata.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace coppice::fuzz {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t n = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  return n == 0 || std::memcmp(a.storage().data(), b.storage().data(), n) == 0;
}

}  // namespace
}  // namespace coppice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice;
  absl::StatusOr<SafetensorsFile> file = parse_safetensors(data, size, "fuzz");
  if (!file.ok()) {
    if (file.status().message().empty()) fuzz::property_failed("an error without a message");
    return 0;
  }
  absl::StatusOr<std::string> again = serialize_safetensors(file->tensors, file->metadata);
  if (!again.ok()) fuzz::property_failed("accepted but not written back: " + std::string(again.status().message()));
  absl::StatusOr<SafetensorsFile> reread = parse_safetensors(*again, "fuzz (written back)");
  if (!reread.ok()) fuzz::property_failed("written back but not re-read: " + std::string(reread.status().message()));
  if (reread->metadata != file->metadata) fuzz::property_failed("metadata changed in a round trip");
  if (reread->tensors.size() != file->tensors.size()) fuzz::property_failed("tensor count changed in a round trip");
  for (size_t i = 0; i < file->tensors.size(); ++i) {
    if (reread->tensors[i].first != file->tensors[i].first ||
        !fuzz::same_bytes(reread->tensors[i].second, file->tensors[i].second)) {
      fuzz::property_failed("tensor '" + file->tensors[i].first + "' changed in a round trip");
    }
  }
  return 0;
}
