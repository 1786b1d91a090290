// The op parity harness's table (op_parity_test.cc), its shape: per op of
// tensor/op_table.h whose cells take dense operands only (products with
// sparse operands are product_problems.h's, elementwise ops
// elementwise_parity_test's), the dtypes its cells take and a builder of
// its cases: inputs made on the host from a seed (so every device sees the
// same values), rounded to the run's dtype, attributes, and the reference
// each output must match. The rows are in op_rows_tensor.h (tensor/'s ops)
// and op_rows_layers.h (attention, sparse/'s arrays, the sparsifiers' and
// optimizers' kernels); this header holds what they share.
//
// References, in order of preference:
//   wide_cell   the op's CPU dense cell on the same rounded values widened
//               to f64: the low-precision paths against f64 arithmetic;
//   same_cell   the CPU dense cell in the run's dtype, compared bit for bit,
//               for ops documented to agree bit for bit across devices in
//               each dtype (random fills, optimizer steps, sparsifier masks);
//   a row's own composition of CPU ops (the frontend's composite) for ops
//   whose only cell is CUDA's fused kernel (op_table.h's no_dense_cpu).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"
#include "tests/sparse/parity_util.h"
#include "tests/sparse/product_operands.h"

namespace coppice::parity {

// One run of a cell: its inputs (on the run's device), attributes, the inputs
// an in-place op writes (compared after the run, in place of outputs) and the
// expected outputs.
struct OpCase {
  std::string name;
  std::vector<Tensor> inputs;
  Attrs attrs;
  std::vector<int> written;
  std::vector<Expected> outputs;
};

// The cases of a cell with input `formats` ("dense", "none" for an absent
// optional input, "*" for a cell that takes any) in `dtype` on `device`.
using OpBuilder = std::vector<OpCase> (*)(const std::vector<std::string>& formats, DType dtype, const Device& device);

struct OpParityRow {
  const char* op;
  std::vector<DType> dtypes;  // every cell of the op takes each (op_table.h, kernels.h and the op's header say so)
  OpBuilder build;
};

inline const std::vector<DType> kFloating = {DType::kF64, DType::kF32, DType::kBF16, DType::kF16};
inline const std::vector<DType> kWide = {DType::kF64, DType::kF32};  // kernels fed f32/f64 by their frontends

// Host values of `shape` in +-[0.25, 2) (product_operands.h), or uniform in
// [lo, hi) (signs and zeros where the op cares), as f64 on the host.
inline Tensor uniform_values(const Shape& shape, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = u(rng);
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

// Host values of `shape` in quarters of [-2, 2]: exact in every dtype, with ties.
inline Tensor quarter_values(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = static_cast<double>(static_cast<int64_t>(rng() % 17) - 8) / 4.0;
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

// A host tensor rounded to `dtype` on `device` (integers and bools as they are).
inline Tensor on(const Tensor& host, DType dtype, const Device& device) {
  return (is_floating(host.dtype()) ? host.to(dtype) : host).to(device);
}
inline Tensor on(const Tensor& host, const Device& device) { return host.to(device); }

inline Tensor index_tensor(const std::vector<int64_t>& v, Shape shape, const Device& device) {
  return from_vector(v, std::move(shape)).to(device);
}

// A private host copy, floating values widened to f64 (`wide`) or kept in
// their dtype; undefined stays undefined.
inline Tensor host_copy(const Tensor& t, bool wide) {
  if (!t.defined()) return t;
  const Tensor h = to_device(t, Device::cpu()).clone();
  return wide && is_floating(h.dtype()) ? h.to(DType::kF64).contiguous() : h;
}

// The op's CPU dense cell on `inputs` (dense or undefined); for an in-place
// op (`written` non-empty) the inputs it wrote.
inline std::vector<Tensor> cpu_cell(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                    const std::vector<int>& written) {
  std::vector<std::string_view> formats;
  for (const Tensor& t : inputs) formats.push_back(t.defined() ? "dense" : "none");
  const Kernel* kernel = Dispatcher::instance().find(op, DeviceType::kCpu, formats);
  if (kernel == nullptr) throw std::runtime_error(std::string(op) + " has no CPU cell for the reference");
  std::vector<Tensor> out = (*kernel)(inputs, attrs);
  if (written.empty()) return out;
  out.clear();
  for (int i : written) out.push_back(inputs[static_cast<size_t>(i)]);
  return out;
}

inline std::vector<Tensor> host_copies(const std::vector<Tensor>& inputs, bool wide) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) out.push_back(host_copy(t, wide));
  return out;
}

// The CPU dense cell on the case's inputs widened to f64.
inline std::vector<Tensor> wide_cell(std::string_view op, const OpCase& c) {
  return cpu_cell(op, host_copies(c.inputs, true), c.attrs, c.written);
}
// The same on the inputs' absolute values: the scale of a linear op's error.
inline std::vector<Tensor> wide_cell_of_abs(std::string_view op, const OpCase& c) {
  std::vector<Tensor> in = host_copies(c.inputs, true);
  for (Tensor& t : in) {
    if (t.defined() && is_floating(t.dtype())) t = abs(t);
  }
  return cpu_cell(op, in, c.attrs, c.written);
}
// The CPU dense cell in the run's dtype.
inline std::vector<Tensor> same_cell(std::string_view op, const OpCase& c) {
  return cpu_cell(op, host_copies(c.inputs, false), c.attrs, c.written);
}

// Expected outputs. `near`: within the dtype's rounding of each element
// (relative), plus `terms` accumulations of `scale` (default |want|).
inline Expected near(const Tensor& want, int64_t terms = 0, const Tensor& scale = Tensor()) {
  Expected e;
  e.want = want.defined() ? host_copy(want, true) : want;
  e.scale = scale.defined() ? host_copy(scale, true) : scale;
  e.terms = terms;
  return e;
}
// Within the rounding of the output's largest magnitude: for outputs whose
// elements cancel (a normalized row, a softmax's gradient), whose error
// follows the row's size rather than each element's.
inline Expected normwise(const Tensor& want, int64_t terms = 0) {
  const Tensor w = host_copy(want, true);
  double m = 0.0;
  for (double v : w.to_vector<double>()) {
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  }
  return near(w, terms, full(w.shape(), m, TensorOptions(DType::kF64)));
}
// Bit for bit; `dtype`: the output's, where it is not the run's.
inline Expected exact(const Tensor& want, std::optional<DType> dtype = std::nullopt) {
  Expected e;
  e.want = want.defined() ? host_copy(want, true) : want;
  e.exact = true;
  e.dtype = dtype;
  return e;
}
// Every output of `want` bit for bit, integer and bool outputs in their dtype.
inline std::vector<Expected> all_exact(const std::vector<Tensor>& want, DType run) {
  std::vector<Expected> out;
  for (const Tensor& w : want) {
    out.push_back(exact(w, w.defined() && w.dtype() != run ? std::optional<DType>(w.dtype()) : std::nullopt));
  }
  return out;
}

}  // namespace coppice::parity
