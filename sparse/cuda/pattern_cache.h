// A cache of things derived from a sparse pattern on the device (the CSR view
// of csr_view.h, the row order of csr_row_order.h, the block-column index of
// bsr_products.cc, the n:m metadata words), keyed by the pattern: equal
// pattern versions mean equal patterns (sparse_impl.h), and the key adds the
// format, shape and device, since a transposed view keeps its source's
// version. Building runs outside the lock (it may copy to or from the
// device); two threads that miss together both build, and the first to
// insert wins.
//
// An entry lives as long as its pattern, not by recency: it watches an index
// part that every tensor of the pattern shares (pattern_anchor), and the
// entries whose anchor has gone are dropped at the next insertion. An LRU of
// 32 entries used to bound it instead, and a model with more sparse weights
// than that (a 9-layer GPT with its four block linears sparse) missed on
// every call, each miss a synchronous copy to the host: its step took 30 ms
// where 8 layers took 21 (docs/benchmarks.md, "Pattern caches"). kMaxEntries
// only bounds a runaway: it is far above any model's live patterns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sparse/sparse_impl.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// An index part of `t` that every tensor of its pattern shares (with_values
// and the same-device to() keep it): while it lives, the pattern may be used
// again. `t` must be sparse.
Tensor pattern_anchor(const Tensor& t);

// Which pattern (version, format, shape, device) and, for a cache whose
// entries also depend on something else, `detail`.
struct PatternKey {
  uint64_t version = 0;
  std::string format;
  Shape shape;
  Device device = Device::cpu();
  int64_t detail = 0;

  static PatternKey of(const Tensor& t, int64_t detail = 0) {
    return {pattern_version(t), std::string(t.format()), t.shape(), t.device(), detail};
  }
  bool operator==(const PatternKey& o) const {
    return version == o.version && detail == o.detail && device == o.device && format == o.format && shape == o.shape;
  }
};

template <typename V>
class PatternCache {
 public:
  static constexpr size_t kMaxEntries = 4096;

  // The value cached for `key`, or build() cached under it while `anchor`
  // (pattern_anchor of the key's tensor) lives.
  template <typename Build>
  V get(const PatternKey& key, const Tensor& anchor, Build build) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Entry& e : entries_) {
        if (e.key == key) return e.value;
      }
    }
    V built = build();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : entries_) {
      if (e.key == key) return e.value;
    }
    drop_dead_patterns();
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());  // the oldest
    entries_.push_back({key, anchor.impl_ptr(), built});
    return built;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  struct Entry {
    PatternKey key;
    std::weak_ptr<TensorImpl> anchor;
    V value;
  };

  void drop_dead_patterns() {
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.anchor.expired(); }),
                   entries_.end());
  }

  std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace coppice::sparse_cuda
