// The pieces of sparse attention: attention patterns as CSR matrices, the
// scores as an SDDMM of Q and K^T at the pattern, and a softmax over each
// row's stored values. Together with autograd's sparse matmul (A V) they make
// attention whose cost and memory scale with the pattern's nnz:
//
//   Tensor p = attention_pattern({AttentionPattern::Kind::kLocal, 4, 0, true}, T, options);
//   Variable a = sparse_row_softmax(sampled_scores(q, k, p));  // CSR, p's pattern
//   Variable out = matmul(a, v);                                // dense [T, d]
//
// All three are differentiable (float64 gradchecks in tests/models) and keep
// gradients in the pattern: the gradient of the scores is a CSR tensor with
// the pattern's version, never a dense [T, T] matrix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace coppice {

struct AttentionPattern {
  enum class Kind {
    kDense,  // every key (with `causal`, keys j <= i)
    kLocal,  // keys j with |i - j| < window (with `causal`, i - window < j <= i)
    kBlock,  // keys in the query's diagonal block of `block` tokens (with `causal`, j <= i)
    // Whole blocks of `block` tokens (Sparse Transformer's fixed pattern):
    // query block bi sees key block bj where |bi - bj| < window (local) or
    // (bj + 1) % stride == 0 (strided: every stride-th block), with `causal`
    // only keys j <= i. Runs on the fused attention kernels, skipping the
    // blocks it leaves out (block_sparse_keep).
    kBlockSparse,
    // Whole blocks chosen at run time from the queries and keys
    // (sparse/attention/routing.h): the local blocks within `window`, key
    // block 0, and the `top_k` best-scoring others by pooled q . k; runs on
    // the fused kernels like block_sparse. Depends on the data, so it has no
    // fixed mask (attention_mask and attention_pattern refuse it).
    kRouted,
  };
  Kind kind = Kind::kDense;
  int64_t window = 0;  // tokens (local), blocks (block_sparse)
  int64_t block = 0;
  bool causal = false;
  int64_t stride = 0;  // block_sparse: 0 means no strided blocks
  // Global tokens (Longformer, BigBird): the first `global_tokens` tokens
  // attend to every key and every query attends to them, on top of the kind's
  // pattern (with `causal`, still only keys j <= i). A class token is one.
  // block_sparse refuses them: its fused kernels keep whole blocks, which
  // cannot express one token's row and column.
  int64_t global_tokens = 0;
  int64_t top_k = 0;  // routed: key blocks chosen per query block, besides the fixed ones

  // Whether attention runs on a CSR pattern (local, block); dense and
  // block_sparse run on the fused kernels (sparse/attention/attention.h).
  bool is_sparse() const { return kind == Kind::kLocal || kind == Kind::kBlock; }
  std::string describe() const;  // "local(window=4, causal)", "block(block=4, global=1)"
};

// The kept blocks of a block_sparse pattern over `tokens` tokens, row-major
// [blocks, blocks] with blocks = ceil(tokens / block) (attention_block_pattern
// takes it); with `causal` no block above the diagonal. Refuses global_tokens
// > 0 (see AttentionPattern::global_tokens).
std::vector<bool> block_sparse_keep(const AttentionPattern& p, int64_t tokens);

// The [T, T] bool mask of whole kept blocks (row-major [nb, nb], nb =
// ceil(T / block), as block_sparse_keep and routed_keep give them), with
// `causal` only keys j <= i; on `device`.
Tensor block_keep_mask(const std::vector<bool>& keep, int64_t block, int64_t tokens, bool causal, Device device);

// Throws coppice::Error naming what a pattern lacks (a local window, a block
// size, a block_sparse stride, a global token count); every builder below
// checks its pattern with it.
void check_attention_pattern(const AttentionPattern& p);

// Parses "dense", "local", "block", "block_sparse" or "routed" (throws listing the known kinds).
AttentionPattern::Kind attention_kind_from_name(const std::string& name);

// The pattern of `p` over T queries and T keys: a CSR [T, T] with zero
// values (options: the values' dtype and device). Every row stores at least
// its diagonal. Dense patterns are given as CSR too (tests use them).
Tensor attention_pattern(const AttentionPattern& p, int64_t tokens, TensorOptions options = {});
// `copies` copies of CSR `pattern` [m, n] along the diagonal of a CSR
// [copies * m, copies * n] (one SDDMM/softmax/SpMM for every batch and head
// at once), with `pattern`'s value dtype and device.
Tensor block_diagonal_pattern(const Tensor& pattern, int64_t copies);
// The same as a bool [T, T] mask (true: the key is attended).
Tensor attention_mask(const AttentionPattern& p, int64_t tokens, Device device = Device::cpu());

// (q @ k^T) at the stored positions of `pattern` (CSR [Tq, Tk]); q [Tq, d],
// k [Tk, d] dense. The result has the pattern's format and version. Gradients:
// dq = G k, dk = G^T q, with G the CSR gradient of the scores.
Variable sampled_scores(const Variable& q, const Variable& k, const Tensor& pattern);

// Softmax over the stored values of each row of CSR `x` (the unstored
// entries count as -inf: they get no weight), f32, f64, bf16 or f16 (these
// two computed in f32), on the values' device (sparse/ops.h:
// csr_row_softmax). Same pattern and version; the gradient is
// y * (g - sum_row(g * y)) on the pattern. Rows without stored entries stay
// empty; the max propagates NaN.
Variable sparse_row_softmax(const Variable& x);

}  // namespace coppice
