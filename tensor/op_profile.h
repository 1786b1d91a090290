// Per-op timing through the dispatcher, for finding the slow op of a step:
// run any binary with COPPICE_PROFILE=1 and, at exit, stderr gets one line
// per "op(formats) on device": calls, total, mean and fastest milliseconds,
// sorted by total (COPPICE_PROFILE=shapes splits each by its first input's
// shape). Each dispatched kernel is timed between two device synchronizations,
// so a profiled run is slower and its times are inclusive (an op whose
// kernel dispatches other ops counts them too). The switch is
// RuntimeOptions::profile (tensor/runtime_options.h), so code can turn it on
// too; off, a call costs a read of the options (relaxed loads, no lock).
#pragma once

#include <chrono>
#include <string>

#include "tensor/device.h"

namespace coppice {

bool op_profile_enabled();
// ProfileMode::kShapes (COPPICE_PROFILE=shapes): the key also names the first input's shape, to
// tell the calls of one op apart (which copy_ is the slow one).
bool op_profile_shapes();
// Adds one call of `key` taking `seconds`.
void op_profile_record(const std::string& key, double seconds);
// The table printed at exit ("" when nothing was recorded).
std::string op_profile_report();
// The calls recorded for dispatched op `op` (every format, device and shape):
// how tests count which path ran, with profiling on.
int64_t op_profile_calls(std::string_view op);

// Times its own lifetime as one call of `key` (between synchronizations of
// `device`) when profiling is on; nothing otherwise. For the parts of a
// kernel: { ProfileScope s("sddmm: a @ b", device); ... }
// The closing synchronization may throw (a CUDA error, or a deferred index
// check failing: tensor/cuda/deferred_checks.h), so the destructor may too,
// unless the scope is already left by an exception.
class ProfileScope {
 public:
  ProfileScope(std::string key, Device device);
  ~ProfileScope() noexcept(false);
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  std::string key_;
  Device device_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace coppice
