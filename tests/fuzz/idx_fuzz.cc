// Fuzz harness: the IDX reader (data/idx.h) on arbitrary bytes: gunzip when
// they start with gzip's magic, then parse_idx. Besides never crashing:
// whatever parse_idx accepts holds exactly numel * element size bytes and
// converts to a tensor of its dims.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/idx.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice;
  std::string bytes = fuzz::as_string(data, size);
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    absl::StatusOr<std::string> plain = gunzip(bytes, "fuzz.gz");
    if (!plain.ok()) {
      if (plain.status().message().empty()) fuzz::property_failed("a gunzip error without a message");
      return 0;
    }
    if (plain->size() > kIdxMaxBytes) fuzz::property_failed("gunzip returned more than kIdxMaxBytes");
    bytes = std::move(*plain);
  }
  absl::StatusOr<IdxArray> idx = parse_idx(bytes, "fuzz");
  if (!idx.ok()) {
    if (idx.status().message().empty()) fuzz::property_failed("a parse_idx error without a message");
    return 0;
  }
  const uint64_t want = static_cast<uint64_t>(idx->numel()) * idx_type_size(idx->type);
  if (idx->data.size() != want) fuzz::property_failed("data size is not numel * element size");
  if (idx->numel() <= fuzz::kMaxCheckedElements) {
    const Tensor t = idx->to_tensor();
    if (t.shape() != idx->dims) fuzz::property_failed("to_tensor changed the dims");
  }
  return 0;
}
