// The selection primitives the built-in sparsifiers run on (builtin.h).
//
// Each is a dispatcher op on dense tensors with a CPU kernel
// (mask_kernels_cpu.cc) and a CUDA twin (cuda/mask_kernels.cu) that gives
// the same result bit for bit, by the rules of mask_keys.h: NaN counts as the
// largest magnitude, ties go to the lower (flat) index. The frontends below
// check their operands and throw coppice::Error naming `op` (the caller).
//
// op                     inputs                      attrs                           output
// ---------------------  --------------------------  ------------------------------  ---------------------------
// sparsify_stream        x contiguous, floating      mode ("threshold" | "random"),  bool mask of x's shape, or
//                                                    threshold, p (double), seed,    (values) x * scale where
//                                                    offset (ints), scale (double),  kept, 0 elsewhere, x's dtype
//                                                    values (bool)                   (scale multiplies in f32 for
//                                                                                    16-bit types; 1 copies x)
// sparsify_topk_mask     keys contiguous f32/f64     k, magnitude (bool: rank |key|)  bool, keys' shape: exactly
//                        (any shape, < 2^31 elems)                                   k true (largest first)
// sparsify_block_scores  x contiguous 2-D f32/f64    block_rows, block_cols, l1      f64 [rows/bh, cols/bw]
// sparsify_nm_mask       x contiguous 3-D f32/f64    n, m                            bool, x's shape: n of every
//                        [outer, size, inner]                                        m consecutive along dim 1
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice::sparsify {

// |x| > threshold (compared in f64; NaN is dropped).
Tensor threshold_mask(const Tensor& x, double threshold, std::string_view op);
// x where |x| > threshold, 0 elsewhere: one pass.
Tensor threshold_values(const Tensor& x, double threshold, std::string_view op);

// Element i (row-major) is dropped when philox::uniform_f32(word(seed,
// offset, i)) < p (p rounded to f32), so p = 0 keeps all and p = 1 none.
Tensor random_mask(const Tensor& x, double p, uint64_t seed, uint64_t offset, std::string_view op);
// x * scale where kept, 0 elsewhere: one pass.
Tensor random_values(const Tensor& x, double p, uint64_t seed, uint64_t offset, double scale, std::string_view op);

// The k largest keys (by |key| when `magnitude`), exactly k of them, ties to
// the lower flat index, NaN largest. keys: any floating dtype (16-bit types
// are widened to f32 exactly).
Tensor topk_mask(const Tensor& keys, int64_t k, bool magnitude, std::string_view op);

// Per block of a 2-D x: the sum of squares (l1 false) or of |x| (l1 true),
// f64 [rows / bh, cols / bw]. bh and bw must divide the shape.
Tensor block_scores(const Tensor& x, int64_t bh, int64_t bw, bool l1, std::string_view op);
// block_scores (sum of squares) of the product sum_i a_i @ b_i (each a_i
// [rows, k_i], b_i [k_i, cols], any strides, one dtype and device), without
// forming the product whole: it is computed `chunk_rows` rows at a time (0:
// as many rows, a multiple of bh, as hold about 4M elements), each chunk's
// products summed in f32 (f64 for f64 factors). The mask updater ranks a
// block-sparse weight's gradient at every block this way (a_i, b_i: the
// factors autograd's GradientProbe hands over).
Tensor product_block_scores(const std::vector<std::pair<Tensor, Tensor>>& factors, int64_t bh, int64_t bw,
                            std::string_view op, int64_t chunk_rows = 0);
// A block mask [rows / bh, cols / bw] spread to the elements [rows, cols].
Tensor expand_block_mask(const Tensor& block_mask, int64_t bh, int64_t bw);

// In every group of m consecutive elements along `dim` (whose size m must
// divide), the n of largest |x|, ties to the lower index, NaN largest.
Tensor nm_mask(const Tensor& x, int64_t n, int64_t m, int64_t dim, std::string_view op);
// Why a tensor of `shape` has no n:m groups of m along `dim` (0-d, dim out
// of range, m not dividing it); empty when it has. nm_mask's check, for
// callers that must say so before they have the tensor.
std::string nm_shape_error(const Shape& shape, int64_t m, int64_t dim);

}  // namespace coppice::sparsify
