// Sparsity attributes propagated through a model (SparTA's TeSA): for every
// tensor of one traced forward pass (step_trace.h) and for its gradient in
// the backward pass, what is known of its zeros and values, inferred from
// the operands' attributes and each op's rule; then the output formats that
// follow from them, as output rules (sparsifiers/schedule.h) the run applies
// beside the job's own.
//
// The attribute of a tensor: its format (and block shape or n:m); where its
// zeros are (outside a stored pattern, where a relu made them, where dropout
// drew them, or unknown); whether its values are non-negative.
//
// The rules, by op (the name the graph records it by):
//   a sparse output                      its pattern: the pattern of the
//                                        input of the same format and shape
//                                        (relu on CSR, SDDMM on a layout), else its own
//   relu, linear_relu, relu_to_csr       zero where <= 0, non-negative
//   max_pool2d                           the input's (max of relu is relu of max)
//   zero-preserving unary ops            the input's zeros (tensor/unary_ops.h kZeroPreserving)
//   shape ops (reshape, permute, ...)    the input's zeros and sign, not its pattern
//   mul                                  zeros of either operand
//   dropout                              zeros drawn at random, the input's sign
//   anything else                        dense, nothing known
// Gradients: a tensor with a pattern (a sparse weight, a sparse activation)
// gets its gradient in that pattern (a masked weight's gradient stays
// masked); a tensor that a relu takes gets a gradient that is zero where the
// relu's output is; every other gradient is dense.
//
// The choice: a tensor that is zero where <= 0 and dense, each of whose
// consumers is a linear taking it as its input (the operand a product can
// take sparse) with a kernel for (CSR input, that linear's weight format) on
// the run's device, and whose traced value keeps at most max_density of its
// entries, is made CSR by the module that returned it (or the
// tensor a relu made it from): an output rule on that module keeping its
// positive entries, in CSR, `{inline: threshold(0), format: csr}`. That is
// the rule people write by hand for a relu MLP (its relu applied after the
// threshold changes nothing), so a run with the inferred rules trains as a
// run with those rules written out. A job's own output rule on a module wins
// over an inferred one.
#pragma once

#include <string>
#include <vector>

#include "models/propagation/step_trace.h"
#include "sparsifiers/schedule.h"
#include "tensor/device.h"

namespace coppice::propagation {

struct Attribute {
  enum class Zeros {
    kUnknown,           // nothing known
    kPattern,           // outside a stored pattern (pattern_of's)
    kWhereNotPositive,  // where a relu made them: x <= 0
    kRandom,            // drawn at random (dropout)
  };
  std::string format = "dense";
  FormatOptions options;
  Zeros zeros = Zeros::kUnknown;
  int pattern_of = kUntraced;  // kPattern: the tensor whose pattern this is
  bool non_negative = false;
  bool needs_gradient = true;  // false for a gradient nobody computes (the input's)
};

// "dense", "csr, pattern of #3", "dense, zero where <= 0, >= 0", "bsr 16x16, pattern of #7".
std::string describe(const Attribute& a);

struct TensorPlan {
  int id = 0;
  std::string name;         // "fc1.weight", "input", "fc1:LinearRelu#5"
  Attribute forward;        // the value's attribute as traced
  Attribute gradient;       // its gradient's in the backward pass
  std::string format;       // the format the plan gives the value
  std::string made_by;      // the kernels that made it in the traced step ("; "-joined)
  std::string consumed_by;  // where the plan makes it sparse: the kernels its consumers take it with
  std::string rule;         // the module whose inferred output rule makes `format`; else ""
  double density = -1;      // a relu output's non-zero fraction in the traced step; -1: not measured
  std::string left_dense;   // a relu output the plan could make sparse and does not: why
};

struct InferredRule {
  OutputRule rule;     // an exact selector of one module
  std::string reason;  // "fc1's output is zero where <= 0 (LinearRelu); fc2 takes it in linear(csr, dense) on cpu"
};

struct PropagateOptions {
  // A relu output becomes CSR only when at most this fraction of its entries
  // is non-zero in the traced step (1: whenever a kernel takes it). 0.1 by
  // default: at the half density of relu outputs at initialization a CSR
  // activation makes the step slower (docs/benchmarks.md, sparsity
  // propagation), so by default the plan names them and leaves them dense.
  double max_density = 0.1;
};

struct Plan {
  std::string device;               // "cpu", "cuda"
  std::vector<TensorPlan> tensors;  // every traced tensor, by id
  std::vector<InferredRule> rules;  // in module order of first use
};

// The attributes of every tensor of `trace` and the output rules they call
// for, with kernels looked up for `device`. Modules named in `explicit_rules`
// (the job's own output rules, by exact name or regex) get no inferred rule.
Plan propagate(const StepTrace& trace, DeviceType device, const std::vector<OutputRule>& explicit_rules = {},
               const PropagateOptions& options = {});

// The plan as JSON lines: a header ({"plan": 1, "device", "rules": n}), one
// line per inferred rule ({"rule": module, "forward": [...], "reason"}) and
// one per tensor ({"tensor": id, "name", "op", "module", "shape", "dtype",
// "forward", "gradient", "format", "made_by", "consumed_by", "rule",
// "left_dense", and "density" where measured}).
std::string plan_jsonl(const StepTrace& trace, const Plan& plan);

// The rules to add to a schedule: each inferred rule.
std::vector<OutputRule> inferred_rules(const Plan& plan);

}  // namespace coppice::propagation
