#include "sparse/ops.h"

#include <string_view>
#include <utility>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

void check_sddmm_operands(const Tensor& a, const Tensor& b, const Tensor& pattern, std::string_view op) {
  check_dense(a, op, "a");
  check_dense(b, op, "b");
  COPPICE_CHECK(pattern.defined() && pattern.is_sparse(), op, ": pattern must be a sparse tensor, got ",
                pattern.defined() ? str_cat("format '", pattern.format(), "'") : std::string("an undefined tensor"));
  check_same_device({a, b, pattern}, op);
  COPPICE_CHECK(a.dim() == 2 && b.dim() == 2 && pattern.dim() == 2, op, ": expected 2-D a, b and pattern, got ",
                shape_to_string(a.shape()), ", ", shape_to_string(b.shape()), " and ",
                shape_to_string(pattern.shape()));
  COPPICE_CHECK(a.size(1) == b.size(0), op, ": inner dimensions differ: a is ", shape_to_string(a.shape()), ", b is ",
                shape_to_string(b.shape()));
  COPPICE_CHECK(pattern.size(0) == a.size(0) && pattern.size(1) == b.size(1), op, ": pattern has shape ",
                shape_to_string(pattern.shape()), ", expected [", a.size(0), ", ", b.size(1), "]");
  COPPICE_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), op, ": a and b must share a floating dtype, got ",
                dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

}  // namespace

Tensor sddmm(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  constexpr std::string_view op = op::kSddmm;
  check_sddmm_operands(a, b, pattern, op);
  return dispatch(op, {a, b, pattern})[0];
}

std::pair<Tensor, Tensor> sddmm_row_sums(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  constexpr std::string_view op = op::kSddmmRowSums;
  check_sddmm_operands(a, b, pattern, op);  // a and b dense
  if (sddmm_row_sums_fused(pattern)) {
    std::vector<Tensor> out = dispatch(op, {a, b, pattern});
    return {out[0], out[1]};
  }
  return {dispatch(op::kSddmm, {a, b, pattern})[0], sum(a, {1})};
}

bool sddmm_row_sums_fused(const Tensor& pattern) {
  const std::string_view formats[] = {"dense", "dense", pattern.format()};
  return Dispatcher::instance().find(op::kSddmmRowSums, pattern.device().type, formats) != nullptr;
}

LinearGrads linear_grads_fused(const Tensor& g, const Tensor& x, const Tensor& weight, bool bias, const Tensor& z,
                               GeluForm form) {
  constexpr std::string_view op = op::kLinearGrads;
  COPPICE_CHECK(g.defined() && x.defined() && weight.defined(), op, ": grad, input and weight must be defined");
  if (!g.is_dense() || !x.is_dense() || !weight.is_sparse() || (z.defined() && !z.is_dense())) return {};
  std::vector<std::string_view> formats{g.format(), x.format(), weight.format()};
  if (z.defined()) formats.push_back(z.format());
  if (Dispatcher::instance().find(op, g.device().type, formats) == nullptr) return {};
  COPPICE_CHECK(g.dim() == 2 && x.dim() == 2 && weight.dim() == 2, op, ": expected 2-D grad, input and weight, got ",
                shape_to_string(g.shape()), ", ", shape_to_string(x.shape()), " and ", shape_to_string(weight.shape()));
  COPPICE_CHECK(g.size(0) == x.size(0) && g.size(1) == weight.size(0) && x.size(1) == weight.size(1), op, ": grad ",
                shape_to_string(g.shape()), " and input ", shape_to_string(x.shape()), " do not fit the weight ",
                shape_to_string(weight.shape()), " (expected [N, ", weight.size(0), "] and [N, ", weight.size(1), "])");
  COPPICE_CHECK(!z.defined() || z.shape() == x.shape(), op, ": the pre-activation must have the input's shape ",
                shape_to_string(x.shape()), ", got ", z.defined() ? shape_to_string(z.shape()) : std::string());
  std::vector<Tensor> in{g, x, weight};
  if (z.defined()) in.push_back(z);
  check_same_device(in, op);
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.dtype() == weight.dtype(), op, ": grad, input", z.defined() ? ", pre-activation" : "",
                  " and weight must share one dtype, got ", dtype_name(t.dtype()), " beside the weight's ",
                  dtype_name(weight.dtype()));
  }
  const std::vector<Tensor> out = dispatch(op, in, Attrs().set("bias", bias).set("tanh", form == GeluForm::kTanh));
  if (!out[0].defined()) return {};
  return {out[0], out[1], bias ? out[2] : Tensor()};
}

Tensor transpose(const Tensor& t) {
  COPPICE_CHECK(t.defined() && t.dim() == 2, "transpose: expected a 2-D tensor, got ",
                t.defined() ? shape_to_string(t.shape()) : std::string("an undefined tensor"));
  return dispatch(op::kTranspose, {t})[0];
}

Tensor spgemm(const Tensor& a, const Tensor& b) {
  COPPICE_CHECK(a.defined() && b.defined() && a.layout() == Layout::kCsr && b.layout() == Layout::kCsr,
                "spgemm: expected two CSR operands, got formats '", a.defined() ? a.format() : "undefined", "' and '",
                b.defined() ? b.format() : "undefined", "' (matmul takes any formats)");
  check_same_device({a, b}, "spgemm");
  COPPICE_CHECK(a.size(1) == b.size(0), "spgemm: inner dimensions differ: a is ", shape_to_string(a.shape()), ", b is ",
                shape_to_string(b.shape()));
  COPPICE_CHECK(a.dtype() == b.dtype(), "spgemm: a and b have different dtypes (", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()), ")");
  return dispatch(op::kMatmul, {a, b})[0];
}

namespace {

// The checks both row-softmax frontends share: the kernels trust them.
void check_row_softmax_args(const Tensor& crow, const std::vector<Tensor>& vals, std::string_view op) {
  check_dense(crow, op, "crow");
  COPPICE_CHECK(crow.dtype() == DType::kI32 && crow.dim() == 1 && crow.numel() >= 1, op,
                ": crow must be 1-D i32 row pointers [rows + 1], got ", dtype_name(crow.dtype()), " ",
                shape_to_string(crow.shape()));
  for (const Tensor& v : vals) {
    check_dense(v, op, "values");
    COPPICE_CHECK(v.dim() == 1 && v.shape() == vals[0].shape(), op, ": values must be 1-D [nnz] of one length, got ",
                  shape_to_string(v.shape()), " and ", shape_to_string(vals[0].shape()));
    COPPICE_CHECK(is_floating(v.dtype()) && v.dtype() == vals[0].dtype(), op,
                  ": values must be f32, f64, bf16 or f16 (one dtype), got ", dtype_name(v.dtype()));
  }
  std::vector<Tensor> all{crow};
  all.insert(all.end(), vals.begin(), vals.end());
  check_same_device(all, op);
}

}  // namespace

Tensor csr_row_softmax(const Tensor& crow, const Tensor& values) {
  constexpr std::string_view op = op::kCsrRowSoftmax;
  check_row_softmax_args(crow, {values}, op);
  return dispatch(op, {crow.contiguous(), values.contiguous()})[0];
}

Tensor csr_row_softmax_backward(const Tensor& crow, const Tensor& y, const Tensor& g) {
  constexpr std::string_view op = op::kCsrRowSoftmaxBackward;
  check_row_softmax_args(crow, {y, g}, op);
  return dispatch(op, {crow.contiguous(), y.contiguous(), g.contiguous()})[0];
}

}  // namespace coppice
