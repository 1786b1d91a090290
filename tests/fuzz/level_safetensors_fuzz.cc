// Fuzz harness: level tensors in safetensors files (sparse/levels/level_io.h)
// from arbitrary bytes: parse_safetensors, then level_tensors_of, which reads
// each declaration's text and checks its parts. Besides never crashing:
// every refusal has a message, every level tensor it accepts (of a size worth
// checking) has a dense form of its shape, and writing the accepted tensors
// back gives bytes that read to the same declarations and parts.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "sparse/levels/level_io.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

bool same_bytes(const coppice::Tensor& a, const coppice::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const coppice::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * coppice::dtype_size(ca.dtype())) ==
         0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice;
  using namespace coppice::levels;
  const absl::StatusOr<SafetensorsFile> file = parse_safetensors(fuzz::as_string(data, size), "fuzz");
  if (!file.ok()) return 0;
  const absl::StatusOr<std::map<std::string, LevelTensor>> read = level_tensors_of(*file, "fuzz");
  if (!read.ok()) {
    if (read.status().message().empty()) fuzz::property_failed("a refusal without a message");
    return 0;
  }
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  for (const auto& [name, t] : *read) {
    if (shape_numel(t.shape) <= fuzz::kMaxCheckedElements) {
      try {
        if (level_to_dense(t).shape() != t.shape) fuzz::property_failed("'" + name + "': the dense form's shape");
      } catch (const std::exception& e) {
        fuzz::property_failed("'" + name + "' was accepted but has no dense form: " + e.what());
      }
    }
    add_level_tensor(name, t, tensors, metadata);
  }
  const absl::StatusOr<std::string> again = serialize_safetensors(tensors, metadata);
  if (!again.ok()) fuzz::property_failed("accepted but not written back: " + std::string(again.status().message()));
  const absl::StatusOr<SafetensorsFile> file2 = parse_safetensors(*again, "fuzz (written back)");
  if (!file2.ok()) fuzz::property_failed("written back but not parsed: " + std::string(file2.status().message()));
  const auto reread = level_tensors_of(*file2, "fuzz (written back)");
  if (!reread.ok()) fuzz::property_failed("written back but refused: " + std::string(reread.status().message()));
  if (reread->size() != read->size()) fuzz::property_failed("the tensor count changed in a round trip");
  for (const auto& [name, t] : *read) {
    const auto it = reread->find(name);
    if (it == reread->end() || describe(it->second.format) != describe(t.format) || it->second.shape != t.shape) {
      fuzz::property_failed("'" + name + "' changed its declaration or shape in a round trip");
    }
    const auto a = level_parts(t), b = level_parts(it->second);
    if (a.size() != b.size()) fuzz::property_failed("'" + name + "' changed its parts in a round trip");
    for (const auto& [part, tensor] : a) {
      const auto p = b.find(part);
      if (p == b.end() || !same_bytes(tensor, p->second)) {
        std::string what = "'" + name;
        what += "." + part + "' changed in a round trip";
        fuzz::property_failed(what);
      }
    }
  }
  return 0;
}
