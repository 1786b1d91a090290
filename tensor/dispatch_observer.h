// Seeing which kernels run: an observer installed on a thread (for the
// lifetime of a ScopedDispatchObserver) is told every cell the dispatcher
// runs there (tensor/dispatcher.h), as "linear(csr, dense) on cpu", and a
// dense fallback as "matmul(dense, dense) on cpu for (csr, csr)". What a
// traced step (models/propagation) names the kernels that made each tensor
// by. Off, a dispatch costs one thread-local read.
#pragma once

#include <string>

namespace coppice {

class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  virtual void on_kernel(const std::string& cell) = 0;
};

// The observer of this thread (null: none).
DispatchObserver* dispatch_observer();

class ScopedDispatchObserver {
 public:
  explicit ScopedDispatchObserver(DispatchObserver* observer);
  ~ScopedDispatchObserver();
  ScopedDispatchObserver(const ScopedDispatchObserver&) = delete;
  ScopedDispatchObserver& operator=(const ScopedDispatchObserver&) = delete;

 private:
  DispatchObserver* previous_;
};

}  // namespace coppice
