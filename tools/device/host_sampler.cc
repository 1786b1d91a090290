// A sampling profiler of host time for the lent GPU machines, which have no
// perf, gdb or Nsight Systems (../shared/DEVICE.md, the device tool's
// KINDS.md). A program loads it and brackets the code to profile:
//
//   import ctypes
//   s = ctypes.CDLL("/tmp/host_sampler.so")
//   s.host_sampler_start(ctypes.c_int(200))    # samples a second of CPU time
//   ... the calls to profile ...
//   s.host_sampler_stop(b"/tmp/out/samples.txt")
//
// Build it here (g++ -O2 -shared -fPIC -o .devexp/host_sampler.so
// tools/device/host_sampler.cc) and carry it. While started, SIGPROF (the
// process's CPU time) takes the interrupted thread's call stack
// (backtrace(3), through the unwind tables) into a fixed buffer; stop()
// writes one line per sample, its frames as MODULE+OFFSET leaf first, each
// module named by its path. tools/device/host_profile.py turns the file into
// inclusive and exclusive time per function, with addr2line over unstripped
// copies of the modules kept here (the shipped ones are stripped).
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

constexpr int kMaxFrames = 64;
constexpr size_t kCapacity = size_t{1} << 22;  // words: depth, then frames (32 MiB)

uintptr_t g_words[kCapacity];
std::atomic<size_t> g_used{0};
std::atomic<size_t> g_dropped{0};

void on_sample(int, siginfo_t*, void*) {
  void* frames[kMaxFrames];
  const int n = backtrace(frames, kMaxFrames);
  const size_t at = g_used.fetch_add(static_cast<size_t>(n) + 1, std::memory_order_relaxed);
  if (at + static_cast<size_t>(n) + 1 > kCapacity) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_words[at] = static_cast<uintptr_t>(n);
  std::memcpy(&g_words[at + 1], frames, sizeof(void*) * static_cast<size_t>(n));
}

void set_timer(int per_second) {
  itimerval t{};
  if (per_second > 0) {
    t.it_interval.tv_usec = 1000000 / per_second;
    t.it_value = t.it_interval;
  }
  setitimer(ITIMER_PROF, &t, nullptr);
}

}  // namespace

extern "C" {

// Starts sampling `per_second` times a second of the process's CPU time.
int host_sampler_start(int per_second) {
  if (per_second <= 0 || per_second > 10000) return -1;
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder before any signal needs it
  g_used.store(0);
  g_dropped.store(0);
  struct sigaction sa {};
  sa.sa_sigaction = on_sample;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, nullptr) != 0) return -1;
  set_timer(per_second);
  return 0;
}

// Stops sampling and writes the samples to `path`; returns how many, or -1.
long host_sampler_stop(const char* path) {
  set_timer(0);
  signal(SIGPROF, SIG_IGN);
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return -1;
  const size_t used = std::min(g_used.load(), kCapacity);
  long samples = 0;
  std::fprintf(f, "# host_sampler: dropped %zu\n", g_dropped.load());
  for (size_t at = 0; at < used;) {
    const size_t n = g_words[at];
    if (n == 0 || at + 1 + n > used) break;
    for (size_t k = 0; k < n; ++k) {
      const auto addr = g_words[at + 1 + k];
      Dl_info info{};
      // A return address points after the call: look up the call itself.
      const uintptr_t look = k == 0 ? addr : addr - 1;
      if (dladdr(reinterpret_cast<void*>(look), &info) != 0 && info.dli_fname != nullptr) {
        std::fprintf(f, "%s%s+0x%lx", k ? " " : "", info.dli_fname,
                     static_cast<unsigned long>(look - reinterpret_cast<uintptr_t>(info.dli_fbase)));
      } else {
        std::fprintf(f, "%s?+0x%lx", k ? " " : "", static_cast<unsigned long>(look));
      }
    }
    std::fputc('\n', f);
    ++samples;
    at += 1 + n;
  }
  std::fclose(f);
  return samples;
}

}  // extern "C"
