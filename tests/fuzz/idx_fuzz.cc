// Fuzz harness: the IDX reader (data/idx.h) on arbitrary bytes: gunzip when
// they start with gzip's magic, then parse_idx. Besides never crashing:
// whatever parse_idx accepts holds exactly numel * element size bytes and
// converts to a tensor of its dims, and the streaming reader (read_idx_from
// over a GzipSource, which decompresses only what the header promises)
// accepts exactly what gunzip and parse_idx accept, with the same data.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "data/gzip_source.h"
#include "data/idx.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
// What gunzip may inflate here: far beyond any input's promise that the
// streaming reader could accept (kIdxMaxBytes would cost 2 GiB per bomb).
constexpr uint64_t kFuzzGunzipMaxBytes = uint64_t{64} << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coppice;
  std::string bytes = fuzz::as_string(data, size);
  std::optional<absl::StatusOr<IdxArray>> streamed;
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    MemorySource compressed(bytes);
    GzipSource inflated(compressed, "idx fuzz.gz");
    streamed = read_idx_from(inflated, "fuzz.gz");
    if (!streamed->ok() && streamed->status().message().empty())
      fuzz::property_failed("a streaming read error without a message");
    absl::StatusOr<std::string> plain = gunzip(bytes, "fuzz.gz", kFuzzGunzipMaxBytes);
    if (!plain.ok()) {
      if (plain.status().message().empty()) fuzz::property_failed("a gunzip error without a message");
      if (streamed->ok()) fuzz::property_failed("the streaming reader accepted what gunzip refuses");
      return 0;
    }
    if (plain->size() > kFuzzGunzipMaxBytes) fuzz::property_failed("gunzip returned more than its limit");
    bytes = std::move(*plain);
  }
  absl::StatusOr<IdxArray> idx = parse_idx(bytes, "fuzz");
  if (streamed && streamed->ok() != idx.ok()) fuzz::property_failed("the streaming reader and parse_idx disagree");
  if (streamed && idx.ok() && (**streamed).data != idx->data)
    fuzz::property_failed("the streaming reader read other data");
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
