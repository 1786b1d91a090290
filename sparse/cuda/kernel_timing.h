// Timing a way of computing a result on the device, for the routes that are
// chosen by measurement (spmm_choice.h, the BSR SDDMM of sddmm.cc, the 2:4
// products of spmm.cc).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// Milliseconds per run of `run` on `device`: a warm-up run (plans, caches,
// first touch of the output), then the mean of two runs between CUDA events
// on the device's current stream. `out` keeps the last result; `op` names
// the caller in errors.
double time_on_device_ms(const std::function<Tensor()>& run, int device, Tensor& out, std::string_view op);

// Which of two ways computes a result faster, measured once per key on the
// real operands and remembered: the first call for a key times both
// (`rounds` interleaved rounds of time_on_device_ms, each side keeping its
// best) and returns the faster one's result; later calls run the remembered
// winner. Thread-safe; two threads that miss together both measure.
class FasterOf {
 public:
  Tensor run(const std::string& key, int device, std::string_view op, const std::function<Tensor()>& first,
             const std::function<Tensor()>& second, int rounds = 1);
  // Whether `first` is the faster for `key`, measuring as run does when the
  // key is new (for callers that then run a variant of the winner: a fused
  // form with outputs of its own).
  bool first_wins(const std::string& key, int device, std::string_view op, const std::function<Tensor()>& first,
                  const std::function<Tensor()>& second, int rounds = 1);

 private:
  // Times both as run describes and remembers the winner; their last results in the outs.
  bool measure(const std::string& key, int device, std::string_view op, const std::function<Tensor()>& first,
               const std::function<Tensor()>& second, int rounds, Tensor& first_out, Tensor& second_out);

  std::mutex mu_;
  std::map<std::string, bool> first_won_;
};

}  // namespace coppice::sparse_cuda
