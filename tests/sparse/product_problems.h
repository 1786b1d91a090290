// The ops of the product parity harness (product_parity_test.cc) as a table:
// per op, how a cell is run (the cells it promises on every device are the op
// table's), its inputs built from a case of product_operands.h in the cell's
// formats, and the CPU dense result in f64 it must match (with what bounds
// its error: the absolute terms summed and the reduction length).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"
#include "tests/sparse/parity_util.h"
#include "tests/sparse/product_operands.h"

namespace coppice::parity {

// One run of a cell: its inputs, attributes and expected outputs.
struct Problem {
  std::vector<Tensor> inputs;
  Attrs attrs;
  std::vector<Expected> outputs;
};

// Builds the problems of a cell with input `formats` for one case and dtype.
using Builder = std::vector<Problem> (*)(const std::vector<std::string>& formats, const SparseCase& c, DType dtype,
                                         const Device& device);

inline Tensor host(const Tensor& t) { return host_dense_f64(t); }

// Operand `i` of a cell: the case's sparse operand when formats[i] is sparse
// (or `patterned`: a dense operand with the case's zeros), else full values.
inline Tensor operand(const std::vector<std::string>& formats, size_t i, const SparseCase& c, int64_t rows,
                      int64_t cols, DType dtype, const Device& device, bool patterned = false) {
  const uint64_t seed = 101 + 17 * i;
  if (formats[i] != "dense" || patterned) return sparse_operand(c, formats[i], rows, cols, seed, dtype, device);
  return full_values({rows, cols}, seed).to(dtype).to(device);
}

inline Expected product(const Tensor& a, const Tensor& b) {
  const Tensor ha = host(a), hb = host(b);
  return {matmul(ha, hb), matmul(abs(ha), abs(hb)), ha.size(1)};
}

// matmul (a, b): (<fmt>, dense) and (dense, dense) multiply the case's
// operand [r, c] by [c, free]; (dense, <fmt>) takes [free, r] @ [r, c];
// (csr, csr) multiplies two sparse operands (SpGEMM).
inline std::vector<Problem> matmul_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                            const Device& d) {
  Tensor a, b;
  if (f[0] == "dense" && f[1] != "dense") {
    a = operand(f, 0, c, c.free, c.rows, t, d);
    b = operand(f, 1, c, c.rows, c.cols, t, d);
  } else {
    a = operand(f, 0, c, c.rows, c.cols, t, d, /*patterned=*/true);
    b = operand(f, 1, c, c.cols, c.free, t, d);
  }
  return {{{a, b}, {}, {product(a, b)}}};
}

// linear (x, weight[, bias]) = x @ weight^T [+ bias]: (<fmt>, dense) takes
// the case's operand as x [r, c] and weight [free, c]; the others weight
// [r, c] (sparse, or dense with its zeros) and x [free, c].
inline Problem linear_problem(const std::vector<std::string>& f, const SparseCase& c, DType t, const Device& d) {
  Tensor x, w;
  if (f[0] != "dense") {
    x = operand(f, 0, c, c.rows, c.cols, t, d);
    w = operand(f, 1, c, c.free, c.cols, t, d);
  } else {
    x = operand(f, 0, c, c.free, c.cols, t, d);
    w = operand(f, 1, c, c.rows, c.cols, t, d, /*patterned=*/true);
  }
  Problem p{{x, w}, {}, {product(x, host(w).t())}};
  if (f.size() == 3) {
    const Tensor bias = full_values({w.size(0)}, 7).to(t).to(d);
    p.inputs.push_back(bias);
    Expected& e = p.outputs[0];
    e.want = add(e.want, host(bias));
    e.scale = add(e.scale, abs(host(bias)));
  }
  return p;
}

inline std::vector<Problem> linear_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                            const Device& d) {
  return {linear_problem(f, c, t, d)};
}

inline std::vector<Problem> linear_relu_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                                 const Device& d) {
  Problem p = linear_problem(f, c, t, d);
  p.outputs[0].want = relu(p.outputs[0].want);
  return {p};
}

// linear_add (x, weight, bias or none, r) = r + x @ weight^T [+ bias], x
// [free, c], weight [r, c] and r [free, r]: undefined too where the kernel
// declines (its routes without the fused write-out; residual_products_test
// says which).
inline std::vector<Problem> linear_add_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                                const Device& d) {
  const std::vector<std::string> lf{f[0], f[1]};
  Problem p = linear_problem(f[2] == "dense" ? std::vector<std::string>{f[0], f[1], f[2]} : lf, c, t, d);
  if (f[2] != "dense") p.inputs.push_back(Tensor());
  const Tensor r = full_values({p.inputs[0].size(0), p.inputs[1].size(0)}, 11).to(t).to(d);
  p.inputs.push_back(r);
  Expected& e = p.outputs[0];
  e.want = add(e.want, host(r));
  e.scale = add(e.scale, abs(host(r)));
  e.may_decline = true;
  return {p};
}

// linear_gelu: {gelu(z), z} for z = linear(x, weight[, bias]); and with the
// attribute tanh, {gelu_tanh(z), z} (its derivative lies in [-0.13, 1.13]
// too).
inline std::vector<Problem> linear_gelu_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                                 const Device& d) {
  const Problem z_only = linear_problem(f, c, t, d);
  std::vector<Problem> out;
  for (bool tanh_form : {false, true}) {
    Problem p = z_only;
    Expected y = p.outputs[0];
    y.want = tanh_form ? gelu_tanh(y.want) : gelu(y.want);
    y.lipschitz = 1.13;
    p.outputs.insert(p.outputs.begin(), y);
    if (tanh_form) p.attrs.set("tanh", true);
    out.push_back(p);
  }
  return out;
}

// matmul_gelu_backward (g [free, r], weight [r, c], z [free, c]) =
// gelu_backward(g @ weight, z); with the attribute tanh,
// gelu_tanh_backward(g @ weight, z).
inline std::vector<Problem> matmul_gelu_backward_problems(const std::vector<std::string>& f, const SparseCase& c,
                                                          DType t, const Device& d) {
  const Tensor g = operand(f, 0, c, c.free, c.rows, t, d);
  const Tensor w = operand(f, 1, c, c.rows, c.cols, t, d, /*patterned=*/true);
  const Tensor z = operand(f, 2, c, c.free, c.cols, t, d);
  std::vector<Problem> out;
  for (bool tanh_form : {false, true}) {
    Expected e = product(g, w);
    e.want = tanh_form ? gelu_tanh_backward(e.want, host(z)) : gelu_backward(e.want, host(z));
    e.lipschitz = 1.13;
    Attrs attrs;
    if (tanh_form) attrs.set("tanh", true);
    out.push_back({{g, w, z}, attrs, {e}});
  }
  return out;
}

// sddmm (a [r, free], b [free, c], pattern [r, c]) = (a @ b) at the pattern's
// stored positions (counted from with_values of ones, so a stored zero
// counts).
inline std::vector<Problem> sddmm_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                           const Device& d) {
  const Tensor a = operand(f, 0, c, c.rows, c.free, t, d);
  const Tensor b = operand(f, 1, c, c.free, c.cols, t, d);
  const Tensor pattern = operand(f, 2, c, c.rows, c.cols, t, d);
  const Tensor stored = pattern.is_sparse() ? host(with_values(pattern, ones_like(values(pattern))))
                                            : ones({c.rows, c.cols}, TensorOptions(DType::kF64));
  Expected e = product(a, b);
  e.want = mul(e.want, stored);
  e.scale = mul(e.scale, stored);
  return {{{a, b, pattern}, {}, {e}}};
}

// sddmm_row_sums (a, b, pattern) = {sddmm(a, b, pattern), a's row sums}.
inline std::vector<Problem> sddmm_row_sums_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                                    const Device& d) {
  std::vector<Problem> out = sddmm_problems(f, c, t, d);
  const Tensor a = host(out[0].inputs[0]);
  out[0].outputs.push_back({sum(a, {1}), sum(abs(a), {1}), c.free});
  return out;
}

// linear_grads (g [free, r], x [free, c], weight [r, c][, z [free, c]]) =
// {sddmm(g^T, x, weight), g @ weight (through gelu's gradient at z, as
// matmul_gelu_backward), g's column sums}: a fused kernel that may decline
// (then every output is undefined).
inline std::vector<Problem> linear_grads_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                                  const Device& d) {
  const Tensor g = operand(f, 0, c, c.free, c.rows, t, d);
  const Tensor x = operand(f, 1, c, c.free, c.cols, t, d);
  const Tensor w = operand(f, 2, c, c.rows, c.cols, t, d);
  const Tensor stored = host(with_values(w, ones_like(values(w))));
  const Tensor hg = host(g);
  Expected dw = product(hg.t().contiguous(), x);
  dw.want = mul(dw.want, stored);
  dw.scale = mul(dw.scale, stored);
  Expected db{sum(hg, {0}), sum(abs(hg), {0}), c.free};
  std::vector<Problem> out;
  for (int form = 0; form < (f.size() > 3 ? 2 : 1); ++form) {
    Expected dx = product(g, w);
    std::vector<Tensor> inputs{g, x, w};
    Attrs attrs;
    attrs.set("bias", true);
    if (f.size() > 3) {
      const Tensor z = operand(f, 3, c, c.free, c.cols, t, d);
      dx.want = form == 1 ? gelu_tanh_backward(dx.want, host(z)) : gelu_backward(dx.want, host(z));
      dx.lipschitz = 1.13;
      inputs.push_back(z);
      if (form == 1) attrs.set("tanh", true);
    }
    std::vector<Expected> outputs{dw, dx, db};
    for (Expected& e : outputs) e.may_decline = true;
    out.push_back({inputs, attrs, outputs});
  }
  return out;
}

// sum over rows, over columns (kept as a dim) and over both, as sum's
// frontend asks (dims normalized and sorted).
inline std::vector<Problem> sum_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                         const Device& d) {
  const Tensor x = operand(f, 0, c, c.rows, c.cols, t, d, /*patterned=*/true);
  std::vector<Problem> out;
  for (const auto& [dims, keepdim] :
       std::vector<std::pair<std::vector<int64_t>, bool>>{{{0}, false}, {{1}, true}, {{0, 1}, false}}) {
    Attrs attrs;
    attrs.set("dims", dims).set("keepdim", keepdim);
    int64_t terms = 1;
    for (int64_t dim : dims) terms *= x.size(dim);
    out.push_back({{x}, attrs, {{sum(host(x), dims, keepdim), sum(abs(host(x)), dims, keepdim), terms}}});
  }
  return out;
}

// A format's own conversion to dense on a device (NmImpl::to_dense on CUDA
// runs op::kNmToDense), against the CPU's: bit for bit.
inline std::vector<Problem> to_dense_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                              const Device& d) {
  const Tensor x = operand(f, 0, c, c.rows, c.cols, t, d);
  Expected e;
  e.want = host(x);
  e.exact = true;
  return {{{x}, {}, {e}}};
}

inline std::vector<Problem> transpose_problems(const std::vector<std::string>& f, const SparseCase& c, DType t,
                                               const Device& d) {
  const Tensor x = operand(f, 0, c, c.rows, c.cols, t, d, /*patterned=*/true);
  Expected e;
  e.want = host(x).t().contiguous();
  e.exact = true;
  return {{{x}, {}, {e}}};
}

// A row of the table: an op (its promised cells are the op table's,
// tensor/op_table.h: OpSpec::promised), whether its cases must be n:m both
// ways (transpose re-compresses n:m along the other dim) and the builder.
struct OpRow {
  const char* op;
  bool transposable_only;
  Builder build;
};

inline const std::vector<OpRow>& table() {
  static const auto* rows = new std::vector<OpRow>{
      {op::kMatmul, false, matmul_problems},
      {op::kLinear, false, linear_problems},
      {op::kLinearRelu, false, linear_relu_problems},
      {op::kLinearAdd, false, linear_add_problems},
      {op::kLinearGelu, false, linear_gelu_problems},
      {op::kMatmulGeluBackward, false, matmul_gelu_backward_problems},
      {op::kSddmm, false, sddmm_problems},
      {op::kSddmmRowSums, false, sddmm_row_sums_problems},
      {op::kLinearGrads, false, linear_grads_problems},
      {op::kSum, false, sum_problems},
      {op::kTranspose, true, transpose_problems},
      {op::kNmToDense, false, to_dense_problems},
  };
  return *rows;
}

// The cells the op table promises for a row's op on every device.
inline const std::vector<std::vector<std::string>>& promised_cells(const OpRow& row) {
  return find_op(row.op)->promised;
}

inline const OpRow* row_of(std::string_view op) {
  for (const OpRow& r : table()) {
    if (r.op == op) return &r;
  }
  return nullptr;
}

}  // namespace coppice::parity
