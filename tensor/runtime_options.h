// The process-wide runtime options: the few knobs that change which kernel a
// product runs or how the library reports, in one validated struct, so that
// no kernel reads the environment on its own.
//
// Each option is set from code (set_runtime_options, or ScopedRuntimeOptions
// for one scope: what tests use to force a route), or else from its
// environment variable, read once, at the first call of runtime_options()
// (or of anything that asks it). A bad value is a coppice::Error naming the
// variable, the value and what is accepted, thrown at that first use and at
// every later one until code sets the options; parsing is strict (no
// trailing bytes, no NaN, no out-of-range number). An unset or empty
// variable keeps the default.
//
//   variable                     field                    accepted (default first)
//   COPPICE_NUM_THREADS          num_threads              unset: the hardware's threads; 1..1024
//   COPPICE_PROFILE              profile                  0 | 1 | shapes (tensor/op_profile.h)
//   COPPICE_CPU_SIMD             cpu_simd                 auto | sse (the CPU sparse loops)
//
// The options are process-global, like the environment they replace: a
// ScopedRuntimeOptions is for one thread's scope (a test), not for threads
// that run kernels at the same time. Reading them costs a few relaxed atomic
// loads, so kernels ask on every call.
//
// Which route a sparse product takes is the planners' (sparse/route_choices.h,
// which reads COPPICE_ROUTES, the pins that name its decisions); the
// variables that pinned routes before (COPPICE_CSR_SPMM, COPPICE_CSR_SPMM_LOG,
// COPPICE_BSR_TILES, COPPICE_NM24_MMA, COPPICE_ATTENTION_WGMMA,
// COPPICE_SDDMM_DENSE_DENSITY) are an error here that says what to use
// instead.
#pragma once

#include <functional>
#include <string_view>

namespace coppice {

// COPPICE_PROFILE: per-op timing at exit (tensor/op_profile.h).
enum class ProfileMode { kOff, kOn, kShapes };

// COPPICE_CPU_SIMD: the CPU sparse loops use AVX2+FMA where the CPU has them
// (kAuto), or the SSE2 loops always (kSse: for tests of that path).
enum class CpuSimd { kAuto, kSse };

struct RuntimeOptions {
  // Threads of the CPU kernels' pool, the caller included; 0: the hardware's.
  // The pool is sized at its first use, so a later change has no effect.
  int num_threads = 0;
  ProfileMode profile = ProfileMode::kOff;
  CpuSimd cpu_simd = CpuSimd::kAuto;
};

// The options in force (reads the environment at the first call).
RuntimeOptions runtime_options();

// Replaces every option; throws coppice::Error for a value out of range
// (num_threads outside 0..1024). The environment is not read after this.
void set_runtime_options(const RuntimeOptions& options);

// The options as the environment gives them, through `getenv` (nullptr for an
// unset variable), over the defaults; throws coppice::Error for a bad value.
RuntimeOptions runtime_options_from(const std::function<const char*(const char*)>& getenv);

// Changes the options for its lifetime and restores the previous ones after:
//   ScopedRuntimeOptions simd([](RuntimeOptions& o) { o.cpu_simd = CpuSimd::kSse; });
class ScopedRuntimeOptions {
 public:
  explicit ScopedRuntimeOptions(const std::function<void(RuntimeOptions&)>& change);
  ~ScopedRuntimeOptions();
  ScopedRuntimeOptions(const ScopedRuntimeOptions&) = delete;
  ScopedRuntimeOptions& operator=(const ScopedRuntimeOptions&) = delete;

 private:
  RuntimeOptions previous_;
};

// The accepted spellings, as the variables take them ("auto", "shapes", ...).
std::string_view profile_mode_name(ProfileMode mode);
std::string_view cpu_simd_name(CpuSimd simd);

}  // namespace coppice
