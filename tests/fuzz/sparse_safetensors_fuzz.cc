// Fuzz harness: parse_sparse_safetensors (sparse/io/sparse_safetensors.h) on
// arbitrary bytes. Besides never crashing: every tensor it accepts converts
// to dense (its parts passed the format's validation, so every index is in
// range), and serialize_sparse_safetensors writes the file back to bytes
// that parse to the same names, formats, shapes and metadata.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sparse/io/sparse_safetensors.h"
#include "sparse/sparse_impl.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice;
  absl::StatusOr<SparseSafetensorsFile> file = parse_sparse_safetensors(fuzz::as_string(data, size), "fuzz");
  if (!file.ok()) {
    if (file.status().message().empty()) fuzz::property_failed("an error without a message");
    return 0;
  }
  for (const auto& [name, t] : file->tensors) {
    if (t.numel() > fuzz::kMaxCheckedElements) continue;
    try {
      const Tensor dense = to_dense(t);
      if (dense.shape() != t.shape()) fuzz::property_failed("'" + name + "': to_dense changed the shape");
    } catch (const std::exception& e) {
      fuzz::property_failed("'" + name + "' was accepted but does not convert to dense: " + e.what());
    }
  }
  absl::StatusOr<std::string> again = serialize_sparse_safetensors(file->tensors, file->metadata);
  if (!again.ok()) fuzz::property_failed("accepted but not written back: " + std::string(again.status().message()));
  absl::StatusOr<SparseSafetensorsFile> reread = parse_sparse_safetensors(*again, "fuzz (written back)");
  if (!reread.ok()) fuzz::property_failed("written back but not re-read: " + std::string(reread.status().message()));
  if (reread->metadata != file->metadata) fuzz::property_failed("metadata changed in a round trip");
  if (reread->tensors.size() != file->tensors.size()) fuzz::property_failed("tensor count changed in a round trip");
  for (size_t i = 0; i < file->tensors.size(); ++i) {
    const auto& [name, t] = file->tensors[i];
    const auto& [name2, t2] = reread->tensors[i];
    if (name2 != name || t2.format() != t.format() || t2.shape() != t.shape() || t2.dtype() != t.dtype()) {
      fuzz::property_failed("'" + name + "' changed in a round trip");
    }
  }
  return 0;
}
