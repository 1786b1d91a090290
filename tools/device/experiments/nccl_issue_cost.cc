// The host's cost of issuing one all-reduce, as GradientSync issues a
// bucket (issue 37): an event recorded on the compute stream, the NCCL
// stream made to wait for it, a group with the all-reduce, an event after
// it. On a nonblocking communicator (what NcclCommunicator makes, so that a
// dead peer cannot hang the host) NCCL finishes every group on a thread of
// its own and the caller polls until it has (ncclInProgress); on a blocking
// one the call returns when it is enqueued. Two threads of one process, one
// GPU each; 16 buckets of 25 MB of f32 a round, as the dense GPT's.
//
// Build (here): g++ -O2 -std=c++17 -I/usr/local/cuda-13.0/include \
//   tools/device/experiments/nccl_issue_cost.cc -L/usr/local/cuda-13.0/lib64 \
//   -lcudart_static -ldl -lpthread -lrt -o .devexp/nccl_issue_cost
// Run (2 GPUs): NCCL_NVLS_ENABLE=0 .devexp/nccl_issue_cost
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) init;
  decltype(&ncclCommGetAsyncError) async_error;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclCommDestroy) destroy;
};

Nccl load() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW);
  for (const char* p : {"/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda-13.0/lib64/libnccl.so.2",
                        "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}) {
    if (h == nullptr) h = dlopen(p, RTLD_NOW);
  }
  if (h == nullptr) {
    std::fprintf(stderr, "libnccl.so.2 not found: %s\n", dlerror());
    std::exit(2);
  }
  Nccl n;
  n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(dlsym(h, "ncclGetUniqueId"));
  n.init = reinterpret_cast<decltype(n.init)>(dlsym(h, "ncclCommInitRankConfig"));
  n.async_error = reinterpret_cast<decltype(n.async_error)>(dlsym(h, "ncclCommGetAsyncError"));
  n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(dlsym(h, "ncclAllReduce"));
  n.group_start = reinterpret_cast<decltype(n.group_start)>(dlsym(h, "ncclGroupStart"));
  n.group_end = reinterpret_cast<decltype(n.group_end)>(dlsym(h, "ncclGroupEnd"));
  n.destroy = reinterpret_cast<decltype(n.destroy)>(dlsym(h, "ncclCommDestroy"));
  return n;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

// Polls a nonblocking communicator until NCCL has enqueued the group.
void settle(const Nccl& n, ncclComm_t comm, ncclResult_t r) {
  while (r == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    n.async_error(comm, &state);
    r = state;
    if (r == ncclInProgress) sched_yield();
  }
  if (r != ncclSuccess) {
    std::fprintf(stderr, "nccl error %d\n", static_cast<int>(r));
    std::exit(4);
  }
}

constexpr int kBuckets = 16;
constexpr size_t kFloats = (25u << 20) / 4;
constexpr int kRounds = 20;

// One rank: `rounds` rounds of kBuckets all-reduces; the host time of each
// issue (median and mean over the rounds after the first two), and of a
// device-to-device copy's launch for scale.
void rank_main(const Nccl& n, ncclUniqueId id, int rank, bool blocking, std::vector<double>* issue_us,
               std::vector<double>* copy_us) {
  check(cudaSetDevice(rank), "set device");
  cudaStream_t compute, comm_stream;
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking), "stream");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  settle(n, comm, n.init(&comm, 2, id, rank, &config));
  if (!blocking) settle(n, comm, ncclInProgress);
  std::vector<float*> buf(kBuckets);
  for (auto& b : buf) check(cudaMalloc(&b, kFloats * 4), "malloc");
  float* scratch;
  check(cudaMalloc(&scratch, kFloats * 4), "malloc");
  for (int round = 0; round < kRounds; ++round) {
    for (int b = 0; b < kBuckets; ++b) {
      const auto c0 = Clock::now();
      check(cudaMemcpyAsync(scratch, buf[b], 1 << 20, cudaMemcpyDeviceToDevice, compute), "copy");
      const auto c1 = Clock::now();
      cudaEvent_t ready, done;
      check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "event");
      check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");
      check(cudaEventRecord(ready, compute), "record");
      check(cudaStreamWaitEvent(comm_stream, ready, 0), "wait");
      ncclResult_t r = n.group_start();
      if (r == ncclSuccess) r = n.all_reduce(buf[b], buf[b], kFloats, ncclFloat, ncclSum, comm, comm_stream);
      const ncclResult_t e = n.group_end();
      settle(n, comm, r == ncclSuccess || r == ncclInProgress ? e : r);
      check(cudaEventRecord(done, comm_stream), "record");
      const auto c2 = Clock::now();
      cudaEventDestroy(ready);
      cudaEventDestroy(done);
      if (round >= 2) {
        issue_us->push_back(std::chrono::duration<double, std::micro>(c2 - c1).count());
        copy_us->push_back(std::chrono::duration<double, std::micro>(c1 - c0).count());
      }
    }
    check(cudaStreamSynchronize(comm_stream), "sync");
    check(cudaStreamSynchronize(compute), "sync");
  }
  n.destroy(comm);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

}  // namespace

int main() {
  const Nccl n = load();
  for (bool blocking : {false, true}) {
    ncclUniqueId id;
    n.get_unique_id(&id);
    std::vector<double> issue[2], copy[2];
    std::thread t0(rank_main, std::cref(n), id, 0, blocking, &issue[0], &copy[0]);
    std::thread t1(rank_main, std::cref(n), id, 1, blocking, &issue[1], &copy[1]);
    t0.join();
    t1.join();
    for (int r = 0; r < 2; ++r) {
      std::printf(
          "%s comm, rank %d: all-reduce issue %.1f us median, %.1f us mean (%zu issues); "
          "D2D copy launch %.1f us median\n",
          blocking ? "blocking" : "nonblocking", r, median(issue[r]), mean(issue[r]), issue[r].size(), median(copy[r]));
    }
  }
  return 0;
}
