// The attention frontends (attention.h): operand checks, the block pattern's
// walks (block_walks.h), then the device's kernel.
#include "sparse/attention/attention.h"

#include <memory>
#include <string_view>

#include "sparse/attention/block_walks.h"
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

// The mask as the kernels take it: its block size (0 without a pattern) and
// the pattern's walks, checked against q's T and device.
struct CheckedMask {
  int64_t block = 0;
  std::shared_ptr<const AttentionBlockWalks> walks;
};

CheckedMask check_mask(const AttentionMask& mask, const Tensor& q, std::string_view op) {
  if (!mask.blocks.defined()) return {};
  const int64_t block = checked_attention_block(mask.blocks, q.size(1), q.device(), op);
  return {block, attention_block_walks(mask.blocks)};
}

// Unit stride along d (the kernels read rows); any other strides stay.
Tensor rows_of(const Tensor& t) { return t.strides().back() == 1 ? t : t.contiguous(); }

int64_t heads_of(const Tensor& q) { return q.dim() == 4 ? q.size(0) * q.size(2) : q.size(0); }

Attrs attention_attrs(double scale, const AttentionMask& mask, const CheckedMask& checked) {
  Attrs a;
  a.set("scale", scale).set("causal", mask.causal).set("block", checked.block);
  return a;
}

// The walks, or as many undefined tensors (the kernels' "none" cells).
void push_walks(std::vector<Tensor>& in, const CheckedMask& checked) {
  if (!checked.walks) {
    in.insert(in.end(), kAttentionWalks, Tensor());
    return;
  }
  const std::vector<Tensor> walks = checked.walks->in_order();
  in.insert(in.end(), walks.begin(), walks.end());
}

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                  const AttentionMask& mask) {
  constexpr std::string_view op = op::kAttentionForward;
  check_qkv(q, k, v, op);
  const CheckedMask checked = check_mask(mask, q, op);
  std::vector<Tensor> in{rows_of(q), rows_of(k), rows_of(v)};
  push_walks(in, checked);
  std::vector<Tensor> out = dispatch(op, in, attention_attrs(scale, mask, checked));
  return {out[0], out[1]};
}

namespace {

// The backward pass into dq, dk and dv of q's shape (any layout with unit stride along d).
void backward_into(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, double scale,
                   const AttentionMask& mask) {
  constexpr std::string_view op = op::kAttentionBackward;
  check_qkv(q, k, v, op);
  const CheckedMask checked = check_mask(mask, q, op);
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
  push_walks(in, checked);
  dispatch(op, in, attention_attrs(scale, mask, checked));
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
  check_qkv(q, k, v, op::kAttentionBackward);
  AttentionGrads g{Tensor::empty(q.shape(), q.options()), Tensor::empty(q.shape(), q.options()),
                   Tensor::empty(q.shape(), q.options())};
  backward_into(q, k, v, out, lse, dout, g.dq, g.dk, g.dv, scale, mask);
  return g;
}

}  // namespace coppice
