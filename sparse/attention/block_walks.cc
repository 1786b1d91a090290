#include "sparse/attention/block_walks.h"

#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "sparse/bsr.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// The key-block walk: for each key block, the query blocks that keep it, in
// increasing order (a counting sort of the stored blocks by block column),
// and where each entry of the query-block walk lands in it.
AttentionBlockWalks walks_of(const BsrImpl& b) {
  const int64_t blocks = b.block_row_count();
  const std::vector<int32_t> row_ptr = b.crow_indices().to_vector<int32_t>();
  const std::vector<int32_t> col_idx = b.col_indices().to_vector<int32_t>();
  std::vector<int32_t> col_ptr(static_cast<size_t>(blocks) + 1, 0), row_idx(col_idx.size()), col_entry(col_idx.size());
  for (const int32_t j : col_idx) ++col_ptr[static_cast<size_t>(j) + 1];
  for (int64_t j = 0; j < blocks; ++j) col_ptr[j + 1] += col_ptr[j];
  std::vector<int32_t> next(col_ptr.begin(), col_ptr.end() - 1);
  for (int64_t i = 0; i < blocks; ++i) {
    for (int32_t e = row_ptr[i]; e < row_ptr[i + 1]; ++e) {
      const int32_t at = next[col_idx[e]]++;
      row_idx[at] = static_cast<int32_t>(i);
      col_entry[e] = at;
    }
  }
  const Device device = b.crow_indices().device();
  auto on_device = [&](const std::vector<int32_t>& v) {
    return from_vector(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::kI32)).to(device);
  };
  return {b.crow_indices(), b.col_indices(), on_device(col_ptr), on_device(row_idx), on_device(col_entry)};
}

// Walks by pattern (format, version, shape, device), each kept while the
// tensor it was formed for lives: a model's layers each hold their pattern
// for the whole run, and no fixed capacity evicts one of them.
class WalksCache {
 public:
  std::shared_ptr<const AttentionBlockWalks> get(const Tensor& pattern) {
    const std::string key = str_cat(pattern.format(), "|v", pattern_version(pattern), "|",
                                    shape_to_string(pattern.shape()), "|", pattern.device().to_string());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      entries_.remove_if([](const Entry& e) { return e.owner.expired(); });
      for (const Entry& e : entries_) {
        if (e.key == key) return e.walks;
      }
    }
    // Built outside the lock (it copies to and from the device); two threads
    // that miss together both build, and both results are equal.
    auto walks = std::make_shared<const AttentionBlockWalks>(walks_of(*pattern.impl_as<BsrImpl>()));
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({key, pattern.impl_ptr(), walks});
    return walks;
  }

 private:
  struct Entry {
    std::string key;
    std::weak_ptr<TensorImpl> owner;
    std::shared_ptr<const AttentionBlockWalks> walks;
  };
  std::mutex mutex_;
  std::list<Entry> entries_;
};

}  // namespace

std::shared_ptr<const AttentionBlockWalks> attention_block_walks(const Tensor& pattern) {
  static auto* cache = new WalksCache();  // never destroyed: kernels may run during static destruction
  return cache->get(pattern);
}

}  // namespace coppice
