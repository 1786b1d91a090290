#include "autograd/functions/sparse_nn.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/nn.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "sparse/convert.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/entry_remap.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/ops.h"
#include "tensor/shape.h"

namespace coppice {
namespace {

using Grads = std::vector<Tensor>;

Variable flat_values(const Variable& x) { return reshape(values(x), {-1}); }

// v taken at `take`, where take's largest value (v's length) reads a zero.
Variable take_with_zero(const Variable& v, const Tensor& take) {
  Variable padded = cat({v, Variable(zeros({1}, v.value().options()))}, 0);
  return index_select(padded, 0, take);
}

// `pattern` holding v (flattened) as its values.
Variable holding(const Tensor& pattern, const Variable& v) {
  return with_values(pattern, reshape(v, values(pattern).shape()));
}

// The options a tensor of a format with options was made with.
FormatOptions options_of(const Tensor& t, std::string_view op) {
  const FormatSpec& spec = format_spec(t.format(), op);
  return spec.options_of ? spec.options_of(t) : FormatOptions{};
}

// A pattern of `format` (and options) over sorted, distinct flat positions of
// `shape`, on `device`: their COO (ones as placeholders, since n:m keeps only
// non-zeros) converted.
Tensor pattern_at(const std::vector<int64_t>& sorted_positions, const Shape& shape, std::string_view format,
                  const FormatOptions& options, const TensorOptions& values_options) {
  const auto nnz = static_cast<int64_t>(sorted_positions.size());
  const auto nd = static_cast<int64_t>(shape.size());
  std::vector<int64_t> coords(static_cast<size_t>(nd * nnz));
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t p = sorted_positions[k];
    for (int64_t d = nd; d-- > 0;) {
      coords[d * nnz + k] = p % shape[d];
      p /= shape[d];
    }
  }
  Tensor coo = sparse_coo(from_vector(coords, {nd, nnz}).to(values_options.device), ones({nnz}, values_options), shape,
                          /*coalesced=*/true);
  return format == "coo" ? coo : to_format(coo, format, options);
}

std::vector<int64_t> sorted_distinct(std::vector<int64_t> positions) {
  positions.erase(std::remove(positions.begin(), positions.end(), int64_t{-1}), positions.end());
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

// x's entries as the rows of a CSR along `dim`, and the way back.
struct Rows {
  Tensor csr;       // the pattern [lines, size along dim]
  Variable values;  // x's values in csr's order
  Tensor back;      // for each element of values(x), its element of csr's values, or nnz (a zero)
  bool identity = false;
};

Rows rows_of(const Variable& x, int64_t dim, const char* op) {
  const Tensor& xv = x.value();
  const int64_t d = normalize_dim(dim, xv.dim(), op);
  if (xv.layout() == Layout::kCsr && d == xv.dim() - 1) return {xv, values(x), Tensor(), true};
  EntryAxes axes;
  axes.sizes = xv.shape();
  axes.input_axes = xv.dim();
  std::vector<int64_t> others;
  for (int64_t i = 0; i < xv.dim(); ++i)
    if (i != d) others.push_back(i);
  axes.out_dims = {others, {d}};
  RemappedPattern r = remap_stored_entries(xv, axes, "csr", op);
  const Tensor take = r.take.to(Device::cpu()).contiguous();
  const int64_t nnz = take.numel();
  std::vector<int64_t> back(static_cast<size_t>(values(xv).numel()), nnz);
  for (int64_t k = 0; k < nnz; ++k) back[take.data<int64_t>()[k]] = k;
  return {r.pattern, index_select(flat_values(x), 0, r.take),
          from_vector(back, {static_cast<int64_t>(back.size())}).to(xv.device()), false};
}

// x's pattern holding v, given in rows' order.
Variable from_rows(const Variable& x, const Rows& rows, const Variable& v) {
  if (rows.identity) return with_values(x.value(), v);
  return holding(x.value(), take_with_zero(v, rows.back));
}

// Sums over each row of a CSR pattern holding v ([rows, 1]), and a [rows, 1]
// value at every entry of its row: one SpMM with a column of ones, and a
// product keeping the pattern.
Tensor row_sums(const Tensor& csr, const Tensor& v) {
  return matmul(with_values(csr, v.contiguous()), ones({csr.size(1), 1}, v.options()));
}
Tensor at_entries(const Tensor& csr, const Tensor& per_row) {
  return values(mul(with_values(csr, ones_like(values(csr))), per_row));
}
Variable row_sums(const Tensor& csr, const Variable& v) {
  return matmul(with_values(csr, v), Variable(ones({csr.size(1), 1}, v.value().options())));
}
Variable at_entries(const Tensor& csr, const Variable& per_row) {
  return values(mul(Variable(with_values(csr, ones_like(values(csr)))), per_row));
}

}  // namespace

Variable to_format(const Variable& x, std::string_view format, const FormatOptions& options) {
  COPPICE_CHECK(x.defined(), "to_format: the operand is undefined");
  const Tensor& xv = x.value();
  if (format == "dense") return to_dense(x);
  Tensor target = to_format(xv, format, options);
  if (xv.is_dense()) return mul(Variable(with_values(target, ones_like(values(target)))), x);
  if (target.is_same(xv)) return x;
  return holding(target, take_with_zero(flat_values(x), entry_take(target, stored_positions(xv), "to_format")));
}

namespace autograd_detail {

Variable sparse_softmax(const Variable& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const Rows rows = rows_of(x, dim, op);
  const Tensor csr = rows.csr;
  const Tensor crow = csr_impl(csr, op).pointers();
  const Tensor v = rows.values.value().contiguous();
  const Tensor y = csr_row_softmax(crow, v);
  if (!log) {
    Variable out = record(y, "SparseSoftmaxBackward", {rows.values}, [crow, y](const Tensor& g, const GradNeeds&) {
      return Grads{csr_row_softmax_backward(crow, y, g.contiguous())};
    });
    return from_rows(x, rows, out);
  }
  // Each row's log-sum-exp is v - log(y) at every entry whose y did not
  // underflow: their y-weighted mean, so no log of a 0 is taken.
  const Tensor kept = gt(y, 0.0), zero = zeros_like(y);
  const Tensor term = where(kept, mul(y, sub(v, coppice::log(y))), zero);
  const Tensor lse = div(row_sums(csr, term), row_sums(csr, where(kept, y, zero)));
  Variable out = record(sub(v, at_entries(csr, lse)), "SparseLogSoftmaxBackward", {rows.values},
                        [csr, y](const Tensor& g, const GradNeeds&) {
                          const Tensor gc = g.contiguous();
                          return Grads{sub(gc, mul(y, at_entries(csr, row_sums(csr, gc))))};
                        });
  return from_rows(x, rows, out);
}

Variable sparse_layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                           const Variable& bias, double eps) {
  const Tensor& xv = x.value();
  COPPICE_CHECK(xv.dim() == 2 && normalized_shape == Shape{xv.size(1)},
                "layer_norm: a sparse input is normalized over the stored entries of each row: expected a 2-D "
                "operand and normalized_shape [columns], got ",
                shape_to_string(xv.shape()), " and ", shape_to_string(normalized_shape));
  const Rows rows = rows_of(x, 1, "layer_norm");
  const Tensor& csr = rows.csr;
  // Entries per row, at least 1 (an empty row's statistics are never read).
  const Tensor count = clamp(row_sums(csr, ones_like(rows.values.value())), 1.0, std::nullopt);
  const Variable mean = div(row_sums(csr, rows.values), Variable(count));
  const Variable centered = sub(rows.values, at_entries(csr, mean));
  const Variable var = div(row_sums(csr, mul(centered, centered)), Variable(count));
  Variable y = div(centered, sqrt(add(at_entries(csr, var), eps)));
  if (weight.defined() || bias.defined()) {
    const Tensor cols = csr_impl(csr, "layer_norm").indices().to(DType::kI64);
    if (weight.defined()) y = mul(y, index_select(weight, 0, cols));
    if (bias.defined()) y = add(y, index_select(bias, 0, cols));
  }
  return from_rows(x, rows, y);
}

Variable sparse_dropout(const Variable& x, double p, bool training, Generator& gen) {
  if (!training || p == 0.0) return x;
  return with_values(x.value(), dropout(values(x), p, training, gen));
}

Variable sparse_cat(const std::vector<Variable>& xs, int64_t dim) {
  COPPICE_CHECK(!xs.empty(), "cat: expected at least one operand");
  bool all_sparse = true;
  for (const Variable& x : xs) {
    COPPICE_CHECK(x.defined(), "cat: an operand is undefined");
    all_sparse = all_sparse && x.value().is_sparse();
  }
  if (!all_sparse) {  // dense and sparse together: a dense result
    std::vector<Variable> dense;
    for (const Variable& x : xs) dense.push_back(to_dense(x));
    return cat(dense, dim);
  }
  const Tensor& first = xs[0].value();
  const int64_t nd = first.dim(), d = normalize_dim(dim, nd, "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& s = xs[i].shape();
    COPPICE_CHECK(static_cast<int64_t>(s.size()) == nd, "cat: operand ", i, " has ", s.size(), " dims, operand 0 has ",
                  nd);
    for (int64_t k = 0; k < nd; ++k)
      COPPICE_CHECK(k == d || s[k] == first.size(k), "cat: operand ", i, " has shape ", shape_to_string(s),
                    ", which differs from operand 0's ", shape_to_string(first.shape()), " outside dim ", d);
    out_shape[d] += s[d];
  }
  // Every operand's entries at their place in the result (padding stays -1).
  std::vector<int64_t> positions;
  std::vector<Variable> sources;
  int64_t offset = 0;
  for (const Variable& x : xs) {
    const Shape& s = x.shape();
    for (int64_t p : stored_positions(x.value())) {
      if (p < 0) {
        positions.push_back(-1);
        continue;
      }
      int64_t flat = 0, stride = 1;
      for (int64_t k = nd; k-- > 0;) {
        const int64_t c = p % s[k] + (k == d ? offset : 0);
        p /= s[k];
        flat += c * stride;
        stride *= out_shape[k];
      }
      positions.push_back(flat);
    }
    sources.push_back(flat_values(x));
    offset += s[d];
  }
  const Tensor pattern =
      pattern_at(sorted_distinct(positions), out_shape, first.format(), options_of(first, "cat"), first.options());
  return holding(pattern, take_with_zero(cat(sources, 0), entry_take(pattern, positions, "cat")));
}

Variable sparse_where(const Tensor& cond, const Variable& a, const Variable& b) {
  if (!a.value().is_sparse() || !b.value().is_sparse()) return where(cond, to_dense(a), to_dense(b));
  const Tensor& av = a.value();
  COPPICE_CHECK(av.shape() == b.shape(), "where: two sparse operands must have one shape, got ",
                shape_to_string(av.shape()), " and ", shape_to_string(b.shape()));
  const std::vector<int64_t> pa = stored_positions(av), pb = stored_positions(b.value());
  std::vector<int64_t> both = pa;
  both.insert(both.end(), pb.begin(), pb.end());
  const Tensor pattern =
      pattern_at(sorted_distinct(both), av.shape(), av.format(), options_of(av, "where"), av.options());
  const Variable va = take_with_zero(flat_values(a), entry_take(pattern, pa, "where"));
  const Variable vb = take_with_zero(flat_values(b), entry_take(pattern, pb, "where"));
  const Tensor chosen = ne(reshape(Variable(sample_at(cond.to(av.dtype()), pattern)), {-1}).value(), 0.0);
  return holding(pattern, where(chosen, va, vb));
}

Variable sparse_embedding(const Variable& weight, const Tensor& indices) {
  const Tensor& w = weight.value();
  COPPICE_CHECK(w.dim() == 2, "embedding: a sparse weight must be 2-D [num_embeddings, dim], got ",
                shape_to_string(w.shape()));
  COPPICE_CHECK(indices.defined() && is_integral(indices.dtype()), "embedding: indices must be an integer tensor");
  const Tensor idx = indices.to(Device::cpu()).to(DType::kI64).contiguous();
  const std::vector<int64_t> rows(idx.data<int64_t>(), idx.data<int64_t>() + idx.numel());
  const RemappedPattern r = select_rows(w, rows, "embedding");
  Shape out = indices.shape();
  out.push_back(w.size(1));
  return reshape(to_dense(taken_values(weight, r)), out);
}

}  // namespace autograd_detail
}  // namespace coppice
