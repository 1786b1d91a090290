#include "autograd/functions/einsum.h"

#include <limits>
#include <utility>

#include "autograd/functions/einsum_plan.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/sparse.h"
#include "autograd/no_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"

namespace coppice {
namespace {

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// A value and the label of each of its dims.
struct Labeled {
  Variable v;
  std::string labels;
};

class Executor {
 public:
  Executor(std::string_view spec, const EinsumPlan& plan) : spec_(spec), plan_(plan) {}

  Variable run(const std::vector<Variable>& operands) {
    std::vector<Labeled> ops;
    for (size_t i = 0; i < operands.size(); ++i) ops.push_back(prepare(operands[i], i));
    Labeled current = ops[0];
    for (const EinsumContraction& c : plan_.contractions) current = contract(current, ops[c.rhs], c);
    return arranged(current, plan_.output);
  }

 private:
  Shape sizes(const std::string& labels) const {
    Shape out;
    for (char l : labels) out.push_back(plan_.sizes.at(l));
    return out;
  }
  int64_t product(const std::string& labels) const {
    int64_t n = 1;
    for (char l : labels) n *= plan_.sizes.at(l);
    return n;
  }

  // The dense fallback, counted and warned about as the dispatcher's are.
  Variable made_dense(const Variable& x) const {
    Dispatcher::instance().count_fallback(str_cat("einsum '", spec_, "' (", x.value().format(), ")"),
                                          x.value().device().type);
    return to_dense(x);
  }

  // A dense x with its dims in `order` (a permutation of x's labels).
  static Variable permuted(const Labeled& x, const std::string& order) {
    if (order == x.labels) return x.v;
    std::vector<int64_t> dims;
    for (char l : order) dims.push_back(static_cast<int64_t>(x.labels.find(l)));
    return permute(x.v, dims);
  }

  // Sparse x's entries with its dims regrouped: each output dim a string of
  // x's labels (one may appear in two dims: a block diagonal).
  Variable remapped(const Labeled& x, const std::vector<std::string>& dims) const {
    EntryAxes axes;
    axes.sizes = x.v.value().shape();
    axes.input_axes = static_cast<int64_t>(axes.sizes.size());
    for (const std::string& dim : dims) {
      std::vector<int64_t> ids;
      for (char l : dim) ids.push_back(static_cast<int64_t>(x.labels.find(l)));
      axes.out_dims.push_back(std::move(ids));
    }
    bool csr = dims.size() == 2 && product(dims[1]) <= std::numeric_limits<int32_t>::max();
    return remap_entries(x.v, axes, csr ? "csr" : "coo", "einsum");
  }

  // x with its dims in `order`, of either kind of format.
  Variable arranged(const Labeled& x, const std::string& order) const {
    if (order == x.labels) return x.v;
    if (x.v.value().is_dense()) return permuted(x, order);
    std::vector<std::string> dims;
    for (char l : order) dims.emplace_back(1, l);
    return remapped(x, dims);
  }

  // x without its size-1 dims labelled `labels` (each once in x), which
  // broadcast: a dense x or one left with no dims sums them (a size-1 sum is
  // the squeeze); a sparse x has its entries remapped, each size-1 axis
  // merged into the first remaining dim, where it changes no coordinate.
  Labeled squeezed(const Labeled& x, const std::string& labels) const {
    std::string rest;
    for (char l : x.labels)
      if (!has(labels, l)) rest += l;
    if (x.v.value().is_dense() || rest.empty()) {
      std::vector<int64_t> dims;
      for (char l : labels) dims.push_back(static_cast<int64_t>(x.labels.find(l)));
      return {sum(x.v, dims), rest};
    }
    std::vector<std::string> dims;
    for (char l : rest) dims.emplace_back(1, l);
    dims[0] += labels;
    return {remapped(x, dims), rest};
  }

  Labeled prepare(const Variable& operand, size_t i) const {
    const EinsumPrep& prep = plan_.prep[i];
    Labeled x{prep.densify ? made_dense(operand) : operand, plan_.inputs[i]};
    if (!prep.broadcast.empty()) x = squeezed(x, prep.broadcast);
    for (char l : prep.diagonal) x = diagonal(x, l);
    if (!prep.summed.empty()) {
      std::vector<int64_t> dims;
      for (char l : prep.summed) dims.push_back(static_cast<int64_t>(x.labels.find(l)));
      std::string rest;
      for (char l : x.labels)
        if (!has(prep.summed, l)) rest += l;
      x = {sum(x.v, dims), rest};
    }
    return x;
  }

  // The dims labelled l (k of them) become one: x's other dims in order,
  // then l. Moved last and merged, the diagonal is every
  // (n^k - 1) / (n - 1)-th element.
  Labeled diagonal(const Labeled& x, char l) const {
    std::string others, order;
    int k = 0;
    for (char c : x.labels) {
      if (c == l)
        ++k;
      else
        others += c;
    }
    order = others + std::string(static_cast<size_t>(k), l);
    std::vector<int64_t> dims;
    std::vector<bool> used(x.labels.size(), false);
    for (char c : order) {
      for (size_t d = 0; d < x.labels.size(); ++d) {
        if (!used[d] && x.labels[d] == c) {
          used[d] = true;
          dims.push_back(static_cast<int64_t>(d));
          break;
        }
      }
    }
    const int64_t n = plan_.sizes.at(l);
    int64_t merged = 1, step = 0;
    for (int j = 0; j < k; ++j) {
      step += merged;
      merged *= n;
    }
    Shape shape = sizes(others);
    shape.push_back(merged);
    Variable flat = reshape(permute(x.v, dims), shape);
    return {slice(flat, static_cast<int64_t>(shape.size()) - 1, 0, merged, std::max<int64_t>(step, 1)), others + l};
  }

  Labeled contract(const Labeled& lhs, const Labeled& rhs_in, const EinsumContraction& c) const {
    Labeled rhs = rhs_in;
    if (c.densify_rhs) rhs.v = made_dense(rhs.v);
    switch (c.route) {
      case EinsumRoute::kDenseMul: return dense_mul(lhs, rhs, c);
      case EinsumRoute::kDenseBmm: return dense_bmm(lhs, rhs, c);
      case EinsumRoute::kSpgemm: return spgemm(lhs, rhs, c);
      case EinsumRoute::kSparseMul: return sparse_mul(lhs, rhs, c);
      default:
        return c.sparse_lhs ? sparse_dense(lhs, rhs, c.left, c.right, c) : sparse_dense(rhs, lhs, c.right, c.left, c);
    }
  }

  Labeled dense_mul(const Labeled& a, const Labeled& b, const EinsumContraction& c) const {
    Shape sa = sizes(c.batch + c.left), sb = sizes(c.batch);
    for (size_t i = 0; i < c.right.size(); ++i) sa.push_back(1);
    for (size_t i = 0; i < c.left.size(); ++i) sb.push_back(1);
    for (int64_t s : sizes(c.right)) sb.push_back(s);
    Variable y = mul(reshape(permuted(a, c.batch + c.left), sa), reshape(permuted(b, c.batch + c.right), sb));
    return {y, c.result};
  }

  Labeled dense_bmm(const Labeled& a, const Labeled& b, const EinsumContraction& c) const {
    const int64_t B = product(c.batch), L = product(c.left), C = product(c.contracted), R = product(c.right);
    Variable x = permuted(a, c.batch + c.left + c.contracted), y = permuted(b, c.batch + c.contracted + c.right);
    Variable out = c.batch.empty() ? matmul(reshape(x, {L, C}), reshape(y, {C, R}))
                                   : bmm(reshape(x, {B, L, C}), reshape(y, {B, C, R}));
    return {reshape(out, sizes(c.result)), c.result};
  }

  // s sparse, d dense (densified already where the plan said so).
  Labeled sparse_dense(const Labeled& s, const Labeled& d, const std::string& s_only, const std::string& d_only,
                       const EinsumContraction& c) const {
    switch (c.route) {
      case EinsumRoute::kSparseScale: {
        std::string order;
        Shape shape;
        for (char l : s.labels) {
          if (has(d.labels, l)) order += l;
          shape.push_back(has(d.labels, l) ? plan_.sizes.at(l) : 1);
        }
        return {mul(s.v, reshape(permuted(d, order), shape)), s.labels};
      }
      case EinsumRoute::kSparseLinear:
      case EinsumRoute::kSparseMatmul: {
        std::string others;
        for (char l : d.labels)
          if (l != c.contracted[0]) others += l;
        Variable d2 = reshape(permuted(d, others + c.contracted), {product(others), product(c.contracted)});
        Variable y = c.route == EinsumRoute::kSparseLinear ? linear(d2, s.v) : matmul(d2, s.v);
        return {reshape(y, sizes(c.result)), c.result};
      }
      default: {  // kSparseBlockDiagonal
        Variable s2 = remapped(s, {c.batch + s_only, c.batch + c.contracted});
        Variable d2 =
            reshape(permuted(d, c.batch + c.contracted + d_only), {product(c.batch + c.contracted), product(d_only)});
        return {reshape(matmul(s2, d2), sizes(c.result)), c.result};
      }
    }
  }

  // A 2-D sparse operand as a CSR with rows `rows` and columns `cols`: itself
  // when it already is one.
  Variable csr_matrix(const Labeled& x, const std::string& rows, const std::string& cols) const {
    if (x.labels == rows + cols && x.v.value().layout() == Layout::kCsr) return x.v;
    return remapped(x, {rows, cols});
  }

  Labeled spgemm(const Labeled& a, const Labeled& b, const EinsumContraction& c) const {
    Variable y = matmul(csr_matrix(a, c.left, c.contracted), csr_matrix(b, c.contracted, c.right));
    return {y, c.result};
  }

  // Two sparse operands of the same labels: a's pattern, times b read
  // through its dense form at a's positions; then the contracted labels
  // summed.
  Labeled sparse_mul(const Labeled& a, const Labeled& b, const EinsumContraction& c) const {
    Variable y = mul(a.v, permuted({to_dense(b.v), b.labels}, a.labels));
    if (c.summed_after.empty()) return {y, c.result};
    std::vector<int64_t> dims;
    for (char l : c.summed_after) dims.push_back(static_cast<int64_t>(a.labels.find(l)));
    return {sum(y, dims), c.result};
  }

  std::string_view spec_;
  const EinsumPlan& plan_;
};

EinsumPlan plan_for(std::string_view spec, const std::vector<Tensor>& operands) {
  std::vector<Shape> shapes;
  std::vector<bool> sparse;
  for (size_t i = 0; i < operands.size(); ++i) {
    COPPICE_CHECK(operands[i].defined(), "einsum '", spec, "': operand ", i, " is undefined");
    shapes.push_back(operands[i].shape());
    sparse.push_back(operands[i].is_sparse());
  }
  return plan_einsum(spec, shapes, sparse);
}

}  // namespace

Variable einsum(std::string_view spec, const std::vector<Variable>& operands) {
  std::vector<Tensor> values;
  for (const Variable& v : operands) values.push_back(v.defined() ? v.value() : Tensor());
  const EinsumPlan plan = plan_for(spec, values);
  return Executor(spec, plan).run(operands);
}

Tensor einsum(std::string_view spec, const std::vector<Tensor>& operands) {
  NoGradGuard no_grad;
  std::vector<Variable> vs;
  for (const Tensor& t : operands) vs.emplace_back(t);
  return einsum(spec, vs).value();
}

std::vector<std::string> einsum_plan_text(std::string_view spec, const std::vector<Tensor>& operands) {
  return describe(plan_for(spec, operands));
}

}  // namespace coppice
