#include "tensor/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensor/backend.h"
#include "tensor/runtime_options.h"

namespace coppice {
namespace {

struct Entry {
  long calls = 0;
  double seconds = 0.0;
  double min_seconds = 0.0;  // the fastest call: the mean includes one-time work (plans, caches)
};

// Prints the table when the process exits.
class Profile {
 public:
  ~Profile() {
    const std::string table = report();
    if (!table.empty()) std::fputs(table.c_str(), stderr);
  }
  std::string report() {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.empty()) return "";
    std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::string out = "coppice profile (COPPICE_PROFILE=1): op, calls, total ms, mean ms, min ms\n";
    char line[256];
    for (const auto& [key, e] : rows) {
      std::snprintf(line, sizeof(line), "  %-60s %8ld %12.3f %10.4f %10.4f\n", key.c_str(), e.calls, 1e3 * e.seconds,
                    1e3 * e.seconds / static_cast<double>(e.calls), 1e3 * e.min_seconds);
      out += line;
    }
    return out;
  }
  int64_t calls(std::string_view op) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (const auto& [key, e] : entries_) {
      if (key.size() > op.size() && key.compare(0, op.size(), op) == 0 && key[op.size()] == '(') n += e.calls;
    }
    return n;
  }
  void record(const std::string& key, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[key];
    e.min_seconds = e.calls == 0 ? seconds : std::min(e.min_seconds, seconds);
    ++e.calls;
    e.seconds += seconds;
  }

 private:
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

bool op_profile_enabled() { return runtime_options().profile != ProfileMode::kOff; }

bool op_profile_shapes() { return runtime_options().profile == ProfileMode::kShapes; }

void op_profile_record(const std::string& key, double seconds) { profile().record(key, seconds); }

std::string op_profile_report() { return profile().report(); }

int64_t op_profile_calls(std::string_view op) { return profile().calls(op); }

ProfileScope::ProfileScope(std::string key, Device device)
    : key_(std::move(key)), device_(device), on_(op_profile_enabled()) {
  if (!on_) return;
  synchronize(device_);
  start_ = std::chrono::steady_clock::now();
}

ProfileScope::~ProfileScope() noexcept(false) {
  if (!on_) return;
  if (std::uncaught_exceptions() > 0) return;  // leaving by an exception already: not timed, nothing thrown
  synchronize(device_);
  op_profile_record(key_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace coppice
