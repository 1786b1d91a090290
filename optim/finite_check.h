// Non-finite values (inf, NaN): the one place that looks for them, for every
// caller that must not go on with them (docs/architecture.md, layer 5).
//
//   NonfiniteFlag   folds any number of tensors into a few flags (one, or
//                   one per parameter) on their device, without a host read:
//                   the trainer's per-step check of every gradient, read
//                   together with the loss it reads anyway; the loss
//                   scaler's skip test; a mask update's inputs.
//   all_finite,     one tensor, one host read: which gradient failed (on the
//   check_finite    failing step only), the scores a mask update would rank
//                   by (prune keys, growth scores, weights a GMP or SR-STE
//                   selection reads), a checkpoint's entries.
//
// A sparse tensor is judged by its stored values (n:m, CSR, BSR, COO, ...;
// masked: its mask-true values), a dense one by all of its elements; integer
// and bool tensors are always finite. The test is bitwise (the exponent all
// ones), so it is exact for f32, f64, bf16 and f16 and costs one read of the
// values: the "nonfinite_flag" kernel, on the CPU here and on CUDA in
// optim/cuda (its twin). A gradient the optimizer steps anyway need not be
// read twice: Optimizer::step(grad_scale, &flag) has each fused step kernel
// (optim/sgd_step.h, optim/adam_step.h) set the parameter's flag from the
// elements it reads (slot_on), and add()s only the gradients it steps on the
// tensor-op path, so the check costs no pass and no launch of its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "autograd/variable.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

namespace coppice {

// Thrown where a computation refuses non-finite inputs (a mask update asked
// to rank NaN scores, a checkpoint asked to save them): an Error, so callers
// that catch Error see it as any other; the trainer catches this kind to skip
// the step under training.on_nonfinite: skip_step.
class NonfiniteError : public Error {
 public:
  using Error::Error;
};

// `slots` flags on the device (f32, one per thing the caller wants to tell
// apart: 1 for a yes/no answer, one per parameter to name the one that
// failed). A flag is 0 while every value added to it was finite and NaN after
// an inf or a NaN, so that a flag is itself a value to fold (a flag from
// another device is copied over and added). add() enqueues one read of the
// tensor's values and no host read; value() is what the caller reads when it
// reads anyway.
class NonfiniteFlag {
 public:
  NonfiniteFlag() : NonfiniteFlag(1) {}
  explicit NonfiniteFlag(int64_t slots);

  // Folds t's values (stored values of a sparse t) into flag `slot`;
  // undefined or empty tensors and integer or bool ones change nothing.
  void add(const Tensor& t, int64_t slot = 0);
  // Folds the gradient of each parameter that has one into flag `slot`.
  void add_gradients(const std::vector<Variable>& params, int64_t slot = 0);
  // Flag `slot` as an f32 0-d view for a kernel on `device` to set to NaN
  // itself (a fused optimizer step that tests the gradient it reads anyway:
  // Optimizer::step's `nonfinite`), the flags made there when nothing was
  // added yet; undefined when they live on another device (add() then).
  Tensor slot_on(int64_t slot, Device device);
  // The flags, f32 [slots], on the device of the first tensor added;
  // undefined when nothing was added.
  const Tensor& value() const { return flags_; }
  int64_t slots() const { return slots_; }
  // value() read to the host: true when every flag is 0 (or nothing was added).
  bool all_finite() const;

 private:
  int64_t slots_;
  Tensor flags_;
};

// Whether every value of t (stored values of a sparse t) is finite; one host read.
bool all_finite(const Tensor& t);

// Throws NonfiniteError "<op>: <what> holds non-finite values (inf or NaN)
// <why>" unless all_finite(t). `why` says what was refused ("; refusing to
// rank by them").
void check_finite(const Tensor& t, std::string_view op, std::string_view what, std::string_view why);

// The same for scores about to be ranked: "...; refusing to rank by them".
void check_finite_scores(const Tensor& scores, std::string_view op, std::string_view what);

// The name of parameter i (Variable::name(); "parameter <i>" when unnamed)
// of the first of `params` whose gradient is not finite, or "" when all are.
// One host read per parameter: for a step that already failed.
std::string first_nonfinite_gradient(const std::vector<Variable>& params);

}  // namespace coppice
