// A small shared thread pool for the CPU kernels.
//
// The pool holds num_threads() - 1 workers; the calling thread works too.
// Sized once, at first use, by RuntimeOptions::num_threads (COPPICE_NUM_THREADS;
// tensor/runtime_options.h), else by std::thread::hardware_concurrency(). OpenBLAS keeps threads of its
// own; gemm calls it from one thread, never from inside parallel_for.
#pragma once

#include <cstdint>
#include <functional>

namespace coppice::cpu {

// Threads parallel_for may use, the caller included (>= 1).
int num_threads();

// Calls fn(chunk_begin, chunk_end) over disjoint chunks covering [begin, end),
// each at least `grain` long (but the last), possibly on several threads.
// Runs inline when the range is at most `grain`, when there is one thread,
// when called from inside another parallel_for, or while the pool is busy
// with another caller's work. The first exception a chunk throws is rethrown
// here after all chunks are done (chunks not yet started are skipped).
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace coppice::cpu
