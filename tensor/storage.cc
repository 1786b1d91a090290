#include "tensor/storage.h"

#include "tensor/backend.h"

namespace coppice {

Storage Storage::allocate(size_t nbytes, Device device) {
  Storage s;
  s.impl_ = std::make_shared<Impl>();
  s.impl_->data = allocator_for(device).allocate(nbytes);
  s.impl_->nbytes = nbytes;
  s.impl_->device = device;
  return s;
}

Storage Storage::wrap(void* data, size_t nbytes, Device device, std::function<void()> release, bool read_only) {
  Storage s;
  s.impl_ = std::make_shared<Impl>();
  s.impl_->data = data;
  s.impl_->nbytes = nbytes;
  s.impl_->device = device;
  s.impl_->release = release ? std::move(release) : [] {};
  s.impl_->read_only = read_only;
  return s;
}

Storage::Impl::~Impl() {
  if (release) {
    release();
  } else if (data != nullptr) {
    allocator_for(device).deallocate(data, nbytes);
  }
}

}  // namespace coppice
