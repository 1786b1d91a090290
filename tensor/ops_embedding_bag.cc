// Embedding bags (tensor/ops.h): the arguments checked and brought to the
// kernel's one form (flat i64 indices, B + 1 offsets), the forward pass
// through the embedding_bag kernels (tensor/cpu, tensor/cuda), and the
// gradients composed from existing ops: each entry's gradient row is its
// bag's row of grad times the entry's factor (in max mode grad's elements
// scattered to the entries that gave them), and embedding_backward (or the
// row-sparse sum) adds the rows of one embedding in entry order, so no new
// backward kernel is needed and the result is deterministic on both devices.
#include <string>

#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

constexpr std::string_view kOp = op::kEmbeddingBag;

// Offsets on the host, checked: offsets[0] = 0, never decreasing, none past
// n, and with include_last_offset the last one n. Returns the B + 1 form.
std::vector<int64_t> checked_offsets(const Tensor& offsets, int64_t n, bool include_last_offset) {
  COPPICE_CHECK(offsets.defined(), kOp, ": offsets are needed with 1-D indices (bag b starts at offsets[b])");
  check_dense(offsets, kOp, "offsets");
  COPPICE_CHECK(is_integral(offsets.dtype()), kOp, ": offsets must be an integer tensor, got ",
                dtype_name(offsets.dtype()));
  COPPICE_CHECK(offsets.dim() == 1, kOp, ": offsets must be 1-D, got ", shape_to_string(offsets.shape()));
  const Tensor host = offsets.to(Device::cpu()).to(DType::kI64).contiguous();
  std::vector<int64_t> o(host.data<int64_t>(), host.data<int64_t>() + host.numel());
  if (include_last_offset) {
    COPPICE_CHECK(!o.empty(), kOp, ": offsets with include_last_offset need at least one entry (the end, n)");
  }
  for (size_t b = 0; b < o.size(); ++b) {
    if (b == 0) {
      COPPICE_CHECK(o[0] == 0, kOp, ": offsets[0] must be 0, got ", o[0]);
    } else {
      COPPICE_CHECK(o[b] >= o[b - 1], kOp, ": offsets must not decrease, but offsets[", b, "] = ", o[b], " < offsets[",
                    b - 1, "] = ", o[b - 1]);
    }
    COPPICE_CHECK(o[b] <= n, kOp, ": offsets[", b, "] = ", o[b], " is past the end of the ", n, " indices");
  }
  if (include_last_offset) {
    COPPICE_CHECK(o.back() == n, kOp, ": with include_last_offset the last offset must be the number of indices, ", n,
                  ", got ", o.back());
  } else {
    o.push_back(n);
  }
  return o;
}

// Each entry's factor in the gradient: its per-sample weight (or 1), 0 at
// padding, and in mean mode divided by its bag's count of non-padding entries.
Tensor entry_factors(const EmbeddingBags& bags, TensorOptions options) {
  const int64_t n = bags.indices.numel();
  Tensor kept = bags.padding_idx < 0 ? ones({n}, options) : ne(bags.indices, double(bags.padding_idx)).to(options);
  if (bags.per_sample_weights.defined()) return mul(bags.per_sample_weights, kept);
  if (bags.mode == BagMode::kSum) return kept;
  // Counts per bag summed by embedding_backward (a deterministic segment sum);
  // a bag with none kept has only factors of 0, so its count is clamped to 1.
  Tensor counts = embedding_backward(kept.reshape({n, 1}), bags.entry_bag, bags.num_bags());
  Tensor entry_count = index_select(clamp(counts, 1.0, std::nullopt), 0, bags.entry_bag).reshape({n});
  return div(kept, entry_count);
}

}  // namespace

EmbeddingBags embedding_bags(const Tensor& weight, const Tensor& indices, const EmbeddingBagOptions& options) {
  check_dense(weight, kOp, "weight");
  check_dense(indices, kOp, "indices");
  check_same_device({weight, indices}, kOp);
  COPPICE_CHECK(weight.dim() == 2, kOp, ": weight must be 2-D [v, d], got ", shape_to_string(weight.shape()));
  COPPICE_CHECK(is_floating(weight.dtype()), kOp, ": weight must be floating-point, got ", dtype_name(weight.dtype()));
  COPPICE_CHECK(is_integral(indices.dtype()), kOp, ": indices must be an integer tensor, got ",
                dtype_name(indices.dtype()));
  const int64_t v = weight.size(0);
  const Device device = weight.device();
  EmbeddingBags bags;
  bags.mode = options.mode;
  bags.num_embeddings = v;
  bags.sample_shape = indices.shape();
  bags.indices = indices.reshape({-1}).to(DType::kI64).contiguous();
  const int64_t n = bags.indices.numel();

  std::vector<int64_t> offsets;
  if (indices.dim() == 2) {
    COPPICE_CHECK(!options.offsets.defined(), kOp,
                  ": offsets are for 1-D indices; 2-D indices [B, L] are B bags of L entries already");
    COPPICE_CHECK(!options.include_last_offset, kOp, ": include_last_offset is for 1-D indices with offsets");
    const int64_t b = indices.size(0), l = indices.size(1);
    for (int64_t i = 0; i <= b; ++i) offsets.push_back(i * l);
  } else {
    COPPICE_CHECK(indices.dim() == 1, kOp, ": indices must be 2-D [B, L] or 1-D with offsets, got ",
                  shape_to_string(indices.shape()));
    offsets = checked_offsets(options.offsets, n, options.include_last_offset);
  }
  const int64_t num_bags = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<int64_t> entry_bag(static_cast<size_t>(n));
  for (int64_t b = 0; b < num_bags; ++b) {
    for (int64_t e = offsets[b]; e < offsets[b + 1]; ++e) entry_bag[e] = b;
  }
  bags.offsets = from_vector(offsets, {num_bags + 1}).to(device);
  bags.entry_bag = from_vector(entry_bag, {n}).to(device);

  if (options.padding_idx.has_value()) {
    const int64_t p = *options.padding_idx;
    COPPICE_CHECK(p >= -v && p < v, kOp, ": padding_idx ", p, " is out of range for ", v,
                  " embeddings (it must be in [-", v, ", ", v, "))");
    bags.padding_idx = p < 0 ? p + v : p;
  }
  const Tensor& psw = options.per_sample_weights;
  if (psw.defined()) {
    COPPICE_CHECK(options.mode == BagMode::kSum, kOp,
                  ": per_sample_weights are taken in sum mode only (a weighted mean or max has no single meaning), "
                  "not in ",
                  bag_mode_name(options.mode), " mode");
    check_dense(psw, kOp, "per_sample_weights");
    check_same_device({weight, psw}, kOp);
    COPPICE_CHECK(psw.shape() == indices.shape(), kOp, ": per_sample_weights has shape ", shape_to_string(psw.shape()),
                  " but indices has shape ", shape_to_string(indices.shape()), "; they must be the same");
    COPPICE_CHECK(psw.dtype() == weight.dtype(), kOp, ": per_sample_weights has dtype ", dtype_name(psw.dtype()),
                  " but weight has ", dtype_name(weight.dtype()));
    bags.per_sample_weights = psw.reshape({-1}).contiguous();
  }
  return bags;
}

const char* bag_mode_name(BagMode mode) {
  switch (mode) {
    case BagMode::kSum: return "sum";
    case BagMode::kMean: return "mean";
    case BagMode::kMax: return "max";
  }
  return "?";
}

ValuesIndices embedding_bag_with_argmax(const Tensor& weight, const EmbeddingBags& bags) {
  Attrs attrs;
  attrs.set("mode", std::string(bag_mode_name(bags.mode))).set("padding_idx", bags.padding_idx);
  std::vector<Tensor> out =
      dispatch(kOp, {weight.contiguous(), bags.indices, bags.offsets, bags.per_sample_weights}, attrs);
  return {out[0], out.size() > 1 ? out[1] : Tensor()};
}

Tensor embedding_bag(const Tensor& weight, const EmbeddingBags& bags) {
  return embedding_bag_with_argmax(weight, bags).values;
}

Tensor embedding_bag(const Tensor& weight, const Tensor& indices, const EmbeddingBagOptions& options) {
  return embedding_bag(weight, embedding_bags(weight, indices, options));
}

Tensor embedding_bag_entry_grads(const Tensor& grad, const EmbeddingBags& bags, const Tensor& argmax) {
  COPPICE_CHECK(grad.dim() == 2 && grad.size(0) == bags.num_bags(), kOp, ": grad must be [", bags.num_bags(),
                ", d], got ", shape_to_string(grad.shape()));
  const int64_t n = bags.indices.numel();
  if (n == 0) return zeros({0, grad.size(1)}, grad.options());
  if (bags.mode == BagMode::kMax) {
    COPPICE_CHECK(argmax.defined() && argmax.shape() == grad.shape(), kOp,
                  ": max mode's gradient needs the forward's argmax, [", bags.num_bags(), ", ", grad.size(1), "]");
    // Each element's gradient to the entry that gave its maximum; an empty
    // bag's (-1) adds 0 at entry 0. An entry belongs to one bag, so no two
    // bags' elements meet: the sum is exact.
    const Tensor found = ge(argmax, 0.0);
    return scatter_add(zeros({n, grad.size(1)}, grad.options()), 0, where(found, argmax, zeros_like(argmax)),
                       where(found, grad, zeros_like(grad)).contiguous());
  }
  Tensor rows = index_select(grad.contiguous(), 0, bags.entry_bag);
  return mul(rows, entry_factors(bags, grad.options()).unsqueeze(1));
}

Tensor embedding_bag_per_sample_weights_grad(const Tensor& grad, const Tensor& weight, const EmbeddingBags& bags) {
  const int64_t n = bags.indices.numel();
  if (n == 0) return zeros(bags.sample_shape, grad.options());
  Tensor dots = sum(mul(index_select(grad.contiguous(), 0, bags.entry_bag), embedding(weight, bags.indices)), {1});
  if (bags.padding_idx >= 0) dots = mul(dots, ne(bags.indices, double(bags.padding_idx)).to(dots.dtype()));
  return dots.reshape(bags.sample_shape);
}

}  // namespace coppice
