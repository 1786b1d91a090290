// The multi-tensor kernels on CUDA (optim/multi_tensor.h says what they
// compute; register.cc turns its MultiStep and MultiNorm into these tables
// and launches). Each launch takes its table as a kernel parameter: up to
// kMaxStepEntries (kMaxNormEntries) arrays, each cut into chunks of
// kMultiChunk elements, one thread block a chunk; block_end[k] is the end
// (exclusive) of entry k's blocks, so the launch has block_end[count - 1]
// blocks and a block finds its entry by a scan of at most a table's entries.
// Plain C++ that nvcc also compiles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "optim/adam_step_math.h"
#include "optim/sgd_step_math.h"

namespace coppice::optim_cuda {

// Elements per thread block: 16 a thread. Small enough that a 768-element
// bias is one block and a 50 M weight spreads over every SM.
constexpr int64_t kMultiChunk = 4096;

// What fits in the 4 KiB of kernel parameters with the step's constants.
constexpr int kMaxStepEntries = 36;

struct StepTable {
  float* param[kMaxStepEntries];
  const void* grad[kMaxStepEntries];
  float* state1[kMaxStepEntries];
  float* state2[kMaxStepEntries];
  void* param16[kMaxStepEntries];
  float* flag[kMaxStepEntries];
  int64_t n[kMaxStepEntries];
  int64_t block_end[kMaxStepEntries];
  int count;
};

// The gradient's type (and the 16-bit parameter's, where `mixed`).
enum class StepGrad { kF32, kBF16, kF16 };

// One launch of the SGD (Adam) step over `table`'s entries; `check`: test
// every gradient element into the entry's flag (where it has one);
// `factor`: null or the clip factor.
void multi_sgd_step(const StepTable& table, StepGrad grad, const SgdStepArgs& args, bool check, const float* factor,
                    cudaStream_t stream);
void multi_adam_step(const StepTable& table, StepGrad grad, const AdamStepArgs& args, bool check, const float* factor,
                     cudaStream_t stream);

constexpr int kMaxNormEntries = 64;

// Gradient dtypes of a norm table.
enum class NormDType : int32_t { kF32, kF64, kBF16, kF16 };

struct NormTable {
  const void* values[kMaxNormEntries];
  float* flag[kMaxNormEntries];
  int64_t n[kMaxNormEntries];
  int64_t block_end[kMaxNormEntries];
  NormDType dtype[kMaxNormEntries];
  int count;
  int64_t block_base;  // this table's first block in the scratch array
  int64_t entry_base;  // this table's first entry in the partials array
};

// How a norm combines |x|: squares summed (p = 2), sums (p = 1), the
// maximum (infinity), |x|^p summed (any other p).
enum class NormKind { kTwo, kOne, kInf, kPower };

// Two launches for one table: each block's combined |x| (in f64, in a fixed
// order) into scratch[block_base + block], then each entry's blocks into
// partials[entry_base + entry], the entry's flag set to NaN where its
// partial is not finite. multi_norm_finish then combines partials[0, count)
// into the norm and the factor (one block, a fixed order: the same bits
// every run).
void multi_norm_partials(const NormTable& table, NormKind kind, double p, double* scratch, double* partials,
                         cudaStream_t stream);
void multi_norm_finish(const double* partials, int64_t count, NormKind kind, double p, double max_norm, float* norm,
                       float* factor, cudaStream_t stream);

}  // namespace coppice::optim_cuda
