// The CUDA caching allocator: size classes, reuse without cudaMalloc, counters.
#include "tensor/cuda/caching_allocator.h"

#include <limits>
#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;
using cuda::CachingAllocator;

TEST(CachingAllocatorTest, SizeClasses) {
  COPPICE_REQUIRE_GPU();
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::round_size((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(CachingAllocator::round_size((5 << 20) + 3), size_t{6} << 20);
}

TEST(CachingAllocatorTest, SmallTensorsReuseCachedBlocks) {
  COPPICE_REQUIRE_GPU();
  Allocator& alloc = allocator_for(gpu());
  // Warm the few size classes used below, then count.
  for (int64_t n : {1, 100, 1000}) Tensor::empty({n}, TensorOptions(DType::kF32, gpu()));
  const AllocatorStats before = alloc.stats();
  for (int i = 0; i < 10000; ++i) {
    Tensor a = Tensor::empty({1 + i % 100}, TensorOptions(DType::kF32, gpu()));    // 4..400 B: one class
    Tensor b = Tensor::empty({1000 - i % 3}, TensorOptions(DType::kF32, gpu()));   // ~4 KB: one class
    Tensor c = Tensor::empty({i % 2 ? 7 : 9}, TensorOptions(DType::kI64, gpu()));  // 56 / 72 B
  }
  const AllocatorStats after = alloc.stats();
  EXPECT_LE(after.system_allocations - before.system_allocations, 4)
      << "10,000 cycles of small tensors should reuse cached blocks";
  EXPECT_EQ(after.allocations - before.allocations, 30000);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
}

TEST(CachingAllocatorTest, AllocatedPeakAndEmptyCache) {
  COPPICE_REQUIRE_GPU();
  Allocator& alloc = allocator_for(gpu());
  alloc.reset_peak();
  const AllocatorStats s0 = alloc.stats();
  EXPECT_EQ(s0.peak_allocated_bytes, s0.allocated_bytes);
  constexpr size_t kBig = (3 << 20) + 5;  // a large block: 4 MiB class
  {
    void* p = alloc.allocate(kBig);
    void* q = alloc.allocate(1000);
    const AllocatorStats s1 = alloc.stats();
    EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes + static_cast<int64_t>(kBig) + 1000);
    EXPECT_GE(s1.peak_allocated_bytes, s1.allocated_bytes);
    EXPECT_GE(s1.reserved_bytes, s1.allocated_bytes);
    alloc.deallocate(p, kBig);
    alloc.deallocate(q, 1000);
  }
  const AllocatorStats s2 = alloc.stats();
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(s2.peak_allocated_bytes, s0.allocated_bytes + static_cast<int64_t>(kBig) + 1000);
  // The freed block serves the same request again without cudaMalloc.
  void* again = alloc.allocate(kBig);
  EXPECT_EQ(alloc.stats().system_allocations, s2.system_allocations);
  alloc.deallocate(again, kBig);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, s2.allocated_bytes);
  // empty_cache returns every cached block; live ones stay.
  Tensor live = Tensor::empty({10}, TensorOptions(gpu()));
  alloc.empty_cache();
  const AllocatorStats s3 = alloc.stats();
  EXPECT_GT(s3.system_frees, s2.system_frees);
  EXPECT_LT(s3.reserved_bytes, s2.reserved_bytes);  // the 4 MiB block went back
  EXPECT_GE(s3.reserved_bytes, static_cast<int64_t>(CachingAllocator::round_size(40)));
  live.fill_(1);
  EXPECT_EQ(live.to(Device::cpu()).to_vector<float>(), std::vector<float>(10, 1.0f));
}

// A block freed while holds are open stays out of the cache under the
// latest hold; releasing a hold returns its blocks and every earlier hold's,
// not a later one's.
TEST(CachingAllocatorTest, HeldFreesAreReusedOnlyAfterTheirHoldIsReleased) {
  COPPICE_REQUIRE_GPU();
  CachingAllocator& alloc = cuda::caching_allocator(0);
  constexpr size_t kBytes = size_t{37} << 20;  // a size class nothing else in the binary caches
  void* p = alloc.allocate(kBytes);
  void* p2 = alloc.allocate(kBytes);
  const uint64_t first = alloc.hold_frees();
  alloc.deallocate(p, kBytes);  // under the first hold
  const uint64_t second = alloc.hold_frees();
  EXPECT_GT(second, first);
  alloc.deallocate(p2, kBytes);  // under the second
  void* q = alloc.allocate(kBytes);
  EXPECT_TRUE(q != p && q != p2) << "a held block was handed out";
  alloc.release_held(first);
  void* r = alloc.allocate(kBytes);
  EXPECT_EQ(r, p) << "the first hold's block should be reused once it is released";
  void* t = alloc.allocate(kBytes);
  EXPECT_NE(t, p2) << "the second hold's block was handed out before its release";
  alloc.release_held(second);
  void* s = alloc.allocate(kBytes);
  EXPECT_EQ(s, p2) << "the second hold's block should be reused once it is released";
  for (void* b : {q, r, t, s}) alloc.deallocate(b, kBytes);
}

// Releasing a later hold returns the earlier ones' blocks too.
TEST(CachingAllocatorTest, ReleasingALaterHoldReleasesTheEarlierOnes) {
  COPPICE_REQUIRE_GPU();
  CachingAllocator& alloc = cuda::caching_allocator(0);
  constexpr size_t kBytes = size_t{39} << 20;
  void* p = alloc.allocate(kBytes);
  alloc.hold_frees();
  alloc.deallocate(p, kBytes);
  alloc.release_held(alloc.hold_frees());
  void* s = alloc.allocate(kBytes);
  EXPECT_EQ(s, p) << "the earlier hold's block should be reused";
  alloc.deallocate(s, kBytes);
}

TEST(CachingAllocatorTest, ZeroBytesGiveAValidPointer) {
  COPPICE_REQUIRE_GPU();
  Allocator& alloc = allocator_for(gpu());
  void* p = alloc.allocate(0);
  EXPECT_NE(p, nullptr);
  alloc.deallocate(p, 0);
  Tensor e = Tensor::empty({0, 3}, TensorOptions(gpu()));
  EXPECT_EQ(e.to(Device::cpu()).numel(), 0);
}

TEST(CachingAllocatorTest, MoreThanTheDeviceIsRefusedAtOnce) {
  COPPICE_REQUIRE_GPU();
  Allocator& alloc = allocator_for(gpu());
  const AllocatorStats before = alloc.stats();
  const std::string msg = error_of([&] { alloc.allocate(size_t{1} << 50); });  // 1 PiB
  EXPECT_NE(msg.find("cuda allocator: 1125899906842624 bytes (1.05e+06 GiB) requested on cuda:0 (more than the device "
                     "has) but only "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(" are free on the device ("), std::string::npos) << msg;
  EXPECT_EQ(alloc.stats().allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(alloc.stats().system_frees, before.system_frees);  // the cache was not emptied for it
  const std::string huge = error_of([&] { alloc.allocate(std::numeric_limits<size_t>::max()); });
  EXPECT_NE(huge.find("more than any device can address"), std::string::npos) << huge;
  // The device still works afterwards.
  Tensor t = make({2}, {1, 2}).to(gpu());
  EXPECT_EQ(t.to(Device::cpu()).to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(CachingAllocatorTest, OutOfMemoryThrowsNamingTheBytesFree) {
  COPPICE_REQUIRE_GPU();
  Allocator& alloc = allocator_for(gpu());
  const AllocatorStats before = alloc.stats();
  // 8 GiB blocks until the device is full (at most 1 TiB).
  std::vector<void*> blocks;
  std::string msg;
  for (int i = 0; i < 128 && msg.empty(); ++i) {
    try {
      blocks.push_back(alloc.allocate(size_t{8} << 30));
    } catch (const Error& e) { msg = e.what(); }
  }
  for (void* p : blocks) alloc.deallocate(p, size_t{8} << 30);
  alloc.empty_cache();
  EXPECT_NE(msg.find("cuda allocator: 8589934592 bytes (8 GiB) requested on cuda:0 (out of memory) but only "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(" are free on the device ("), std::string::npos) << msg;
  EXPECT_EQ(alloc.stats().allocated_bytes, before.allocated_bytes);
  Tensor t = make({2}, {1, 2}).to(gpu());
  EXPECT_EQ(t.to(Device::cpu()).to_vector<double>(), (std::vector<double>{1, 2}));
}

}  // namespace
}  // namespace coppice
