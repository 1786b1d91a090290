// Stable device-wide radix sort of (key, value) pairs (CUB), shared by topk
// and scatter_add so that CUB is compiled once.
#pragma once

#include <cstdint>

#include "tensor/device.h"

namespace coppice::cuda {

// Two buffers each for keys and values; the data to sort is in buffer
// `current` of each, and after radix_sort_pairs the sorted data is there too.
template <typename K>
struct SortBuffers {
  K* keys[2] = {nullptr, nullptr};
  int32_t* values[2] = {nullptr, nullptr};
  int current_key = 0;
  int current_value = 0;
};

// Sorts `n` pairs by the low `end_bit` bits of the keys, ascending and stable,
// on `device`'s stream; temporary memory comes from the caching allocator.
void radix_sort_pairs(SortBuffers<uint32_t>& buffers, int n, int end_bit, Device device);
void radix_sort_pairs(SortBuffers<uint64_t>& buffers, int n, int end_bit, Device device);

// The number of bits needed to hold every value in [0, max_value].
int bits_for(uint64_t max_value);

}  // namespace coppice::cuda
