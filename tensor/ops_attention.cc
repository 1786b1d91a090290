// The attention frontends (tensor/attention.h): operand checks, then the
// device's kernel.
#include <string_view>

#include "tensor/attention.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

DType lse_dtype(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op) {
  for (const Tensor* t : {&q, &k, &v}) {
    COPPICE_CHECK(t->defined() && t->is_dense(), op, ": q, k and v must be dense tensors");
  }
  COPPICE_CHECK(is_floating(q.dtype()), op, ": q must be floating-point, got ", dtype_name(q.dtype()));
  COPPICE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": q, k and v must share a dtype, got ",
                dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  COPPICE_CHECK(k.device() == q.device() && v.device() == q.device(), op, ": q, k and v must be on one device, got ",
                q.device().to_string(), ", ", k.device().to_string(), ", ", v.device().to_string());
  COPPICE_CHECK((q.dim() == 3 || q.dim() == 4) && q.size(1) > 0 && q.size(q.dim() - 1) > 0, op,
                ": q must be [N, T, d] or [B, T, H, d] with T, d > 0, got ", shape_to_string(q.shape()));
  COPPICE_CHECK(k.shape() == q.shape() && v.shape() == q.shape(), op, ": k and v must have q's shape ",
                shape_to_string(q.shape()), ", got ", shape_to_string(k.shape()), " and ", shape_to_string(v.shape()));
}

void check_mask(const AttentionMask& mask, const Tensor& q, std::string_view op) {
  const AttentionBlockLayout& l = mask.layout;
  if (!l.defined()) return;
  const int64_t t = q.size(1);
  COPPICE_CHECK(l.blocks == (t + l.block - 1) / l.block, op, ": the block layout covers ", l.blocks, " blocks of ",
                l.block, " tokens, but T = ", t, " needs ", (t + l.block - 1) / l.block);
  for (const Tensor* p : {&l.row_ptr, &l.col_idx, &l.col_ptr, &l.row_idx}) {
    COPPICE_CHECK(p->defined() && p->dtype() == DType::kI32 && p->dim() == 1 && p->device() == q.device(), op,
                  ": the block layout's indices must be i32 vectors on ", q.device().to_string(),
                  " (attention_block_layout builds them)");
  }
}

// Unit stride along d (the kernels read rows); any other strides stay.
Tensor rows_of(const Tensor& t) { return t.strides().back() == 1 ? t : t.contiguous(); }

int64_t heads_of(const Tensor& q) { return q.dim() == 4 ? q.size(0) * q.size(2) : q.size(0); }

Attrs attention_attrs(double scale, const AttentionMask& mask) {
  Attrs a;
  a.set("scale", scale).set("causal", mask.causal).set("block", mask.layout.block);
  return a;
}

void push_layout(std::vector<Tensor>& in, const AttentionMask& mask) {
  const AttentionBlockLayout& l = mask.layout;
  for (const Tensor* p : {&l.row_ptr, &l.col_idx, &l.col_ptr, &l.row_idx}) in.push_back(l.defined() ? *p : Tensor());
}

}  // namespace

AttentionBlockLayout attention_block_layout(const std::vector<bool>& keep, int64_t block, Device device) {
  COPPICE_CHECK(block > 0, "attention_block_layout: block must be positive, got ", block);
  int64_t n = 0;
  while (n * n < static_cast<int64_t>(keep.size())) ++n;
  COPPICE_CHECK(n * n == static_cast<int64_t>(keep.size()) && n > 0,
                "attention_block_layout: keep must be a non-empty square matrix, got ", keep.size(), " entries");
  std::vector<int32_t> row_ptr{0}, col_idx, col_ptr{0}, row_idx;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (keep[static_cast<size_t>(i * n + j)]) col_idx.push_back(static_cast<int32_t>(j));
    }
    row_ptr.push_back(static_cast<int32_t>(col_idx.size()));
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      if (keep[static_cast<size_t>(i * n + j)]) row_idx.push_back(static_cast<int32_t>(i));
    }
    col_ptr.push_back(static_cast<int32_t>(row_idx.size()));
  }
  auto on_device = [&](const std::vector<int32_t>& v) {
    return from_vector(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::kI32)).to(device);
  };
  AttentionBlockLayout l;
  l.block = block;
  l.blocks = n;
  l.row_ptr = on_device(row_ptr);
  l.col_idx = on_device(col_idx);
  l.col_ptr = on_device(col_ptr);
  l.row_idx = on_device(row_idx);
  return l;
}

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                  const AttentionMask& mask) {
  constexpr std::string_view op = "attention_forward";
  check_qkv(q, k, v, op);
  check_mask(mask, q, op);
  std::vector<Tensor> in{rows_of(q), rows_of(k), rows_of(v)};
  push_layout(in, mask);
  std::vector<Tensor> out = dispatch(op, in, attention_attrs(scale, mask));
  return {out[0], out[1]};
}

namespace {

// The backward pass into dq, dk and dv of q's shape (any layout with unit stride along d).
void backward_into(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, double scale,
                   const AttentionMask& mask) {
  constexpr std::string_view op = "attention_backward";
  check_qkv(q, k, v, op);
  check_mask(mask, q, op);
  COPPICE_CHECK(out.defined() && dout.defined() && out.shape() == q.shape() && dout.shape() == q.shape(), op,
                ": out and dout must have q's shape ", shape_to_string(q.shape()));
  COPPICE_CHECK(out.dtype() == q.dtype() && dout.dtype() == q.dtype(), op, ": out and dout must have q's dtype ",
                dtype_name(q.dtype()));
  COPPICE_CHECK(out.device() == q.device() && dout.device() == q.device() && lse.device() == q.device(), op,
                ": out, lse and dout must be on q's device ", q.device().to_string());
  const int64_t n = heads_of(q), t = q.size(1);
  COPPICE_CHECK(lse.defined() && lse.shape() == Shape({n, t}) && lse.dtype() == lse_dtype(q.dtype()), op,
                ": lse must be ", dtype_name(lse_dtype(q.dtype())), " [", n, ", ", t, "]");
  // out and dout alike: both contiguous.
  std::vector<Tensor> in{rows_of(q), rows_of(k), rows_of(v), out.contiguous(), lse.contiguous(), dout.contiguous(),
                         dq,         dk,         dv};
  push_layout(in, mask);
  dispatch(op, in, attention_attrs(scale, mask));
}

}  // namespace

AttentionOutput attention_forward_packed(const Tensor& qkv, double scale, const AttentionMask& mask) {
  COPPICE_CHECK(qkv.defined() && qkv.dim() == 5 && qkv.size(2) == 3, "attention_forward: packed qkv must be ",
                "[B, T, 3, H, d], got ", qkv.defined() ? shape_to_string(qkv.shape()) : "undefined");
  const Tensor x = rows_of(qkv);
  return attention_forward(x.select(2, 0), x.select(2, 1), x.select(2, 2), scale, mask);
}

Tensor attention_backward_packed(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                                 double scale, const AttentionMask& mask) {
  COPPICE_CHECK(qkv.defined() && qkv.dim() == 5 && qkv.size(2) == 3, "attention_backward: packed qkv must be ",
                "[B, T, 3, H, d], got ", qkv.defined() ? shape_to_string(qkv.shape()) : "undefined");
  const Tensor x = rows_of(qkv);
  Tensor dqkv = Tensor::empty(x.shape(), x.options());
  backward_into(x.select(2, 0), x.select(2, 1), x.select(2, 2), out, lse, dout, dqkv.select(2, 0), dqkv.select(2, 1),
                dqkv.select(2, 2), scale, mask);
  return dqkv;
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& dout, double scale, const AttentionMask& mask) {
  check_qkv(q, k, v, "attention_backward");
  AttentionGrads g{Tensor::empty(q.shape(), q.options()), Tensor::empty(q.shape(), q.options()),
                   Tensor::empty(q.shape(), q.options())};
  backward_into(q, k, v, out, lse, dout, g.dq, g.dk, g.dv, scale, mask);
  return g;
}

}  // namespace coppice
