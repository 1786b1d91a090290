// Whether ops record a graph, per thread, and the guard that turns it off.
#pragma once

namespace coppice {

class GradMode {
 public:
  // True unless a NoGradGuard is alive on this thread.
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Ops on Variables record no graph while a guard is alive on this thread
// (their results do not require grad). Guards nest.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace coppice
