// What the parity harnesses (tests/sparse/*_parity_test.cc) share: the
// devices a binary sweeps, the dtypes a cell runs on, the per-dtype
// tolerances (stated here once), values brought to the host in f64 and the
// comparison of a cell's output with its reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_impl.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::parity {

// The CPU, and the first GPU when this binary has CUDA and there is one.
inline std::vector<Device> devices() {
  std::vector<Device> d = {Device::cpu()};
  if (cuda_available()) d.push_back(Device::cuda(0));
  return d;
}

inline bool runs_on(DeviceType type) { return type == DeviceType::kCpu || cuda_available(); }

// The formats declared by their levels that a cell of the level family
// (kLevelFamily) runs on: one of each kind of level, each holding any
// pattern of any shape the harnesses' element cases use (the 1x2 blocks
// divide their even column counts). Registered on first use.
inline const std::vector<std::string>& level_family_members() {
  static const std::vector<std::string> names = [] {
    const std::vector<std::pair<std::string, std::string>> declared = {
        {"parity_ell", "(dense, ranged)"},
        {"parity_coo_i64", "(compressed(0, non-unique), singleton(1)) index i64"},
        {"parity_csc_levels", "(dense(1), compressed(0))"},
        {"parity_bsr_of_coo", "blocked 1x2 (dense(0), compressed(1), compressed(2, non-unique), singleton(3))"},
    };
    std::vector<std::string> out;
    for (const auto& [name, text] : declared) {
      levels::register_level_format(name, levels::parse_level_format(text, "parity"), "parity");
      out.push_back(name);
    }
    return out;
  }();
  return names;
}

// Whether the level family's cells on `device` run `member`: on the CPU
// every member (the generic kernels); on CUDA those whose declaration is a
// built-in format's, which run on its kernels (the others are refused by
// name there: tests/sparse/cuda/level_cells_test).
inline bool family_runs(const std::string& member, DeviceType device) {
  if (device == DeviceType::kCpu) return true;
  const std::optional<levels::LevelFormat> declared = levels::registered_level_format(member);
  return declared && levels::builtin_format_of(*declared, {8, 8}).has_value();
}

// A cell's formats with each family replaced by the members a harness runs
// it on (on the cell's device): one list per member (a cell without a
// family: itself).
inline std::vector<std::vector<std::string>> cell_instances(const std::vector<std::string>& formats,
                                                            DeviceType device) {
  if (std::find(formats.begin(), formats.end(), kLevelFamily) == formats.end()) return {formats};
  std::vector<std::vector<std::string>> out;
  for (const std::string& member : level_family_members()) {
    if (!family_runs(member, device)) continue;
    std::vector<std::string> f = formats;
    for (std::string& g : f) g = g == kLevelFamily ? member : g;
    out.push_back(f);
  }
  return out;
}

// The name a format's kernels are found under: its family's for a format
// declared by its levels (the dispatcher's order: its own cell first).
inline std::vector<std::string_view> kernel_keys(const std::vector<std::string>& formats, std::string_view op,
                                                 DeviceType device) {
  std::vector<std::string_view> keys(formats.begin(), formats.end());
  if (Dispatcher::instance().find(op, device, keys) != nullptr) return keys;
  for (std::string_view& k : keys) {
    if (levels::registered_level_format(k)) k = kLevelFamily;
  }
  return keys;
}

// The floating dtypes every cell takes (sparse/ops.h: bf16/f16 compute in f32).
inline std::vector<DType> floating_dtypes() { return {DType::kF64, DType::kF32, DType::kBF16, DType::kF16}; }

// Per-dtype tolerances, relative. `rounding`: what rounding a result (or an
// input, or an intermediate of a fused op, twice at most) to the dtype costs;
// bf16 (8-bit mantissa, 2^-8 = 3.9e-3 a rounding) and f16 (11 bits, 4.9e-4)
// leave room for two roundings. `per_term`: what each term of a reduction
// adds when summed in the accumulation type (f64 for f64, f32 for the rest;
// 2^-23 = 1.2e-7), so a product's bound grows with its reduction length.
struct Tolerance {
  double rounding;
  double per_term;
};

inline Tolerance tolerance(DType t) {
  switch (t) {
    case DType::kF64: return {1e-12, 2.3e-16};
    case DType::kF32: return {2e-6, 1.2e-7};
    case DType::kBF16: return {1e-2, 1.2e-7};
    case DType::kF16: return {2e-3, 1.2e-7};
    default: return {0, 0};
  }
}

// Any tensor on the host in f64, a sparse one moved there in its format and
// made dense by the CPU: a device's own conversion to dense (nm_to_dense on
// CUDA) is a cell under test, not part of the reference.
// A dense view (a transpose) is made contiguous where it lies, before the copy.
inline Tensor host_dense_f64(const Tensor& t) {
  return to_dense(to_device(t.is_dense() ? t.contiguous() : t, Device::cpu())).to(DType::kF64).contiguous();
}
inline std::vector<double> host_f64(const Tensor& t) { return host_dense_f64(t).to_vector<double>(); }

// Whether `formats` names a sparse format (not dense, an absent optional
// input or the wildcard).
inline bool has_sparse_format(const std::vector<std::string>& formats) {
  for (const std::string& f : formats) {
    if (f != "dense" && f != "none" && f != "*") return true;
  }
  return false;
}

inline std::string cell_name(std::string_view op, const std::vector<std::string>& formats, DeviceType device) {
  std::string s = std::string(op) + "(";
  for (size_t i = 0; i < formats.size(); ++i) s += (i > 0 ? ", " : "") + formats[i];
  return s + ") on " + (device == DeviceType::kCpu ? "cpu" : "cuda");
}

// An output of a cell and the reference it must match.
struct Expected {
  Tensor want;               // f64 on the host (undefined: the output must be undefined too)
  Tensor scale;              // what bounds each element's error: the sum of the absolute terms (|a| @ |b| [+ |bias|]);
                             // undefined: |want|
  int64_t terms = 0;         // the reduction length
  double lipschitz = 1.0;    // of what follows the product: gelu' lies in [-0.13, 1.13]
  bool exact = false;        // moves or selects values (transpose, indices, masks): bit for bit
  bool may_decline = false;  // an undefined output is right too: a fused kernel that declines (linear_add)
  // The output's dtype where it is not the run's (indices, masks, f32 statistics).
  std::optional<DType> dtype = std::nullopt;
};

// Whether `got_tensor` matches `e` within the bounds of the run's `dtype`.
inline ::testing::AssertionResult matches(const Tensor& got_tensor, const Expected& e, DType dtype) {
  if (!got_tensor.defined() && e.may_decline) return ::testing::AssertionSuccess();
  if (got_tensor.shape() != e.want.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_to_string(got_tensor.shape()) << ", expected "
                                         << shape_to_string(e.want.shape());
  }
  const std::vector<double> got = host_f64(got_tensor), want = e.want.contiguous().to_vector<double>();
  const std::vector<double> scale = e.exact             ? std::vector<double>(want.size(), 0.0)
                                    : e.scale.defined() ? e.scale.contiguous().to_vector<double>()
                                                        : abs(e.want).contiguous().to_vector<double>();
  const Tolerance tol = tolerance(dtype);
  // The classical bound of a sum of `terms` products, each term rounded
  // (tol.rounding: inputs of a fused op, the result) and accumulated
  // (tol.per_term each), through what follows it (lipschitz); plus the
  // result's own rounding. An element whose terms are all zero (an empty
  // row) must be exactly zero.
  const double factor = e.lipschitz * (tol.rounding + static_cast<double>(e.terms) * tol.per_term);
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    const double bound = e.exact ? 0.0 : factor * scale[i] + tol.rounding * std::abs(want[i]);
    if (!(std::abs(got[i] - want[i]) <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i] << " (bound "
                                           << bound << ", " << e.terms << " terms)";
    }
  }
  return ::testing::AssertionSuccess();
}

// Whether a cell's outputs take the format its op's output rule declares
// (tensor/op_table.h's OpOutputRule; the elementwise tables' own rules are
// elementwise_parity_test's): the harnesses hold every cell they run to it.
inline ::testing::AssertionResult follows_output_rule(std::string_view op, const std::vector<Tensor>& in,
                                                      const std::vector<Tensor>& out) {
  const OpSpec* spec = find_op(op);
  if (spec == nullptr) return ::testing::AssertionFailure() << op << " is not declared";
  auto fail_at = [&](size_t i, std::string_view want) {
    return ::testing::AssertionFailure() << op << ": output " << i << " is " << out[i].format() << ", its rule says "
                                         << want;
  };
  switch (spec->output) {
    case OpOutputRule::kElementwise: return ::testing::AssertionSuccess();
    case OpOutputRule::kInPlace:
      for (size_t i = 0; i < out.size(); ++i) {
        bool an_input = false;
        for (const Tensor& t : in) an_input = an_input || (t.defined() && t.data_ptr() == out[i].data_ptr());
        if (!an_input) {
          return ::testing::AssertionFailure()
                 << op << " writes its inputs, but its output " << i << " is none of them";
        }
      }
      return ::testing::AssertionSuccess();
    case OpOutputRule::kDense:
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].defined() && !out[i].is_dense()) return fail_at(i, "dense");
      }
      return ::testing::AssertionSuccess();
    case OpOutputRule::kDenseOrCsr: {
      const bool both_csr = in.size() == 2 && in[0].format() == "csr" && in[1].format() == "csr";
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].format() != (both_csr ? "csr" : "dense")) return fail_at(i, both_csr ? "csr" : "dense");
      }
      return ::testing::AssertionSuccess();
    }
    case OpOutputRule::kPatternOf: {
      const Tensor& pattern = in[static_cast<size_t>(spec->pattern_input)];
      for (size_t i = 1; i < out.size(); ++i) {
        if (out[i].defined() && !out[i].is_dense()) return fail_at(i, "dense");
      }
      for (size_t i = 0; i < std::min<size_t>(out.size(), 1); ++i) {
        if (!out[i].defined()) continue;  // a fused kernel that declined (linear_grads)
        if (out[i].format() != pattern.format()) return fail_at(i, pattern.format());
        if (pattern_version(out[i]) != pattern_version(pattern)) {
          return ::testing::AssertionFailure()
                 << op << ": output " << i << " has another pattern version than input " << spec->pattern_input;
        }
      }
      return ::testing::AssertionSuccess();
    }
    case OpOutputRule::kTransposeOf: {
      const std::string f(in[0].format());
      const std::string want = f == "csr" ? "csc" : f == "csc" ? "csr" : f;
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].format() != want) return fail_at(i, want);
      }
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << op << ": unknown output rule";
}

// What a harness's sweep over the registered cells did.
struct CellSweep {
  int registered = 0;  // cells of an op the harness has a row for
  int run = 0;         // of those, run here
  int no_device = 0;   // of those, on a device this machine lacks
  int runs = 0;        // problems run (dtypes x cases)
};

// Runs every registered cell whose op has a row (row_of(op): a row pointer
// or nullptr) on this machine's devices with run_cell(row, cell) -> runs.
template <typename RowOf, typename RunCell>
CellSweep sweep_cells(const std::vector<Dispatcher::Cell>& cells, RowOf row_of, RunCell run_cell) {
  CellSweep sweep;
  for (const Dispatcher::Cell& cell : cells) {
    const auto* row = row_of(cell.op);
    if (row == nullptr) continue;
    ++sweep.registered;
    if (!runs_on(cell.device)) {
      ++sweep.no_device;
      continue;
    }
    sweep.runs += run_cell(*row, cell);
    ++sweep.run;
  }
  return sweep;
}

}  // namespace coppice::parity
