#include <cub/device/device_radix_sort.cuh>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/sort.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

namespace coppice::cuda {
namespace {

template <typename K>
void sort_impl(SortBuffers<K>& buffers, int n, int end_bit, Device device) {
  if (n <= 1) return;
  cub::DoubleBuffer<K> keys(buffers.keys[buffers.current_key], buffers.keys[1 - buffers.current_key]);
  cub::DoubleBuffer<int32_t> values(buffers.values[buffers.current_value], buffers.values[1 - buffers.current_value]);
  cudaStream_t stream = current_stream(device.index);
  size_t temp_bytes = 0;
  COPPICE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, values, n, 0, end_bit, stream),
                     "radix sort");
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, TensorOptions(DType::kU8, device));
  COPPICE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys, values, n, 0, end_bit, stream),
                     "radix sort");
  // `temp` goes back to the cache now; work queued later on the same stream
  // runs after the sort, so reusing the block is safe (stream.h).
  if (keys.Current() != buffers.keys[buffers.current_key]) buffers.current_key = 1 - buffers.current_key;
  if (values.Current() != buffers.values[buffers.current_value]) buffers.current_value = 1 - buffers.current_value;
}

}  // namespace

void radix_sort_pairs(SortBuffers<uint32_t>& buffers, int n, int end_bit, Device device) {
  sort_impl(buffers, n, end_bit, device);
}
void radix_sort_pairs(SortBuffers<uint64_t>& buffers, int n, int end_bit, Device device) {
  sort_impl(buffers, n, end_bit, device);
}

int bits_for(uint64_t max_value) {
  int bits = 1;
  while (bits < 64 && (uint64_t{1} << bits) <= max_value) ++bits;
  return bits;
}

}  // namespace coppice::cuda
