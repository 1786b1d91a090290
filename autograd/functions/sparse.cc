#include "autograd/functions/sparse.h"

#include <string>
#include <tuple>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/grad_utils.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/straight_through.h"
#include "autograd/gradient_probe.h"
#include "autograd/sparse_grad.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/binary_ops.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice {

using Grads = std::vector<Tensor>;

namespace {

void check_matrix(const Tensor& t, const char* op, const char* what) {
  COPPICE_CHECK(t.dim() == 2, op, ": differentiating with a sparse operand needs 2-D operands, but ", what,
                " has shape ", shape_to_string(t.shape()));
}

// A gradient reaching a product or sum of two sparse operands, dense: the
// result of such an op may be sparse (SpGEMM's CSR) or dense (a fallback).
Tensor dense_grad_of(const Tensor& g) { return g.is_sparse() ? to_dense(g) : g.contiguous(); }

// S^T g (sparse_left) or g S^T, for the dense operand's gradient of a
// product with S. A compressed S transposes for free (CSR and CSC trade
// arrays); any other format would be re-built transposed (BSR through its
// COO entries, on the host), so the product is taken the other way round,
// (g^T S)^T or (S g^T)^T, a product every format's kernels run as it is.
Tensor transposed_product(const Tensor& s, const Tensor& g, bool sparse_left) {
  const bool free = s.layout() == Layout::kCsr || s.layout() == Layout::kCsc;
  if (sparse_left) return free ? matmul(transpose(s), g) : matmul(g.t().contiguous(), s).t().contiguous();
  return free ? matmul(g, transpose(s)) : matmul(s, g.t().contiguous()).t().contiguous();
}

// `d` (dense) at sparse `pattern`'s stored positions, as its gradient.
Tensor grad_at(const Tensor& d, const Tensor& pattern) { return with_values(pattern, sample_at(d, pattern)); }

}  // namespace

// ---- values / with_values / to_dense ---------------------------------------

Variable values(const Variable& x) {
  if (x.value().is_dense()) return x;
  Tensor p = x.value();
  return record(values(p), "SparseValuesBackward", {x},
                [p](const Tensor& g, const GradNeeds&) { return Grads{with_values(p, g.contiguous())}; });
}

Variable with_values(const Tensor& pattern, const Variable& v) {
  COPPICE_CHECK(pattern.defined() && pattern.is_sparse(), "with_values: the pattern must be a sparse tensor, got ",
                pattern.defined() ? str_cat("format '", pattern.format(), "'") : std::string("an undefined tensor"));
  COPPICE_CHECK(v.defined(), "with_values: the values are an undefined Variable");
  const Tensor& pv = values(pattern);
  COPPICE_CHECK(v.shape() == pv.shape(), "with_values: values of shape ", shape_to_string(v.shape()), " for a ",
                pattern.format(), " pattern whose values have shape ", shape_to_string(pv.shape()));
  Tensor out = with_values(pattern, v.value().contiguous());
  return record(out, "SparseWithValuesBackward", {v}, [out](const Tensor& g, const GradNeeds&) {
    return Grads{grad_values(g, out, "with_values backward")};
  });
}

Variable to_dense(const Variable& x) {
  if (x.value().is_dense()) return x;
  Tensor p = x.value();
  // A straight-through projection takes the gradient at every position.
  const bool dense_grad = wants_dense_gradient(x);
  return record(to_dense(p), "SparseToDenseBackward", {x}, [p, dense_grad](const Tensor& g, const GradNeeds&) {
    return Grads{dense_grad ? g : with_values(p, sample_at(g, p))};
  });
}

Variable sddmm(const Variable& a, const Variable& b, const Tensor& pattern) {
  Tensor y = sddmm(a.value(), b.value(), pattern);
  Tensor av = autograd_detail::saved_if(b.requires_grad(), a.value());
  Tensor bv = autograd_detail::saved_if(a.requires_grad(), b.value());
  return record(y, "SddmmBackward", {a, b}, [av, bv, y](const Tensor& g, const GradNeeds& n) {
    Tensor gs = project_grad(g, y, "sddmm backward");
    Tensor ga = n[0] ? matmul(gs, bv.t().contiguous()) : Tensor();
    Tensor gb = n[1] ? matmul(av.t().contiguous(), gs) : Tensor();
    return Grads{ga, gb};
  });
}

Variable remap_entries(const Variable& x, const EntryAxes& axes, std::string_view format, std::string_view op) {
  COPPICE_CHECK(x.defined() && x.value().is_sparse(), op, ": remapping entries needs a sparse operand");
  return taken_values(x, remap_stored_entries(x.value(), axes, format, op));
}

Variable taken_values(const Variable& x, const RemappedPattern& r) {
  return with_values(r.pattern, index_select(reshape(values(x), {-1}), 0, r.take));
}

namespace autograd_detail {

// ---- matmul / linear -------------------------------------------------------
// The SDDMMs take transposed views as they are: every kernel reads strided
// operands or makes them contiguous itself, and the tiled BSR kernel reads
// them in place (a transposed copy of g was a 16M-element transpose per
// layer and step on the MLP-4096).

Tensor pattern_grad(const Tensor& a, const Tensor& b, const Tensor& pattern, bool dense_grad) {
  if (dense_grad) return matmul(a.contiguous(), b.contiguous());
  Tensor g = sddmm(a, b, pattern);
  GradientProbe::offer(pattern, a, b);
  return g;
}

std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& g2, const Tensor& x2, const Tensor& weight) {
  const Tensor gt = g2.t();
  std::pair<Tensor, Tensor> grads = sddmm_row_sums(gt, x2, weight);
  GradientProbe::offer(weight, gt, x2);
  return grads;
}

LinearGrads input_and_weight_grads(const Tensor& g2, const Tensor& x2, const Tensor& weight, bool bias, const Tensor& z,
                                   GeluForm form) {
  LinearGrads grads = linear_grads_fused(g2, x2, weight, bias, z, form);
  if (grads.weight.defined()) GradientProbe::offer(weight, g2.t(), x2);
  return grads;
}

Variable sparse_matmul(const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor y = matmul(av, bv);
  if (!should_record(y, {a, b})) return Variable(std::move(y));  // any shapes the forward takes
  check_matrix(av, op::kMatmul, "a");
  check_matrix(bv, op::kMatmul, "b");
  if (av.is_sparse() && bv.is_sparse()) {
    // y = A B: dA = g B^T and dB = A^T g at their patterns, each a product
    // with one sparse operand (SpMM), sampled.
    return record(y, "SparseSparseMatmulBackward", {a, b}, [av, bv](const Tensor& g, const GradNeeds& n) {
      Tensor gd = dense_grad_of(g);
      Tensor ga = n[0] ? grad_at(transposed_product(bv, gd, /*sparse_left=*/false), av) : Tensor();
      Tensor gb = n[1] ? grad_at(transposed_product(av, gd, /*sparse_left=*/true), bv) : Tensor();
      return Grads{ga, gb};
    });
  }
  // A straight-through projection (straight_through.h) takes the product
  // itself, not its SDDMM at the pattern.
  if (av.is_sparse()) {
    // y = S x: dS = sddmm(g, x^T, S), dx = S^T g.
    Tensor xv = saved_if(a.requires_grad(), bv);
    const bool dense_grad = wants_dense_gradient(a);
    return record(y, "SparseMatmulBackward", {a, b}, [av, xv, dense_grad](const Tensor& g, const GradNeeds& n) {
      Tensor gc = g.contiguous();
      Tensor ga = n[0] ? pattern_grad(gc, xv.t(), av, dense_grad) : Tensor();
      Tensor gb = n[1] ? transposed_product(av, gc, /*sparse_left=*/true) : Tensor();
      return Grads{ga, gb};
    });
  }
  // y = x S: dx = g S^T, dS = sddmm(x^T, g, S).
  Tensor xv = saved_if(b.requires_grad(), av);
  const bool dense_grad = wants_dense_gradient(b);
  return record(y, "SparseMatmulBackward", {a, b}, [xv, bv, dense_grad](const Tensor& g, const GradNeeds& n) {
    Tensor gc = g.contiguous();
    Tensor ga = n[0] ? transposed_product(bv, gc, /*sparse_left=*/false) : Tensor();
    Tensor gb = n[1] ? pattern_grad(xv.t(), gc, bv, dense_grad) : Tensor();
    return Grads{ga, gb};
  });
}

namespace {

// The backward of a linear with a dense x and a sparse weight, y = x W^T + b
// (through a relu when y is saved: linear_relu): dx = g W, dW = sddmm(g^T,
// x, W), db = the sum of g over rows; a straight-through projection
// (straight_through.h) takes dW = g^T x whole. Gradients {x, weight, bias}.
struct SparseWeightBackward {
  Shape xs;  // x's shape
  Tensor x;  // saved when the weight's gradient is asked for
  Tensor w;  // the weight's value
  Tensor y;  // the output, saved for a relu's gradient only
  bool dense_grad;

  Grads operator()(const Tensor& g, const GradNeeds& n) const {
    const int64_t in = w.size(1);
    // The bias gradient comes with the weight's (weight_and_bias_grads: the
    // SDDMM sums the rows of g^T it stages). With a relu, only where that is
    // one kernel: then the relu's gradient is a plain relu_backward, not
    // relu_backward_col_sums' pass with the sums (the MLP-4096 BSR step,
    // H200: 1.445 -> 1.411 ms); composed, the sums would be a pass of their own.
    const bool with_weight = n[1] && n[2] && !dense_grad && (!y.defined() || sddmm_row_sums_fused(w));
    Tensor g2, gb, gx, gw;
    std::tie(g2, gb) = linear_output_grads(g, y, n[2] && !with_weight);
    g2 = g2.contiguous();
    // All three from one pass over g2 and x where a kernel does it.
    if (n[0] && n[1] && !dense_grad) {
      const LinearGrads fused = input_and_weight_grads(g2, x.reshape({-1, in}), w, n[2] && !gb.defined());
      if (fused.weight.defined()) return Grads{fused.input.reshape(xs), fused.weight, gb.defined() ? gb : fused.bias};
    }
    // The input's gradient and the weight's read g2 each and nothing the
    // other writes: they run side by side.
    run_beside(
        g2.device(), [&] { gx = n[0] ? matmul(g2, w).reshape(xs) : Tensor(); },
        [&] {
          if (with_weight) {
            std::tie(gw, gb) = weight_and_bias_grads(g2, x.reshape({-1, in}), w);
          } else if (n[1]) {
            gw = pattern_grad(g2.t(), x.reshape({-1, in}), w, dense_grad);
          }
        });
    made_beside_all({gw, gb});  // may still be in the making
    return Grads{gx, gw, gb};
  }
};

}  // namespace

Variable sparse_linear(const Variable& x, const Variable& weight, const Variable& bias, bool relu) {
  const char* op = relu ? op::kLinearRelu : op::kLinear;
  Tensor xv = x.value(), wv = weight.value();
  COPPICE_CHECK(!bias.defined() || bias.value().is_dense(), op, ": a sparse bias is not supported (format '",
                bias.defined() ? bias.value().format() : "", "')");
  Tensor bv = bias.defined() ? bias.value() : Tensor();
  Tensor y = relu ? linear_relu(xv, wv, bv) : linear(xv, wv, bv);
  if (!should_record(y, {x, weight, bias})) return Variable(std::move(y));
  check_matrix(wv, op, "weight");
  // The gradient at the pre-activation is through_relu(g, y) (y kept only
  // for linear_relu); the rest is linear's backward.
  Tensor y_saved = saved_if(relu, y);
  if (xv.is_sparse() && wv.is_sparse()) {
    // Both sparse: dx = g W and dW = g^T x at their patterns (SpMMs, sampled).
    check_matrix(xv, op, "x");
    return record(y, relu ? "SparseLinearReluBackward" : "SparseLinearBackward", {x, weight, bias},
                  [xv, wv, y_saved](const Tensor& g, const GradNeeds& n) {
                    Tensor g2 = dense_grad_of(through_relu(g, y_saved));
                    Tensor gx = n[0] ? grad_at(matmul(g2, wv), xv) : Tensor();
                    Tensor gw = n[1] ? grad_at(matmul(g2.t().contiguous(), xv), wv) : Tensor();
                    Tensor gb = n[2] ? sum(g2, {0}) : Tensor();
                    return Grads{gx, gw, gb};
                  });
  }
  if (wv.is_sparse()) {
    SparseWeightBackward back{x.shape(), saved_if(weight.requires_grad(), xv), wv, y_saved,
                              wants_dense_gradient(weight)};
    return record(y, relu ? "SparseLinearReluBackward" : "SparseLinearBackward", {x, weight, bias},
                  [back](const Tensor& g, const GradNeeds& n) { return back(g, n); });
  }
  // Sparse input x [N, in], dense W: dx = sddmm(g, W, x), dW = g^T x.
  check_matrix(xv, op, "x");
  Tensor w_saved = saved_if(x.requires_grad(), wv);
  return record(y, relu ? "SparseLinearReluBackward" : "SparseLinearBackward", {x, weight, bias},
                [xv, w_saved, y_saved](const Tensor& g, const GradNeeds& n) {
                  Tensor g2 = through_relu(g, y_saved).contiguous();
                  Tensor gx, gw, gb;
                  if (n[0]) gx = sddmm(g2, w_saved.contiguous(), xv);
                  if (n[1]) gw = matmul(g2.t().contiguous(), xv);
                  if (n[2]) gb = sum(g2, {0});
                  return Grads{gx, gw, gb};
                });
}

Variable sparse_linear_add(const Variable& h, const Variable& x, const Variable& weight, const Variable& bias) {
  const Tensor xv = x.value(), wv = weight.value(), hv = h.value();
  if (xv.is_sparse() || !wv.is_sparse() || (bias.defined() && !bias.value().is_dense())) return Variable();
  Tensor y = linear_add_fused(xv, wv, bias.defined() ? bias.value() : Tensor(), hv);
  if (!y.defined()) return Variable();
  if (!should_record(y, {x, weight, bias, h})) return Variable(std::move(y));
  check_matrix(wv, op::kLinearAdd, "weight");
  SparseWeightBackward back{x.shape(), saved_if(weight.requires_grad(), xv), wv, Tensor(),
                            wants_dense_gradient(weight)};
  // h's gradient is the output's, passed on as it is.
  return record(y, "SparseLinearAddBackward", {x, weight, bias, h}, [back](const Tensor& g, const GradNeeds& n) {
    Grads out = back(g, n);
    out.push_back(n[3] ? g : Tensor());
    return out;
  });
}

// ---- elementwise -----------------------------------------------------------

Variable sparse_mul(const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor y = mul(av, bv);
  if (av.is_sparse() && bv.is_sparse()) {
    // dA = g B and dB = g A at their patterns, through the dense forms.
    return record(y, "SparseMulBackward", {a, b}, [av, bv](const Tensor& g, const GradNeeds& n) {
      Tensor gd = dense_grad_of(g);
      Tensor ga = n[0] ? grad_at(mul(gd, to_dense(bv)), av) : Tensor();
      Tensor gb = n[1] ? grad_at(mul(gd, to_dense(av)), bv) : Tensor();
      return Grads{ga, gb};
    });
  }
  bool sparse_first = av.is_sparse();
  Tensor s = sparse_first ? av : bv, d = sparse_first ? bv : av;
  Shape ds = d.shape();
  bool need_s = sparse_first ? a.requires_grad() : b.requires_grad();
  Tensor d_saved = saved_if(need_s, d);
  return record(y, "SparseMulBackward", {a, b}, [s, d_saved, ds, sparse_first, y](const Tensor& g, const GradNeeds& n) {
    bool ns = sparse_first ? n[0] : n[1], nd = sparse_first ? n[1] : n[0];
    Tensor gv = grad_values(g, y, "mul backward");
    Tensor gs, gd;
    // d(values)/dS = g's values * d at the pattern; dD = dense scatter of g * S's values.
    if (ns) gs = with_values(s, mul(gv, sample_at(d_saved, s)).contiguous());
    if (nd) gd = sum_to(to_dense(with_values(s, mul(gv, values(s)).contiguous())), ds);
    return sparse_first ? Grads{gs, gd} : Grads{gd, gs};
  });
}

Variable sparse_add(const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor y = add(av, bv);
  if (av.is_sparse() && bv.is_sparse()) {
    // COO + COO concatenates the entries (an uncoalesced COO whose values are
    // a's, then b's): a gradient of that pattern splits its values the same
    // way, entry for entry. Otherwise each operand gets g at its own stored
    // positions.
    const int64_t na = values(av).numel(), ny = values(y).numel();
    const bool concatenated = y.layout() == Layout::kCoo && av.layout() == Layout::kCoo &&
                              bv.layout() == Layout::kCoo && ny == na + values(bv).numel();
    const uint64_t y_version = pattern_version(y);
    return record(y, "SparseAddBackward", {a, b},
                  [av, bv, na, ny, concatenated, y_version](const Tensor& g, const GradNeeds& n) {
                    if (concatenated && g.is_sparse() && pattern_version(g) == y_version) {
                      Tensor gv = values(g);
                      Tensor ga = n[0] ? with_values(av, gv.slice(0, 0, na).contiguous()) : Tensor();
                      Tensor gb = n[1] ? with_values(bv, gv.slice(0, na, ny).contiguous()) : Tensor();
                      return Grads{ga, gb};
                    }
                    Tensor gd = dense_grad_of(g);
                    return Grads{n[0] ? grad_at(gd, av) : Tensor(), n[1] ? grad_at(gd, bv) : Tensor()};
                  });
  }
  Tensor s = av.is_sparse() ? av : bv;
  Shape sa = av.shape(), sb = bv.shape();
  bool sparse_first = av.is_sparse();
  return record(y, "SparseAddBackward", {a, b}, [s, sa, sb, sparse_first](const Tensor& g, const GradNeeds& n) {
    // The sparse operand gets g at its stored positions; the dense one all of g.
    Tensor ga, gb;
    if (n[0]) ga = sparse_first ? with_values(s, sample_at(g, s)) : sum_to(g, sa);
    if (n[1]) gb = sparse_first ? sum_to(g, sb) : with_values(s, sample_at(g, s));
    return Grads{ga, gb};
  });
}

Variable sparse_sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim, bool all) {
  if (all) return sum(values(x));  // duplicates of an uncoalesced COO each count once, as in to_dense
  Tensor p = x.value();
  std::vector<int64_t> nd = normalize_dims(dims, x.dim(), op::kSum);
  return record(sum(p, dims, keepdim), "SparseSumBackward", {x}, [p, nd, keepdim](const Tensor& g, const GradNeeds&) {
    Tensor gb = keepdim ? g : unsqueeze_dims(g, nd);
    return Grads{with_values(p, sample_at(gb, p))};
  });
}

}  // namespace autograd_detail
}  // namespace coppice
