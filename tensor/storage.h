// A reference-counted block of memory on one device.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace coppice {

class Storage {
 public:
  Storage() = default;
  // Allocates `nbytes` on `device` through that device's allocator.
  static Storage allocate(size_t nbytes, Device device);
  // Memory that someone else owns (a NumPy array, a DLPack tensor): used in
  // place, never freed by the allocator; `release` runs once when the last
  // handle goes (it lets go of the owner). `read_only`: the owner forbids
  // writes (a read-only NumPy array or memory map, a part that a sparse tensor
  // trusts); in-place writes (Tensor::fill_, copy_, an optimizer's step from
  // Python) refuse it instead of faulting or changing what must not change.
  static Storage wrap(void* data, size_t nbytes, Device device, std::function<void()> release, bool read_only = false);

  bool defined() const { return impl_ != nullptr; }
  void* data() const { return impl_ ? impl_->data : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : Device::cpu(); }
  bool read_only() const { return impl_ && impl_->read_only; }
  // Number of handles sharing this block (for tests and copy-on-write decisions).
  long use_count() const { return impl_.use_count(); }

 private:
  struct Impl {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device;
    std::function<void()> release;  // set: wrapped memory, not the allocator's
    bool read_only = false;         // wrapped memory its owner forbids writing
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace coppice
