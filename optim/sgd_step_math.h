// The per-element arithmetic of the fused SGD step (optim/sgd_step.h),
// shared by the CPU twin and the CUDA kernel (optim/cuda/sgd_step.cu); plain
// C++ that nvcc also compiles, so it includes no tensor headers.
#pragma once

#include <cstdint>

#include "optim/fused_step_math.h"

namespace coppice {

struct SgdStepArgs {
  double lr = 1e-3, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  // No momentum buffer yet (the parameter's first step): buf = g, and the
  // buffer's old contents are never read (it may be uninitialised).
  bool first = false;

  // Every field with its name: the dispatcher's attributes (optim/fused_step.h).
  template <typename F>
  void for_each_field(F&& f) {
    f("lr", lr);
    f("momentum", momentum);
    f("dampening", dampening);
    f("weight_decay", weight_decay);
    f("nesterov", nesterov);
    f("first", first);
  }
};

// The per-element constants, rounded to T as the tensor-op path rounds its
// scalars (Sgd::update: mul(t, momentum) multiplies by T(momentum)).
template <typename T>
struct SgdStepConstants {
  T lr, momentum, one_minus_dampening, weight_decay;
  bool has_decay, has_momentum, nesterov, first;

  static SgdStepConstants make(const SgdStepArgs& a) {
    SgdStepConstants c;
    c.lr = static_cast<T>(a.lr);
    c.momentum = static_cast<T>(a.momentum);
    c.one_minus_dampening = static_cast<T>(1.0 - a.dampening);
    c.weight_decay = static_cast<T>(a.weight_decay);
    c.has_decay = a.weight_decay != 0.0;
    c.has_momentum = a.momentum != 0.0;
    c.nesterov = a.nesterov;
    c.first = a.first;
    return c;
  }

  // Whether an element reads its old momentum buffer.
  COPPICE_OPTIM_HD bool reads_buffer() const { return has_momentum && !first; }
};

// One element, the operations of Sgd::update's tensor-op path in its order:
// p updated; buf updated when c.has_momentum (read only when
// c.reads_buffer()), untouched otherwise.
template <typename T>
COPPICE_OPTIM_HD inline void sgd_step_element(T& p, T g, T& buf, const SgdStepConstants<T>& c) {
  if (c.has_decay) g = add_rn(g, mul_rn(p, c.weight_decay));
  if (c.has_momentum) {
    buf = c.first ? g : add_rn(mul_rn(buf, c.momentum), mul_rn(g, c.one_minus_dampening));
    g = c.nesterov ? add_rn(g, mul_rn(buf, c.momentum)) : buf;
  }
  p = sub_rn(p, mul_rn(g, c.lr));
}

}  // namespace coppice
