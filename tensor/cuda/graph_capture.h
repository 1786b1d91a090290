// CUDA graph capture of Coppice's work on one device (backend.h's
// capture_work is the entry point; this is its CUDA side).
//
// Capture runs the host code of a function once while its kernels, copies and
// cuBLAS/cuSPARSE calls are recorded on a private stream (current_stream
// returns it on the capturing thread, stream.h) into a graph, and its
// allocations come from a graph pool of the caching allocator
// (caching_allocator.h), so every replay finds its buffers where the capture
// left them and nobody else is ever given them. A replay is one
// cudaGraphLaunch, ordered with the legacy stream like everything else.
//
// Anything in the function that needs the device to have run (reading a
// result back, synchronizing) invalidates the capture; capture_graph then
// returns null with the CUDA error, and the caller runs the work eagerly.
// Checks that read a flag back after a kernel (index_check.cuh) instead defer
// themselves to after each replay (after_each_replay), which queues their
// read-backs behind the replay (deferred_checks.h).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "tensor/backend.h"

namespace coppice::cuda {

// True while the calling thread records work for `device`.
bool capturing(int device);

// During a capture: `check` runs on the host after every replay's launch
// (work it queues runs behind the replayed work) instead of now. Outside a
// capture: runs it now.
void after_each_replay(int device, std::function<void()> check);

// Records fn's work on `device`; null with *why_not when it cannot be.
std::unique_ptr<CapturedWork> capture_graph(int device, const std::function<void()>& fn, std::string* why_not);

// Runs fn with its work recorded into a capture another library (PyTorch's
// torch.cuda.graph, torch.compile's CUDA graphs) is making on `stream`:
// current_stream returns `stream` on this thread while fn runs, and fn's
// allocations come from a graph pool of that capture (one per capture, made
// at its first call), which the captured graph holds as a CUDA user object:
// its blocks go back to the shared cache once the graph and every executable
// graph made from it are destroyed. Throws when `stream` is not capturing, and
// when fn defers a check to after each replay (index_check.cuh): the other
// library's replays would not run it.
void run_in_foreign_capture(int device, cudaStream_t stream, const std::function<void()>& fn);

}  // namespace coppice::cuda
