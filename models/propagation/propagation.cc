#include "models/propagation/propagation.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <string_view>

#include "sparse/ops/value_kernels.h"
#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/io/json.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"
#include "tensor/shape.h"

namespace coppice::propagation {
namespace {

using Zeros = Attribute::Zeros;

bool is_one_of(std::string_view op, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), op) != names.end();
}

// The graph's name for a relu-like op: its output is zero where its input is <= 0.
bool makes_relu_zeros(std::string_view op) {
  return is_one_of(op, {"Relu", "LinearRelu", "SparseLinearRelu", "ReluToCsr"});
}

bool is_shape_op(std::string_view op) {
  return is_one_of(op, {"Reshape", "View", "Flatten", "Permute", "Transpose", "T", "Select", "Squeeze", "Unsqueeze",
                        "Narrow", "Slice", "Expand", "ToDtype"});
}

// A unary op of tensor/unary_ops.h with f(0) = 0, by the graph's name ("Neg").
bool is_zero_preserving_unary(std::string op) {
  if (op.empty()) return false;
  op[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(op[0])));
  const std::vector<std::string>& names = sparse_kernels::zero_preserving_unary_ops();
  return std::find(names.begin(), names.end(), op) != names.end();
}

// The linears: they take input 0 (x) sparse with a dense or sparse weight (input 1).
bool is_linear(std::string_view op) {
  return is_one_of(op, {"Linear", "LinearRelu", "SparseLinear", "SparseLinearRelu"});
}

const TracedTensor& at(const StepTrace& trace, int id) { return trace.tensors[static_cast<size_t>(id)]; }

bool has_zeros(const Attribute& a) { return a.zeros != Zeros::kUnknown; }

// The attribute of the input at `position` of `t` (dense, nothing known, when untraced).
const Attribute* input_attribute(const std::vector<Attribute>& attrs, const TracedTensor& t, size_t position) {
  if (position >= t.inputs.size() || t.inputs[position] == kUntraced) return nullptr;
  return &attrs[static_cast<size_t>(t.inputs[position])];
}

Attribute forward_attribute(const StepTrace& trace, const std::vector<Attribute>& attrs, const TracedTensor& t) {
  Attribute a;
  a.format = t.format;
  a.options = t.options;
  if (t.kind == TracedTensor::Kind::kInput) a.needs_gradient = false;
  if (t.format != "dense") {
    // A pattern: an input's of the same format and shape passes it on, else its own.
    a.zeros = Zeros::kPattern;
    a.pattern_of = t.id;
    for (int in : t.inputs) {
      if (in == kUntraced) continue;
      const TracedTensor& src = at(trace, in);
      if (src.format == t.format && src.shape == t.shape) {
        a.pattern_of = attrs[static_cast<size_t>(in)].pattern_of;
        break;
      }
    }
    if (makes_relu_zeros(t.op)) a.non_negative = true;
    return a;
  }
  if (t.kind != TracedTensor::Kind::kOp) return a;
  const Attribute* x = input_attribute(attrs, t, 0);
  if (makes_relu_zeros(t.op)) {
    a.zeros = Zeros::kWhereNotPositive;
    a.non_negative = true;
  } else if (x != nullptr && (is_shape_op(t.op) || t.op == "MaxPool2d")) {
    // The same values, moved (a pattern is not a dense tensor's: it stays with the sparse one).
    if (x->zeros != Zeros::kPattern) a.zeros = x->zeros;
    a.non_negative = x->non_negative;
  } else if (x != nullptr && is_zero_preserving_unary(t.op)) {
    if (x->zeros != Zeros::kPattern) a.zeros = x->zeros;
  } else if (t.op == "Dropout") {
    a.zeros = Zeros::kRandom;
    a.non_negative = x != nullptr && x->non_negative;
  } else if (t.op == "Mul" || t.op == "SparseMul") {
    const Attribute* y = input_attribute(attrs, t, 1);
    for (const Attribute* in : {x, y}) {
      if (in != nullptr && has_zeros(*in) && in->zeros != Zeros::kPattern) a.zeros = in->zeros;
    }
    a.non_negative = x != nullptr && y != nullptr && x->non_negative && y->non_negative;
  }
  return a;
}

// The gradient's attribute, once every forward attribute is known.
Attribute gradient_attribute(const StepTrace& trace, const std::vector<Attribute>& forward, const TracedTensor& t) {
  const Attribute& f = forward[static_cast<size_t>(t.id)];
  Attribute g;
  g.needs_gradient = f.needs_gradient;
  if (!g.needs_gradient) {
    g.format = "none";
    return g;
  }
  if (f.zeros == Zeros::kPattern) {
    g.format = f.format;
    g.options = f.options;
    g.zeros = Zeros::kPattern;
    g.pattern_of = f.pattern_of;
    return g;
  }
  // Through a relu every consumer of which is one: zero where its output is.
  bool all_relu = !t.consumers.empty();
  for (const auto& [consumer, position] : t.consumers) {
    all_relu = all_relu && position == 0 && at(trace, consumer).op == "Relu";
  }
  if (all_relu) g.zeros = Zeros::kWhereNotPositive;
  return g;
}

std::string options_text(const std::string& format, const FormatOptions& o) {
  if (o.block_rows > 0) return str_cat(format, " ", o.block_rows, "x", o.block_cols > 0 ? o.block_cols : o.block_rows);
  if (o.n > 0) return str_cat(format, " ", o.n, ":", o.m);
  return format;
}

std::string tensor_name(const TracedTensor& t) {
  if (t.kind != TracedTensor::Kind::kOp) return t.op;
  return str_cat(t.module.empty() ? "model" : t.module, ":", t.op, "#", t.id);
}

// The kernel a linear taking `x_format` as x and `weight` as its weight
// dispatches to on `device`, as "linear(csr, dense) on cpu"; "" when none is registered.
std::string linear_kernel(const std::string& x_format, const TracedTensor& weight, DeviceType device) {
  const std::string_view formats[] = {x_format, weight.format};
  if (Dispatcher::instance().find(op::kLinear, device, formats) == nullptr) return "";
  return str_cat(op::kLinear, "(", x_format, ", ", weight.format, ") on ", device_type_name(device));
}

bool named_by(const std::vector<OutputRule>& rules, const std::string& module) {
  return std::any_of(rules.begin(), rules.end(), [&](const OutputRule& r) { return r.selector.matches(module); });
}

// The output rule that keeps a module's positive entries in CSR.
OutputRule csr_of_positive(const std::string& module) {
  OutputRule rule;
  rule.selector = Selector::exact(module);
  StageSpec stage;
  SparsifierSpec threshold;
  threshold.name = "threshold";
  threshold.params["threshold"] = SpecValue(int64_t{0});
  stage.inline_sparsifier = threshold;
  stage.output_format.name = "csr";
  rule.forward.push_back(stage);
  return rule;
}

// The module whose output rule can make `r` (a tensor zero where <= 0) CSR:
// the one that returned it, or that returned what a relu made it from.
std::string module_making(const StepTrace& trace, const TracedTensor& r) {
  if (!r.returned_by.empty()) return r.returned_by.front();
  if (r.op == "Relu" && !r.inputs.empty() && r.inputs[0] != kUntraced) {
    const TracedTensor& pre = at(trace, r.inputs[0]);
    if (!pre.returned_by.empty() && pre.consumers.size() == 1) return pre.returned_by.front();
  }
  return "";
}

// The fraction of `t`'s entries that are not zero.
double non_zero_fraction(const Tensor& t) {
  if (t.numel() == 0) return 0.0;
  return sum(ne(t, 0.0).to(DType::kF64)).item() / static_cast<double>(t.numel());
}

std::string fmt_fraction(double f) {
  std::ostringstream out;
  out.precision(3);
  out << f;
  return out.str();
}

}  // namespace

std::string describe(const Attribute& a) {
  if (a.format == "none") return "none";
  std::string out = options_text(a.format, a.options);
  switch (a.zeros) {
    case Zeros::kUnknown: break;
    case Zeros::kPattern: out += str_cat(", pattern of #", a.pattern_of); break;
    case Zeros::kWhereNotPositive: out += ", zero where <= 0"; break;
    case Zeros::kRandom: out += ", zeros at random"; break;
  }
  if (a.non_negative) out += ", >= 0";
  return out;
}

Plan propagate(const StepTrace& trace, DeviceType device, const std::vector<OutputRule>& explicit_rules,
               const PropagateOptions& options) {
  Plan plan;
  plan.device = std::string(device_type_name(device));
  std::vector<Attribute> forward;
  forward.reserve(trace.tensors.size());
  for (const TracedTensor& t : trace.tensors) forward.push_back(forward_attribute(trace, forward, t));

  std::set<std::string> ruled;
  for (const TracedTensor& t : trace.tensors) {
    TensorPlan p;
    p.id = t.id;
    p.name = tensor_name(t);
    p.forward = forward[static_cast<size_t>(t.id)];
    p.gradient = gradient_attribute(trace, forward, t);
    p.format = t.format;
    p.made_by = str_join(t.kernels, "; ");
    plan.tensors.push_back(std::move(p));
  }

  for (const TracedTensor& r : trace.tensors) {
    const Attribute& a = forward[static_cast<size_t>(r.id)];
    if (a.zeros != Zeros::kWhereNotPositive || a.format != "dense" || r.consumers.empty() || r.shape.size() != 2)
      continue;
    const std::string module = module_making(trace, r);
    if (module.empty() || ruled.count(module) || named_by(explicit_rules, module)) continue;
    TensorPlan& p = plan.tensors[static_cast<size_t>(r.id)];
    p.density = non_zero_fraction(r.value);
    std::string kernels;
    for (const auto& [consumer, position] : r.consumers) {
      const TracedTensor& c = at(trace, consumer);
      const std::string who = c.module.empty() ? std::string("the model") : c.module;
      std::string kernel;
      if (position == 0 && is_linear(c.op) && c.inputs.size() >= 2 && c.inputs[1] != kUntraced)
        kernel = linear_kernel("csr", at(trace, c.inputs[1]), device);
      if (kernel.empty()) {
        p.left_dense = str_cat(who, "'s ", c.op, " has no kernel taking it as CSR on ", device_type_name(device));
        break;
      }
      kernels += str_cat(kernels.empty() ? "" : "; ", who, " takes it in ", kernel);
    }
    if (!p.left_dense.empty()) continue;
    if (p.density > options.max_density) {
      p.left_dense =
          str_cat(fmt_fraction(p.density), " non-zero, above max_density ", fmt_fraction(options.max_density));
      continue;
    }
    ruled.insert(module);
    p.format = "csr";
    p.gradient.format = "csr";
    p.gradient.zeros = Zeros::kPattern;  // a sparse output's gradient flows in its pattern
    p.gradient.pattern_of = r.id;
    p.consumed_by = kernels;
    p.rule = module;
    plan.rules.push_back({csr_of_positive(module), str_cat(module, "'s output is zero where <= 0 (", r.op, "; ",
                                                           fmt_fraction(p.density), " non-zero); ", kernels)});
  }
  return plan;
}

std::vector<OutputRule> inferred_rules(const Plan& plan) {
  std::vector<OutputRule> out;
  for (const InferredRule& r : plan.rules) out.push_back(r.rule);
  return out;
}

std::string plan_jsonl(const StepTrace& trace, const Plan& plan) {
  using json::quote;
  std::ostringstream out;
  out << "{\"plan\": 1, \"device\": " << quote(plan.device) << ", \"tensors\": " << plan.tensors.size()
      << ", \"rules\": " << plan.rules.size() << "}\n";
  for (const InferredRule& r : plan.rules) {
    const StageSpec& s = r.rule.forward.front();
    out << "{\"rule\": " << quote(r.rule.selector.pattern)
        << ", \"forward\": [{\"inline\": " << quote(describe(*s.inline_sparsifier))
        << ", \"format\": " << quote(s.output_format.name) << "}], \"reason\": " << quote(r.reason) << "}\n";
  }
  for (const TensorPlan& p : plan.tensors) {
    const TracedTensor& t = at(trace, p.id);
    out << "{\"tensor\": " << p.id << ", \"name\": " << quote(p.name) << ", \"op\": " << quote(t.op)
        << ", \"module\": " << quote(t.module) << ", \"shape\": " << shape_to_string(t.shape)
        << ", \"dtype\": " << quote(std::string(dtype_name(t.dtype))) << ", \"forward\": " << quote(describe(p.forward))
        << ", \"gradient\": " << quote(describe(p.gradient)) << ", \"format\": " << quote(p.format)
        << ", \"made_by\": " << quote(p.made_by) << ", \"consumed_by\": " << quote(p.consumed_by)
        << ", \"rule\": " << quote(p.rule) << ", \"left_dense\": " << quote(p.left_dense);
    if (p.density >= 0) out << ", \"density\": " << fmt_fraction(p.density);
    out << "}\n";
  }
  return out.str();
}

}  // namespace coppice::propagation
