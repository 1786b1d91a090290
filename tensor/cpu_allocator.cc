#include <atomic>
#include <cstdlib>

#include "tensor/allocator.h"
#include "tensor/error.h"

namespace coppice {
namespace {

constexpr size_t kAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) rounded = kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    COPPICE_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    int64_t now = allocated_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    ++allocations_;
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    std::free(ptr);
    allocated_.fetch_sub(static_cast<int64_t>(nbytes));
    ++frees_;
  }

  AllocatorStats stats() const override {
    AllocatorStats s;
    s.allocated_bytes = allocated_.load();
    s.peak_allocated_bytes = peak_.load();
    s.reserved_bytes = s.allocated_bytes;
    s.allocations = allocations_.load();
    s.system_allocations = s.allocations;
    s.system_frees = frees_.load();
    return s;
  }

  void reset_peak() override { peak_.store(allocated_.load()); }

 private:
  std::atomic<int64_t> allocated_{0}, peak_{0}, allocations_{0}, frees_{0};
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator();  // never destroyed: tensors may outlive statics
  return *allocator;
}

}  // namespace coppice
