// A CUDA injection library that records the start and end of every kernel
// and copy a process runs, for the GPU timelines Nsight Systems would give
// (it is not installed on the lent machines: ../../.library's KINDS.md).
//
//   g++ -shared -fPIC -O2 -I$CUDA/include tools/device/cupti_trace.cc \
//       -L$CUDA/lib -lcupti -o cupti_trace.so
//   CUDA_INJECTION64_PATH=$PWD/cupti_trace.so COPPICE_CUPTI_TRACE_DIR=DIR PROGRAM...
//
// CUDA loads the library when the program first initializes it (every
// process, so every rank of a launch) and calls InitializeInjection, which
// turns on CUPTI's concurrent-kernel and memcpy activity records: the
// kernels are not serialized, so overlap (NCCL beside compute) stays as it
// is; the runtime API's calls are recorded too (what the host was in while
// the GPU idled). Each process writes DIR/trace.<pid>.tsv, one line a record:
//   K <start ns> <end ns> <device> <stream> <kernel name, mangled>
//   M <start ns> <end ns> <device> <stream> memcpy <kind> <bytes>
//   R <start ns> <end ns> 0 <thread> <runtime API call, e.g. cudaFree>
// (tab-separated; timestamps on CUPTI's clock, common to the processes of
// one machine). tools/device/dp_timeline.py reads them.
#include <cupti.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

std::mutex out_mutex;
FILE* out = nullptr;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(out_mutex);
  CUpti_Activity* record = nullptr;
  while (out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      std::fprintf(out, "K\t%llu\t%llu\t%u\t%u\t%s\n", static_cast<unsigned long long>(k->start),
                   static_cast<unsigned long long>(k->end), k->deviceId, k->streamId,
                   k->name != nullptr ? k->name : "?");
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      std::fprintf(out, "M\t%llu\t%llu\t%u\t%u\tmemcpy %u %llu\n", static_cast<unsigned long long>(m->start),
                   static_cast<unsigned long long>(m->end), m->deviceId, m->streamId,
                   static_cast<unsigned>(m->copyKind), static_cast<unsigned long long>(m->bytes));
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r->cbid, &name) != CUPTI_SUCCESS) name = nullptr;
      std::fprintf(out, "R\t%llu\t%llu\t0\t%u\t%s\n", static_cast<unsigned long long>(r->start),
                   static_cast<unsigned long long>(r->end), r->threadId, name != nullptr ? name : "?");
    }
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out != nullptr) std::fclose(out);
  out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* dir = std::getenv("COPPICE_CUPTI_TRACE_DIR");
  const std::string path = std::string(dir != nullptr ? dir : ".") + "/trace." + std::to_string(getpid()) + ".tsv";
  out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "cupti_trace: cannot write %s\n", path.c_str());
    return 0;
  }
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_trace: CUPTI refused the activity records\n");
    return 0;
  }
  std::atexit(flush_at_exit);
  return 1;
}
