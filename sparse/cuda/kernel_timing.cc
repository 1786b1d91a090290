#include "sparse/cuda/kernel_timing.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "sparse/route_choices.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"

namespace coppice::sparse_cuda {

double time_on_device_ms(const std::function<Tensor()>& run, int device, Tensor& out, std::string_view op) {
  cuda::DeviceGuard guard(device);
  out = run();
  const cudaStream_t stream = cuda::current_stream(device);
  cudaEvent_t start = nullptr, stop = nullptr;
  COPPICE_CUDA_CHECK(cudaEventCreate(&start), op);
  const cudaError_t made = cudaEventCreate(&stop);
  if (made != cudaSuccess) cudaEventDestroy(start);
  COPPICE_CUDA_CHECK(made, op);
  float ms = 0.0f;
  try {
    constexpr int kRuns = 2;
    COPPICE_CUDA_CHECK(cudaEventRecord(start, stream), op);
    for (int i = 0; i < kRuns; ++i) out = run();
    COPPICE_CUDA_CHECK(cudaEventRecord(stop, stream), op);
    COPPICE_CUDA_CHECK(cudaEventSynchronize(stop), op);
    COPPICE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), op);
    ms /= kRuns;
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

std::string device_model_key(int device) {
  static std::mutex mu;
  static auto* known = new std::map<int, std::string>();  // never destroyed: kernels may run during exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = known->find(device);
  if (it != known->end()) return it->second;
  cudaDeviceProp prop{};
  COPPICE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "device_model_key");
  return (*known)[device] = str_cat(prop.name, " sm_", prop.major, prop.minor);
}

namespace {

// A measurement times its routes alone: the device's work queued before it
// finishes first, on its stream and on the side stream (run_beside's open
// branches, tensor/backend.h), so that no route shares the GPU with it. Timed
// beside another kernel, a route can lose that it wins alone, and a choice
// kept for the whole run would rest on the overlap of its first call
// (benchmarks.md: an SDDMM's routes timed beside attention's backward).
void drain(int device, std::string_view op) {
  cuda::DeviceGuard guard(device);
  COPPICE_CUDA_CHECK(cudaDeviceSynchronize(), op);
}

}  // namespace

size_t chosen_route(std::string_view decision, const std::string& key, int device, std::string_view op,
                    const std::vector<TimedRoute>& routes, int rounds, Tensor* out) {
  std::vector<std::string_view> names;
  for (const TimedRoute& r : routes) names.push_back(r.name);
  std::vector<Tensor> outs(routes.size());
  bool measured = false;
  const size_t winner = choose_route(
      decision, key, names,
      [&] {
        drain(device, op);
        std::vector<double> best(routes.size());
        for (int round = 0; round < std::max(rounds, 1); ++round) {
          for (size_t i = 0; i < routes.size(); ++i) {
            const double ms = time_on_device_ms(routes[i].run, device, outs[i], op);
            best[i] = round == 0 ? ms : std::min(best[i], ms);
          }
        }
        return best;
      },
      &measured);
  if (out != nullptr) *out = measured ? outs[winner] : Tensor();
  return winner;
}

Tensor run_chosen_route(std::string_view decision, const std::string& key, int device, std::string_view op,
                        const std::vector<TimedRoute>& routes, int rounds, size_t* chosen) {
  Tensor out;
  const size_t winner = chosen_route(decision, key, device, op, routes, rounds, &out);
  if (chosen != nullptr) *chosen = winner;
  return out.defined() ? out : routes[winner].run();
}

}  // namespace coppice::sparse_cuda
