// Matrix products: matmul (NumPy semantics), bmm, linear, linear_relu,
// linear_gelu and matmul_gelu_backward (composites of them and an
// elementwise op, unless a kernel fuses the two), all on the one gemm
// primitive over contiguous 3-D operands, and a linear layer's weight and
// bias gradients (linear_weight_grad). On CUDA a dense linear with a bias,
// and the dense gelu forms, go to kernels of their own (tensor/cuda/
// linear_lt.cc: the bias and the tanh gelu inside the GEMM). The ops' names
// are tensor/op_table.h's.
//
// A matrix whose transpose is contiguous (weight.t() in linear, or any
// transposed view) is passed as it lies with a trans flag instead of copied.
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

struct GemmOperand {
  Tensor data;  // contiguous 3-D
  bool trans = false;
};

// A 3-D view [batch, r, c] as the kernel takes it: itself when contiguous, its
// transpose with the trans flag when that is contiguous, else a contiguous copy.
GemmOperand gemm_operand(const Tensor& t3) {
  if (t3.is_contiguous()) return {t3, false};
  Tensor tt = t3.transpose(1, 2);
  if (tt.is_contiguous()) return {tt, true};
  return {t3.contiguous(), false};
}

// c [batch, m, n] = a [ba, m, k] x b [bb, k, n], ba == bb or one of them 1;
// written into `out` when it is defined (contiguous [batch, m, n]).
Tensor gemm(const Tensor& a3, const Tensor& b3, const Tensor& out = Tensor()) {
  GemmOperand a = gemm_operand(a3), b = gemm_operand(b3);
  Attrs attrs;
  attrs.set("trans_a", a.trans).set("trans_b", b.trans);
  if (out.defined()) return dispatch(op::kGemm, {a.data, b.data, out}, attrs)[0];
  return dispatch(op::kGemm, {a.data, b.data}, attrs)[0];
}

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// t [..., r, c] as a 3-D [B, r, c] operand for a product over `batch` (the
// broadcast of both operands' batch dims): one matrix when its own batch has
// one element (the kernel broadcasts it), a view when its batch is the full
// one, else an expanded copy.
Tensor batched(const Tensor& t, const Shape& batch) {
  int64_t r = t.size(-2), c = t.size(-1);
  Shape own = batch_of(t);
  if (shape_numel(own) == 1) return t.reshape({1, r, c});
  Shape padded(batch.size() - own.size(), 1);
  padded.insert(padded.end(), own.begin(), own.end());
  if (padded == batch) return t.reshape({shape_numel(batch), r, c});
  Shape full_shape = batch;
  full_shape.push_back(r);
  full_shape.push_back(c);
  return t.expand(full_shape).contiguous().reshape({shape_numel(batch), r, c});
}

// A sparse operand (sparse/ops.h): the frontend checks only what holds for
// every format and dispatches by the operands' formats, so a registered
// sparse kernel (or the counted dense fallback) runs. Sparse operands are 2-D;
// a dense one may be 1-D (NumPy promotion) or, on the left, carry batch dims
// (flattened into rows). `name` is the op errors name (linear_relu runs
// linear here).
enum class SparseProduct { kMatmul, kLinear };  // a @ b, or x @ weight^T

Tensor sparse_product(SparseProduct product, const Tensor& a, const Tensor& b, std::string_view name) {
  const bool linear = product == SparseProduct::kLinear;
  const char* op = linear ? op::kLinear : op::kMatmul;
  check_same_device({a, b}, name);
  COPPICE_CHECK(a.dtype() == b.dtype(), name, ": operands have different dtypes (", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()), "); convert them first");
  COPPICE_CHECK(is_floating(a.dtype()), name, ": expected floating-point operands, got ", dtype_name(a.dtype()));
  COPPICE_CHECK(
      (a.is_dense() || a.dim() == 2) && (b.is_dense() || b.dim() == 2) && a.dim() >= 1 && b.dim() >= 1 && b.dim() <= 2,
      name, ": with a sparse operand, expected a [.., m, k] and b [k, n] with sparse ones 2-D, got a ",
      shape_to_string(a.shape()), " (", a.format(), ") and b ", shape_to_string(b.shape()), " (", b.format(), ")");
  COPPICE_CHECK(!linear || b.dim() == 2, name, ": weight must be 2-D [out, in], got ", shape_to_string(b.shape()));
  const int64_t k = a.size(-1), kb = linear ? b.size(-1) : b.size(0);
  COPPICE_CHECK(k == kb, name, ": inner dimensions differ: a is ", shape_to_string(a.shape()), ", b is ",
                shape_to_string(b.shape()));
  if (a.dim() == 2 && b.dim() == 2) return dispatch(op, {a, b})[0];
  Shape out_shape(a.shape().begin(), a.shape().end() - 1);
  if (b.dim() == 2) out_shape.push_back(linear ? b.size(0) : b.size(1));
  Tensor a2 = a.is_dense() ? a.reshape({-1, k}) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  return dispatch(op, {a2, b2})[0].reshape(out_shape);
}

// Dense kernels of the ops above, for the dispatcher's dense fallback.
std::vector<Tensor> dense_matmul_kernel(const std::vector<Tensor>& in, const Attrs&) { return {matmul(in[0], in[1])}; }
std::vector<Tensor> dense_linear_kernel(const std::vector<Tensor>& in, const Attrs&) { return {linear(in[0], in[1])}; }
const bool kDenseKernels = [] {
  for (DeviceType d : {DeviceType::kCpu, DeviceType::kCuda}) {
    Dispatcher::instance().register_kernel(op::kMatmul, d, {"dense", "dense"}, dense_matmul_kernel);
    Dispatcher::instance().register_kernel(op::kLinear, d, {"dense", "dense"}, dense_linear_kernel);
  }
  return true;
}();

void check_operands(const Tensor& a, const Tensor& b, std::string_view op, const char* a_name, const char* b_name) {
  check_dense(a, op, a_name);
  check_dense(b, op, b_name);
  check_same_device({a, b}, op);
  COPPICE_CHECK(a.dtype() == b.dtype(), op, ": ", a_name, " and ", b_name, " have different dtypes (",
                dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), ")");
  COPPICE_CHECK(is_floating(a.dtype()), op, ": expected floating-point operands, got ", dtype_name(a.dtype()));
}

Tensor matmul_impl(const Tensor& a, const Tensor& b, std::string_view op) {
  COPPICE_CHECK(a.dim() >= 1 && b.dim() >= 1, op, ": both operands must be at least 1-D, got a ",
                shape_to_string(a.shape()), " and b ", shape_to_string(b.shape()));
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  COPPICE_CHECK(k == b2.size(-2), op, ": inner dimensions differ: a is ", shape_to_string(a.shape()), ", b is ",
                shape_to_string(b.shape()));
  Shape a_batch = batch_of(a2), b_batch = batch_of(b2);
  Shape batch = broadcast_shapes(a_batch, b_batch, op);

  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);
  if (shape_numel(out_shape) == 0) return empty(out_shape, a.options());
  if (k == 0) return zeros(out_shape, a.options());

  // [..., m, k] x [k, n] with a contiguous: one product of [batch*m, k] rows.
  if (shape_numel(b_batch) == 1 && !a_batch.empty() && a2.is_contiguous()) {
    Tensor c = gemm(a2.reshape({1, shape_numel(a_batch) * m, k}), b2.reshape({1, k, n}));
    return c.reshape(out_shape);
  }
  Tensor c = gemm(batched(a2, batch), batched(b2, batch));
  return c.reshape(out_shape);
}

// What linear asks of the shapes and of the bias, whatever the formats.
void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view op) {
  COPPICE_CHECK(weight.dim() == 2, op, ": weight must be 2-D [out, in], got ", shape_to_string(weight.shape()));
  COPPICE_CHECK(x.dim() >= 1, op, ": input must be at least 1-D, got a 0-D tensor");
  COPPICE_CHECK(x.size(-1) == weight.size(1), op, ": input's last dimension (", x.size(-1),
                ") differs from weight's in features: input is ", shape_to_string(x.shape()), ", weight is ",
                shape_to_string(weight.shape()));
  if (bias.defined()) {
    check_dense(bias, op, "bias");
    check_same_device({x, bias}, op);
    COPPICE_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias must be [", weight.size(0), "], got ",
                  shape_to_string(bias.shape()));
    COPPICE_CHECK(bias.dtype() == x.dtype(), op, ": bias has dtype ", dtype_name(bias.dtype()), ", expected ",
                  dtype_name(x.dtype()), " like the input");
  }
}

// The outputs of kernel `op` (a linear with its epilogue: bias, relu, gelu)
// registered for a dense x (at least 2-D), the weight's format and a dense
// bias (optional) on x's device, run on x's rows [N, in] with `attrs` and each
// put back to [..., out]; empty where no such kernel is registered.
std::vector<Tensor> fused_linear_kernel(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const Attrs& attrs = {}) {
  if (!x.is_dense() || x.dim() < 2 || (bias.defined() && !bias.is_dense())) return {};
  std::vector<std::string_view> formats{x.format(), weight.format()};
  if (bias.defined()) formats.push_back(bias.format());
  if (Dispatcher::instance().find(op, x.device().type, formats) == nullptr) return {};
  check_linear(x, weight, bias, op);
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  std::vector<Tensor> in{x.reshape({-1, x.size(-1)}), weight};
  if (bias.defined()) in.push_back(bias);
  std::vector<Tensor> out = dispatch(op, in, attrs);
  for (Tensor& t : out) t = t.reshape(out_shape);
  return out;
}

// linear(x, weight, bias), then relu when `relu`; `op` (op::kLinear or
// op::kLinearRelu) names the kernel asked for and the op errors name.
Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view op, bool relu) {
  auto activate = [relu](const Tensor& y) { return relu ? coppice::relu(y) : y; };
  if (any_sparse({x, weight})) {
    COPPICE_CHECK(!bias.defined() || bias.is_dense(), op, ": bias must be dense, got format '", bias.format(), "'");
    // A kernel that adds the bias, and applies the relu, itself (the tiled
    // BSR one, in its write-out) saves a pass over the output for each.
    if (relu || bias.defined()) {
      std::vector<Tensor> fused = fused_linear_kernel(op, x, weight, bias);
      if (!fused.empty()) return fused[0];
    }
    Tensor y = sparse_product(SparseProduct::kLinear, x, weight, op);
    return activate(bias.defined() ? add(y, bias) : y);
  }
  check_operands(x, weight, op, "input", "weight");
  check_linear(x, weight, bias, op);
  // A kernel that adds the bias (and applies the relu) in the GEMM's epilogue
  // (CUDA: cuBLASLt), on x's rows [N, in]; its result back to [..., out].
  static constexpr std::string_view kDense3[] = {"dense", "dense", "dense"};
  if (bias.defined() && x.device().is_cuda() && Dispatcher::instance().find(op, x.device().type, kDense3) != nullptr) {
    Shape out_shape = x.shape();
    out_shape.back() = weight.size(0);
    // The rows are the leading dimensions' product (spelled out: -1 cannot be inferred when in is 0).
    const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
    return dispatch(op, {x.reshape({rows, x.size(-1)}), weight, bias})[0].reshape(out_shape);
  }
  Tensor y = matmul_impl(x, weight.t(), op);
  return activate(bias.defined() ? add(y, bias) : y);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (any_sparse({a, b})) return sparse_product(SparseProduct::kMatmul, a, b, op::kMatmul);
  check_operands(a, b, op::kMatmul, "a", "b");
  return matmul_impl(a, b, op::kMatmul);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "bmm", "a", "b");
  COPPICE_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D operands [b, m, k] and [b, k, n], got a ",
                shape_to_string(a.shape()), " and b ", shape_to_string(b.shape()));
  COPPICE_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: a is ", shape_to_string(a.shape()), ", b is ",
                shape_to_string(b.shape()));
  return matmul_impl(a, b, "bmm");
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, op::kLinear, /*relu=*/false);
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, op::kLinearRelu, /*relu=*/true);
}

Tensor gelu_of_form(const Tensor& x, GeluForm form) { return form == GeluForm::kTanh ? gelu_tanh(x) : gelu(x); }

Tensor gelu_backward_of_form(const Tensor& g, const Tensor& x, GeluForm form) {
  return form == GeluForm::kTanh ? gelu_tanh_backward(g, x) : gelu_backward(g, x);
}

Tensor linear_add_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& r) {
  constexpr std::string_view op = op::kLinearAdd;
  COPPICE_CHECK(x.defined() && weight.defined() && r.defined(), op, ": input, weight and residual must be defined");
  if (!x.is_dense() || x.dim() < 2 || !r.is_dense() || (bias.defined() && !bias.is_dense())) return Tensor();
  const std::string_view formats[] = {x.format(), weight.format(), bias.defined() ? bias.format() : "none", r.format()};
  if (Dispatcher::instance().find(op, x.device().type, formats) == nullptr) return Tensor();
  check_linear(x, weight, bias, op);
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  COPPICE_CHECK(r.shape() == out_shape, op, ": the residual must have the product's shape ", shape_to_string(out_shape),
                ", got ", shape_to_string(r.shape()));
  check_same_device({x, r}, op);
  COPPICE_CHECK(r.dtype() == x.dtype(), op, ": the residual has dtype ", dtype_name(r.dtype()), ", expected ",
                dtype_name(x.dtype()), " like the input");
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  const Tensor y = dispatch(op, {x.reshape({rows, x.size(-1)}), weight, bias, r.reshape({rows, weight.size(0)})})[0];
  return y.defined() ? y.reshape(out_shape) : y;
}

GeluForm gelu_form(const Attrs& attrs) { return attrs.get_bool("tanh", false) ? GeluForm::kTanh : GeluForm::kErf; }

std::pair<Tensor, Tensor> linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluForm form) {
  if (x.defined() && weight.defined()) {
    std::vector<Tensor> fused =
        fused_linear_kernel(op::kLinearGelu, x, weight, bias, Attrs().set("tanh", form == GeluForm::kTanh));
    if (!fused.empty()) return {fused[0], fused[1]};
  }
  Tensor z = linear(x, weight, bias);
  return {gelu_of_form(z, form), z};
}

Tensor matmul_gelu_backward(const Tensor& g, const Tensor& weight, const Tensor& z, GeluForm form) {
  constexpr std::string_view op = op::kMatmulGeluBackward;
  COPPICE_CHECK(g.defined() && weight.defined() && z.defined(), op, ": grad, weight and z must all be defined");
  if (g.is_dense() && z.is_dense() && g.dim() >= 2 && weight.dim() == 2) {
    const std::string_view formats[] = {g.format(), weight.format(), z.format()};
    if (Dispatcher::instance().find(op, g.device().type, formats) != nullptr) {
      COPPICE_CHECK(g.size(-1) == weight.size(0), op, ": grad's last dimension (", g.size(-1),
                    ") differs from weight's out features: grad is ", shape_to_string(g.shape()), ", weight is ",
                    shape_to_string(weight.shape()));
      Shape in_shape = g.shape();
      in_shape.back() = weight.size(1);
      COPPICE_CHECK(z.shape() == in_shape, op, ": z must have the product's shape ", shape_to_string(in_shape),
                    ", got ", shape_to_string(z.shape()));
      check_same_device({g, weight, z}, op);
      COPPICE_CHECK(z.dtype() == g.dtype(), op, ": z has dtype ", dtype_name(z.dtype()), ", expected ",
                    dtype_name(g.dtype()), " like the grad");
      const int64_t in = weight.size(1);
      return dispatch(op, {g.reshape({-1, g.size(-1)}), weight, z.reshape({-1, in})},
                      Attrs().set("tanh", form == GeluForm::kTanh))[0]
          .reshape(in_shape);
    }
  }
  return gelu_backward_of_form(matmul(g, weight), z, form);
}

std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& g, const Tensor& x, bool bias, const Tensor& gw_out) {
  constexpr std::string_view op = "linear_weight_grad";
  check_operands(g, x, op, "grad", "input");
  COPPICE_CHECK(g.dim() == 2 && x.dim() == 2 && g.size(0) == x.size(0), op,
                ": expected grad [N, out] and input [N, in] with one N, got grad ", shape_to_string(g.shape()),
                " and input ", shape_to_string(x.shape()));
  // Two ops, also on CUDA: cuBLASLt's bias-gradient epilogue was slower
  // than the column sums (tensor/cuda/linear_lt.cc says by how much).
  const Tensor gb = bias ? sum(g, {0}) : Tensor();
  if (!gw_out.defined()) return {matmul(g.t(), x), gb};
  const Shape gw_shape{g.size(1), x.size(1)};
  check_dense(gw_out, op, "gw_out");
  COPPICE_CHECK(gw_out.shape() == gw_shape && gw_out.is_contiguous(), op, ": gw_out must be contiguous ",
                shape_to_string(gw_shape), ", got ", shape_to_string(gw_out.shape()),
                gw_out.is_contiguous() ? "" : " (not contiguous)");
  COPPICE_CHECK(gw_out.dtype() == g.dtype() && gw_out.device() == g.device(), op, ": gw_out is ",
                dtype_name(gw_out.dtype()), " on ", gw_out.device().to_string(), ", expected ", dtype_name(g.dtype()),
                " on ", g.device().to_string(), " like the grad");
  const void* out_block = gw_out.storage().data();
  COPPICE_CHECK(out_block != g.storage().data() && out_block != x.storage().data(), op,
                ": gw_out shares memory with the grad or the input");
  COPPICE_CHECK(!gw_out.storage().read_only(), op, ": gw_out is read-only memory");
  if (gw_out.numel() == 0) return {gw_out, gb};
  if (g.size(0) == 0) {
    Tensor zeroed = gw_out;
    return {zeroed.zero_(), gb};
  }
  return {gemm(g.t().unsqueeze(0), x.unsqueeze(0), gw_out.unsqueeze(0)).squeeze(0), gb};
}

}  // namespace coppice
