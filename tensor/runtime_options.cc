#include "tensor/runtime_options.h"

#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "tensor/error.h"

namespace coppice {
namespace {

constexpr int kMaxThreads = 1024;

using Getenv = std::function<const char*(const char*)>;

// The enum spellings, in the enums' order (index = value).
constexpr std::array<std::string_view, 3> kProfileNames = {"0", "1", "shapes"};
constexpr std::array<std::string_view, 2> kSimdNames = {"auto", "sse"};

// Variables that chose product routes before the planners' pins replaced
// them (sparse/route_choices.h): set, they are an error that says what to
// write instead, not a silent no-op.
constexpr std::pair<const char*, const char*> kRetired[] = {
    {"COPPICE_CSR_SPMM", "COPPICE_ROUTES=csr_spmm=cusparse|rows|tiled|own"},
    {"COPPICE_CSR_SPMM_LOG", "the recorded route choices (the run summary's route_choices)"},
    {"COPPICE_BSR_TILES", "COPPICE_ROUTES=bsr_tiles=tiles|off"},
    {"COPPICE_NM24_MMA", "COPPICE_ROUTES=nm24=sparse|mma_sp|dense"},
    {"COPPICE_ATTENTION_WGMMA", "COPPICE_ROUTES=attention=mma_sync"},
    {"COPPICE_SDDMM_DENSE_DENSITY", "COPPICE_ROUTES=sddmm_dense=on|off"},
};

[[noreturn]] void bad_value(const char* name, std::string_view value, std::string_view accepted) {
  fail(name, "='", one_line(std::string(value)), "' is not accepted: expected ", accepted);
}

// The index of `value` among `names`, or an error listing them.
template <size_t N>
size_t one_of(const char* name, std::string_view value, const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i) {
    if (value == names[i]) return i;
  }
  bad_value(name, value, str_cat("one of ", str_join(names, ", ")));
}

int parse_threads(const char* name, std::string_view v) {
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > kMaxThreads) {
    bad_value(name, v, str_cat("an integer in [1, ", kMaxThreads, "]"));
  }
  return n;
}

void validate(const RuntimeOptions& o) {
  COPPICE_CHECK(o.num_threads >= 0 && o.num_threads <= kMaxThreads, "runtime options: num_threads = ", o.num_threads,
                " is outside [0, ", kMaxThreads, "] (0: the hardware's threads)");
}

// One atomic per field, so that a kernel's read takes no lock; `loaded` says
// whether they hold the environment's (or code's) options yet.
struct Store {
  std::mutex mu;  // serializes the first read of the environment and the setters
  std::atomic<bool> loaded{false};
  std::atomic<int> num_threads{0};
  std::atomic<ProfileMode> profile{ProfileMode::kOff};
  std::atomic<CpuSimd> cpu_simd{CpuSimd::kAuto};

  void store(const RuntimeOptions& o) {  // with mu held
    constexpr auto r = std::memory_order_relaxed;
    num_threads.store(o.num_threads, r);
    profile.store(o.profile, r);
    cpu_simd.store(o.cpu_simd, r);
    loaded.store(true, std::memory_order_release);
  }

  RuntimeOptions load() const {
    constexpr auto r = std::memory_order_relaxed;
    RuntimeOptions o;
    o.num_threads = num_threads.load(r);
    o.profile = profile.load(r);
    o.cpu_simd = cpu_simd.load(r);
    return o;
  }
};

Store& store() {
  static Store* s = new Store();  // never destroyed: kernels may ask during exit
  return *s;
}

}  // namespace

RuntimeOptions runtime_options_from(const Getenv& getenv) {
  RuntimeOptions o;
  // Calls `parse` with the variable's value when it is set and not empty.
  auto read = [&](const char* name, const auto& parse) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') parse(name, std::string_view(v));
  };
  read("COPPICE_NUM_THREADS", [&](const char* n, std::string_view v) { o.num_threads = parse_threads(n, v); });
  read("COPPICE_PROFILE",
       [&](const char* n, std::string_view v) { o.profile = static_cast<ProfileMode>(one_of(n, v, kProfileNames)); });
  read("COPPICE_CPU_SIMD",
       [&](const char* n, std::string_view v) { o.cpu_simd = static_cast<CpuSimd>(one_of(n, v, kSimdNames)); });
  for (const auto& retired : kRetired) {
    read(retired.first, [&](const char* n, std::string_view v) {
      fail(n, "='", one_line(std::string(v)), "' is no longer read: use ", retired.second, " (sparse/route_choices.h)");
    });
  }
  return o;
}

RuntimeOptions runtime_options() {
  Store& s = store();
  if (!s.loaded.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(s.mu);
    // A bad variable throws here, leaving `loaded` false: every later call
    // throws the same error until code sets the options.
    if (!s.loaded.load(std::memory_order_relaxed)) {
      s.store(runtime_options_from([](const char* name) -> const char* { return std::getenv(name); }));
    }
  }
  return s.load();
}

void set_runtime_options(const RuntimeOptions& options) {
  validate(options);
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  s.store(options);
}

ScopedRuntimeOptions::ScopedRuntimeOptions(const std::function<void(RuntimeOptions&)>& change)
    : previous_(runtime_options()) {
  RuntimeOptions changed = previous_;
  change(changed);
  set_runtime_options(changed);
}

ScopedRuntimeOptions::~ScopedRuntimeOptions() { set_runtime_options(previous_); }

std::string_view profile_mode_name(ProfileMode mode) { return kProfileNames.at(static_cast<size_t>(mode)); }
std::string_view cpu_simd_name(CpuSimd simd) { return kSimdNames.at(static_cast<size_t>(simd)); }

}  // namespace coppice
