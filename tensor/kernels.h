// The dense primitive kernels: the contract between the op frontends (ops.h)
// and each device's kernels (tensor/cpu, tensor/cuda).
//
// Every device registers each primitive below with the dispatcher under its
// name, for dense inputs ("dense" per input, "none" for an absent optional
// one). Frontends prepare the inputs as stated (contiguous where it says so),
// so kernels stay small. The CPU kernel of each primitive is the CUDA
// kernel's twin: tests compare them.
//
// Floating kernels compute bf16/f16 in f32 and f32/f64 in their own type.
//
// name            inputs                         attrs                                 outputs
// --------------  -----------------------------  ------------------------------------  -------------------------------
// fill_           out                            value (double)                        out
// copy_           dst, src (src broadcasts to    -                                     dst
//                 dst; any strides; any dtypes,
//                 converted)
// <unary>         x (any strides)                clamp: min, max (doubles; +-inf for   y contiguous, x's shape, dtype:
//                                                "none")                               x's (Domain kAny/kAnyButBool
//                                                                                      ops also take integers)
// <binary>        a, b (broadcast; same dtype,   -                                     contiguous, broadcast shape;
//                 any strides)                                                         a's dtype, bool for comparisons
// where           cond (bool), a, b (same        -                                     contiguous, broadcast shape
//                 dtype; broadcast)
// reduce_sum      x contiguous [outer, r]        -                                     [outer], x's dtype (i64 for
//                                                                                      ints)
// reduce_sum_cols x [r, inner] (floating)        -                                     [inner], column sums
//                 or [batch, r, inner]                                                 ([batch, inner])
// reduce_max      x contiguous [outer, r], r>0   -                                     values [outer], indices i64
//                                                                                      [outer]
// reduce_min      same                           -                                     same
// gemm            a, b contiguous 3-D            trans_a, trans_b (bools)              c [batch, m, n] contiguous,
//                 a: [ba, m, k] ([ba, k, m] if                                         dtype of a; f32 accumulation
//                 trans_a); b: [bb, k, n]                                              for 16-bit types
//                 ([bb, n, k] if trans_b);
//                 ba == bb, or one of them 1
//                 (broadcast over the batch)
// im2col          x contiguous [n, c, h, w]      kernel, stride, padding, dilation     cols [n, c*kh*kw, oh*ow]
//                                                (each [2] ints)
// col2im          cols contiguous                same, plus size ([h, w])              x [n, c, h, w] (overlaps summed)
//                 [n, c*kh*kw, oh*ow]
// max_pool2d      x contiguous [n, c, h, w]      kernel, stride, padding ([2] each)    values [n, c, oh, ow], indices
// i64
//                                                                                      (flat h*w position in the plane)
// embedding_      grad [n, d], index i64 [n]    num_embeddings                        [num_embeddings, d]: rows summed
//   backward                                                                           by index, in order, rounded once
// embedding_bag   weight contiguous [v, d],      mode ("sum", "mean", "max"),          [B, d]: bag b sums weight's
//                 indices i64 [n], offsets i64   padding_idx (-1: none, else in        rows at its entries in order
//                 [B + 1] (0 first, n last, non- [0, v))                               (times each per-sample weight),
//                 decreasing), per-sample                                             padding skipped, mean: over
//                 weights [n] or none (sum                                            the rest; rounded once. max:
//                 mode)                                                               the largest in each column
//                                                                                      (the first in entry order; NaN
//                                                                                      wins), and a second output, i64
//                                                                                      [B, d]: its entry's position
//                                                                                      (-1 for an empty bag: zeros)
// index_select    x contiguous, index i64 1-D    dim                                   contiguous
// gather          x contiguous, index i64        dim                                   contiguous, index's shape
//                 contiguous (same ndim)
// scatter_add     x contiguous, index i64        dim                                   x + src scattered at index
//                 contiguous, src contiguous                                           (new tensor)
//                 (index's shape)
// index_copy_     x contiguous, index i64 1-D    dim                                   x, written in place: its
//                 (distinct), src contiguous                                           slices at index along dim
//                 (x's shape, index.numel() at                                         replaced by src's, in order;
//                 dim)                                                                 nothing else touched
// topk            x contiguous [outer, r]        k, largest (bool)                     values [outer, k], indices i64
//                                                                                      [outer, k], sorted, ties by
//                                                                                      lower index first
// uniform_        out contiguous floating        seed, offset (ints), low, high        out (philox::uniform_*)
// normal_         out contiguous floating        seed, offset, mean, std               out (philox::normal)
// randint_        out contiguous integer         seed, offset, low, high (ints)        out: low + word % (high-low)
//
// index_select, gather, scatter_add and index_copy_ check every index against [0, size of
// dim) and throw coppice::Error naming the op before writing anything; the
// frontends rely on it rather than copying indices to the host.
//
// <unary>: the ops of tensor/unary_ops.h (COPPICE_UNARY_OPS) and clamp
// <binary>: the ops of tensor/binary_ops.h (COPPICE_BINARY_OPS)
//
// Optional fused kernels. The frontends of these composites (ops.h) call a
// kernel of the op's own name when the device registers one (has_kernel), after
// validating the operands; otherwise they run the composite. Inputs may have
// any strides; outputs are contiguous, in the floating input's dtype.
//
// softmax,        x (floating)                   dim (normalized, >= 0)                y, x's shape
// log_softmax
// cross_entropy   logits [n, c], target i64 [n]  label_smoothing (double),             loss: 0-D, or [n] for "none"
//                 (range-checked by the kernel)  ignore_index (int), reduction
//                                                ("mean" | "sum" | "none")
// cross_entropy_  logits [n, c], target i64 [n],  as cross_entropy                      d loss / d logits, [n, c]
//   backward      grad (0-D, or [n] for "none")
// layer_norm      x, weight, bias (optional;     normalized_shape (ints), eps          y, x's shape
//                 normalized_shape each)
// layer_norm_     x contiguous, weight           d (the normalized size), eps,          dx (x's shape), dweight [d],
//   backward      (optional), grad contiguous    dweight, dbias (bools: wanted)         dbias [d] (undefined unless
//                                                                                      wanted)
// add_layer_norm  x, r (x's shape and dtype),    normalized_shape (ints), eps          h = x + r, y = layer_norm(h);
//                 weight, bias (optional)                                              x's shape each
// add_layer_norm_ h contiguous, weight           as layer_norm_backward                dx = dh + layer_norm's dx,
//   backward      (optional), dy contiguous,                                           dweight, dbias as
//                 dh (optional; h's shape)                                             layer_norm_backward's
// conv2d          x [n, c, h, w], weight         kernel, stride, padding, dilation     y [n, o, oh, ow]
//                 [o, c, kh, kw], bias [o]       ([2] each)
//                 (optional)
#pragma once
