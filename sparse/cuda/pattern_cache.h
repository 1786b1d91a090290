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

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "sparse/sparse_impl.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// An index part of `t` that every tensor of its pattern shares (with_values
// and the same-device to() keep it): while it lives, the pattern may be used
// again. `t` must be sparse.
Tensor pattern_anchor(const Tensor& t);

// Which pattern: its version, format, shape and device.
struct PatternKey {
  uint64_t version = 0;
  std::string format;
  Shape shape;
  Device device = Device::cpu();

  static PatternKey of(const Tensor& t) { return {pattern_version(t), std::string(t.format()), t.shape(), t.device()}; }
  bool operator==(const PatternKey& o) const {
    return version == o.version && device == o.device && format == o.format && shape == o.shape;
  }
};

template <typename V>
class PatternCache {
 public:
  static constexpr size_t kMaxEntries = 4096;

  // The value cached for `pattern`'s pattern, or build() cached for it
  // while the pattern's anchor (pattern_anchor) lives.
  template <typename Build>
  V get(const Tensor& pattern, Build build) {
    const PatternKey key = PatternKey::of(pattern);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (const V* v = find(key)) return *v;
    }
    V built = build();
    std::lock_guard<std::mutex> lock(mutex_);
    if (const V* v = find(key)) return *v;
    drop_dead_patterns();
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());  // any one: a runaway's guard
    entries_.emplace(key.version, Entry{key, pattern_anchor(pattern).impl_ptr(), built});
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

  const V* find(const PatternKey& key) const {
    auto [begin, end] = entries_.equal_range(key.version);
    for (auto it = begin; it != end; ++it) {
      if (it->second.key == key) return &it->second.value;
    }
    return nullptr;
  }

  void drop_dead_patterns() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.anchor.expired() ? entries_.erase(it) : std::next(it);
    }
  }

  std::mutex mutex_;
  std::unordered_multimap<uint64_t, Entry> entries_;  // by pattern version
};

}  // namespace coppice::sparse_cuda
