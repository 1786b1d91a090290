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

Storage::Impl::~Impl() {
  if (data != nullptr) allocator_for(device).deallocate(data, nbytes);
}

}  // namespace coppice
