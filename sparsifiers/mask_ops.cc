#include "sparsifiers/mask_ops.h"

#include <algorithm>
#include <climits>

#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::sparsify {
namespace {

void check_floating(const Tensor& x, std::string_view op) {
  check_dense(x, op, "input");
  COPPICE_CHECK(is_floating(x.dtype()), op, ": expected a floating-point tensor, got ", dtype_name(x.dtype()));
}

// f32 and f64 as they are; the 16-bit floats widened (exactly) to f32.
Tensor widened(const Tensor& x) {
  return (x.dtype() == DType::kF32 || x.dtype() == DType::kF64) ? x.contiguous() : x.to(DType::kF32).contiguous();
}

Attrs stream_attrs(const char* mode, double threshold, double p, uint64_t seed, uint64_t offset, double scale,
                   bool values) {
  Attrs a;
  a.set("mode", std::string(mode));
  a.set("threshold", threshold);
  a.set("p", p);
  a.set("seed", static_cast<int64_t>(seed));
  a.set("offset", static_cast<int64_t>(offset));
  a.set("scale", scale);
  a.set("values", values);
  return a;
}

Tensor stream(const Tensor& x, const Attrs& attrs, std::string_view op) {
  check_floating(x, op);
  return dispatch(op::kSparsifyStream, {x.contiguous()}, attrs)[0];
}

}  // namespace

Tensor threshold_mask(const Tensor& x, double threshold, std::string_view op) {
  return stream(x, stream_attrs("threshold", threshold, 0.0, 0, 0, 1.0, false), op);
}

Tensor threshold_values(const Tensor& x, double threshold, std::string_view op) {
  return stream(x, stream_attrs("threshold", threshold, 0.0, 0, 0, 1.0, true), op);
}

Tensor random_mask(const Tensor& x, double p, uint64_t seed, uint64_t offset, std::string_view op) {
  return stream(x, stream_attrs("random", 0.0, p, seed, offset, 1.0, false), op);
}

Tensor random_values(const Tensor& x, double p, uint64_t seed, uint64_t offset, double scale, std::string_view op) {
  return stream(x, stream_attrs("random", 0.0, p, seed, offset, scale, true), op);
}

Tensor topk_mask(const Tensor& keys, int64_t k, bool magnitude, std::string_view op) {
  check_floating(keys, op);
  COPPICE_CHECK(k >= 0 && k <= keys.numel(), op, ": cannot keep ", k, " of ", keys.numel(), " elements");
  COPPICE_CHECK(keys.numel() < INT_MAX, op, ": selects among fewer than 2^31 elements, got ", keys.numel());
  Attrs a;
  a.set("k", k);
  a.set("magnitude", magnitude);
  return dispatch(op::kSparsifyTopkMask, {widened(keys)}, a)[0];
}

Tensor block_scores(const Tensor& x, int64_t bh, int64_t bw, bool l1, std::string_view op) {
  check_floating(x, op);
  COPPICE_CHECK(x.dim() == 2, op, ": block scores need a 2-D tensor, got shape ", shape_to_string(x.shape()));
  COPPICE_CHECK(bh > 0 && bw > 0 && x.size(0) % bh == 0 && x.size(1) % bw == 0, op, ": block ", bh, "x", bw,
                " does not divide the shape ", shape_to_string(x.shape()));
  Attrs a;
  a.set("block_rows", bh);
  a.set("block_cols", bw);
  a.set("l1", l1);
  return dispatch(op::kSparsifyBlockScores, {widened(x)}, a)[0];
}

Tensor product_block_scores(const std::vector<std::pair<Tensor, Tensor>>& factors, int64_t bh, int64_t bw,
                            std::string_view op, int64_t chunk_rows) {
  COPPICE_CHECK(!factors.empty(), op, ": block scores of a product need at least one pair of factors");
  const Tensor& a0 = factors[0].first;
  const Tensor& b0 = factors[0].second;
  for (const auto& [a, b] : factors) {
    COPPICE_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), op,
                  ": the factors must be matrices [rows, k] and [k, cols], got ",
                  a.defined() ? shape_to_string(a.shape()) : "none", " and ",
                  b.defined() ? shape_to_string(b.shape()) : "none");
    COPPICE_CHECK(a.size(0) == a0.size(0) && b.size(1) == b0.size(1), op, ": every product must be ",
                  shape_to_string({a0.size(0), b0.size(1)}), ", got ", shape_to_string({a.size(0), b.size(1)}));
    COPPICE_CHECK(
        a.dtype() == a0.dtype() && b.dtype() == a0.dtype() && a.device() == a0.device() && b.device() == a0.device(),
        op, ": the factors must share one dtype and device");
    check_floating(a, op);
  }
  const int64_t rows = a0.size(0), cols = b0.size(1);
  COPPICE_CHECK(bh > 0 && bw > 0 && rows % bh == 0 && cols % bw == 0, op, ": block ", bh, "x", bw,
                " does not divide the product's shape ", shape_to_string({rows, cols}));
  constexpr int64_t kChunkElements = int64_t{1} << 22;
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(cols, 1) / bh) * bh;
  COPPICE_CHECK(chunk_rows % bh == 0, op, ": chunk_rows (", chunk_rows, ") must be a multiple of the block rows (", bh,
                ")");
  const DType sum_dtype = a0.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  std::vector<Tensor> parts;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    Tensor chunk;
    for (const auto& [a, b] : factors) {
      const Tensor p = matmul(a.narrow(0, r0, n), b).to(sum_dtype);
      chunk = chunk.defined() ? add(chunk, p) : p;
    }
    parts.push_back(block_scores(chunk, bh, bw, false, op));
  }
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

Tensor expand_block_mask(const Tensor& block_mask, int64_t bh, int64_t bw) {
  const int64_t rb = block_mask.size(0), cb = block_mask.size(1);
  return block_mask.reshape({rb, 1, cb, 1}).expand({rb, bh, cb, bw}).contiguous().reshape({rb * bh, cb * bw});
}

std::string nm_shape_error(const Shape& shape, int64_t m, int64_t dim) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  if (m < 1) return str_cat("m = ", m, " must be >= 1");
  if (ndim == 0) return "n:m needs at least one dimension, got a 0-d tensor";
  if (dim < -ndim || dim >= ndim) return str_cat("dim ", dim, " is out of range for shape ", shape_to_string(shape));
  const int64_t size = shape[static_cast<size_t>(dim < 0 ? dim + ndim : dim)];
  if (size % m != 0) return str_cat("m = ", m, " does not divide dim ", dim, " of shape ", shape_to_string(shape));
  return "";
}

Tensor nm_mask(const Tensor& x, int64_t n, int64_t m, int64_t dim, std::string_view op) {
  check_floating(x, op);
  COPPICE_CHECK(n >= 1 && n <= m && m <= 256, op, ": needs 1 <= n <= m <= 256, got n = ", n, ", m = ", m);
  const std::string why = nm_shape_error(x.shape(), m, dim);
  COPPICE_CHECK(why.empty(), op, ": ", why);
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const int64_t size = x.size(d);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  Attrs a;
  a.set("n", n);
  a.set("m", m);
  const Tensor x3 = widened(x).reshape({outer, size, inner});
  return dispatch(op::kSparsifyNmMask, {x3}, a)[0].reshape(x.shape());
}

}  // namespace coppice::sparsify
