// A small LRU of things derived from a sparse pattern on the device (the CSR
// view of csr_view.h, the row order of csr_row_order.h, the block-column
// index of bsr_products.cc), keyed by the pattern: equal pattern versions mean
// equal patterns (sparse_impl.h). Building runs outside the lock (it may copy
// to or from the device); two threads that miss together both build, and the
// first to insert wins.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <utility>

#include "sparse/sparse_impl.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// Format, pattern version, shape and device of `t`.
inline std::string pattern_key(const Tensor& t) {
  return str_cat(t.format(), "|v", pattern_version(t), "|", shape_to_string(t.shape()), "|", t.device().to_string());
}

template <typename V>
class PatternCache {
 public:
  static constexpr size_t kCapacity = 32;

  // The value cached for `key`, or build() cached under it (the oldest entry
  // goes past kCapacity).
  template <typename Build>
  V get(const std::string& key, Build build) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->first == key) {
          entries_.splice(entries_.begin(), entries_, it);
          return it->second;
        }
      }
    }
    V built = build();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [k, v] : entries_) {
      if (k == key) return v;
    }
    entries_.emplace_front(key, built);
    if (entries_.size() > kCapacity) entries_.pop_back();
    return built;
  }

 private:
  std::mutex mutex_;
  std::list<std::pair<std::string, V>> entries_;
};

}  // namespace coppice::sparse_cuda
