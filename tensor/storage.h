// A reference-counted block of memory on one device.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/device.h"

namespace coppice {

class Storage {
 public:
  Storage() = default;
  // Allocates `nbytes` on `device` through that device's allocator.
  static Storage allocate(size_t nbytes, Device device);

  bool defined() const { return impl_ != nullptr; }
  void* data() const { return impl_ ? impl_->data : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : Device::cpu(); }
  // Number of handles sharing this block (for tests and copy-on-write decisions).
  long use_count() const { return impl_.use_count(); }

 private:
  struct Impl {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device;
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace coppice
