#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <optional>

#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/host_memory.h"

namespace coppice {
namespace {

constexpr size_t kAlignment = kCpuAllocationAlignment;

// Requests from this size on are checked against the memory the machine can
// give (host_memory.h) before they are made. Reading it costs tens of
// microseconds, nothing beside writing this many bytes; smaller requests
// cannot exhaust the machine alone, and the system allocator's refusal
// still covers them.
constexpr size_t kCheckedRequestBytes = size_t{64} << 20;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // Byte counts stay within int64 (the statistics and Tensor::empty count in it).
    COPPICE_CHECK(nbytes <= static_cast<size_t>(std::numeric_limits<int64_t>::max()) - kAlignment,
                  "cpu allocator: ", nbytes, " bytes requested, more than any machine can address");
    if (nbytes >= kCheckedRequestBytes) {
      const std::optional<int64_t> available = host_memory_available();
      COPPICE_CHECK(!available || static_cast<int64_t>(nbytes) <= *available,
                    "cpu allocator: ", format_bytes(static_cast<int64_t>(nbytes)), " requested but only ",
                    format_bytes(*available), " are available (", format_bytes(allocated_.load()),
                    " already held by tensors)");
    }
    size_t rounded = std::max(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
    void* p = std::aligned_alloc(kAlignment, rounded);
    COPPICE_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", format_bytes(static_cast<int64_t>(nbytes)),
                  " (", format_bytes(allocated_.load()), " already held by tensors)");
    int64_t now = allocated_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
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
