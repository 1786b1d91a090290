#include "tensor/precision.h"

#include <atomic>

namespace coppice {
namespace {

std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace

bool allow_tf32() { return tf32_flag().load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { tf32_flag().store(allow, std::memory_order_relaxed); }

}  // namespace coppice
