#include "models/sparse_attention.h"

#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "sparse/csr.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

bool keeps_block(const AttentionPattern& p, int64_t bi, int64_t bj) {
  return (bi > bj ? bi - bj : bj - bi) < p.window || (p.stride > 0 && (bj + 1) % p.stride == 0);
}

bool attends(const AttentionPattern& p, int64_t i, int64_t j) {
  if (p.causal && j > i) return false;
  if (i < p.global_tokens || j < p.global_tokens) return true;
  switch (p.kind) {
    case AttentionPattern::Kind::kDense: return true;
    case AttentionPattern::Kind::kLocal: return (i > j ? i - j : j - i) < p.window;
    case AttentionPattern::Kind::kBlock: return i / p.block == j / p.block;
    case AttentionPattern::Kind::kBlockSparse: return keeps_block(p, i / p.block, j / p.block);
    case AttentionPattern::Kind::kRouted: break;  // check_fixed_pattern refused it
  }
  return false;
}

}  // namespace

void check_attention_pattern(const AttentionPattern& p) {
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kLocal || p.window > 0,
                "attention pattern: local needs window > 0, got ", p.window);
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kBlock || p.block > 0,
                "attention pattern: block needs block > 0, got ", p.block);
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kBlockSparse || (p.block > 0 && p.window > 0 && p.stride >= 0),
                "attention pattern: block_sparse needs block > 0, window > 0 (blocks) and stride >= 0, got block ",
                p.block, ", window ", p.window, ", stride ", p.stride);
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kRouted || (p.block > 0 && p.window > 0 && p.top_k >= 0),
                "attention pattern: routed needs block > 0, window > 0 (blocks) and top_k >= 0, got block ", p.block,
                ", window ", p.window, ", top_k ", p.top_k);
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kRouted || p.global_tokens == 0,
                "attention pattern: routed does not take global_tokens (got ", p.global_tokens,
                "): it keeps whole blocks, and key block 0 always");
  COPPICE_CHECK(p.global_tokens >= 0, "attention pattern: global_tokens must be >= 0, got ", p.global_tokens);
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kBlockSparse || p.global_tokens == 0,
                "attention pattern: block_sparse does not take global_tokens (got ", p.global_tokens,
                "): its kernels keep whole blocks of ", p.block, " tokens, not one token's row and column");
}

namespace {

const CompressedImpl& csr_of(const Tensor& t, const char* op) {
  COPPICE_CHECK(t.defined() && t.layout() == Layout::kCsr, op, ": expected a CSR tensor, got format '",
                t.defined() ? t.format() : "undefined", "'");
  return csr_impl(t, op);
}

}  // namespace

std::string AttentionPattern::describe() const {
  std::vector<std::string> parts;
  std::string name;
  switch (kind) {
    case Kind::kDense: name = "dense"; break;
    case Kind::kLocal:
      name = "local";
      parts.push_back(str_cat("window=", window));
      break;
    case Kind::kBlock:
      name = "block";
      parts.push_back(str_cat("block=", block));
      break;
    case Kind::kBlockSparse:
      name = "block_sparse";
      parts.push_back(str_cat("block=", block, ", window=", window, ", stride=", stride));
      break;
    case Kind::kRouted:
      name = "routed";
      parts.push_back(str_cat("block=", block, ", window=", window, ", top_k=", top_k));
      break;
  }
  if (causal) parts.push_back("causal");
  if (global_tokens > 0) parts.push_back(str_cat("global=", global_tokens));
  return str_cat(name, "(", str_join(parts, ", "), ")");
}

AttentionPattern::Kind attention_kind_from_name(const std::string& name) {
  if (name == "dense") return AttentionPattern::Kind::kDense;
  if (name == "local") return AttentionPattern::Kind::kLocal;
  if (name == "block") return AttentionPattern::Kind::kBlock;
  if (name == "block_sparse") return AttentionPattern::Kind::kBlockSparse;
  if (name == "routed") return AttentionPattern::Kind::kRouted;
  fail("attention pattern: unknown kind '", name, "'; known: dense, local, block, block_sparse, routed");
}

std::vector<bool> block_sparse_keep(const AttentionPattern& p, int64_t tokens) {
  COPPICE_CHECK(p.kind == AttentionPattern::Kind::kBlockSparse,
                "block_sparse_keep: not a block_sparse pattern: ", p.describe());
  check_attention_pattern(p);
  COPPICE_CHECK(tokens > 0, "block_sparse_keep: tokens must be positive, got ", tokens);
  const int64_t blocks = (tokens + p.block - 1) / p.block;
  std::vector<bool> keep(static_cast<size_t>(blocks * blocks));
  for (int64_t bi = 0; bi < blocks; ++bi) {
    for (int64_t bj = 0; bj < blocks; ++bj) {
      keep[static_cast<size_t>(bi * blocks + bj)] = (!p.causal || bj <= bi) && keeps_block(p, bi, bj);
    }
  }
  return keep;
}

namespace {

void check_fixed_pattern(const AttentionPattern& p, const char* op) {
  check_attention_pattern(p);
  COPPICE_CHECK(p.kind != AttentionPattern::Kind::kRouted, op,
                ": a routed pattern depends on the queries and keys; it has no fixed mask (routed_keep)");
}

}  // namespace

Tensor attention_mask(const AttentionPattern& p, int64_t tokens, Device device) {
  check_fixed_pattern(p, "attention_mask");
  COPPICE_CHECK(tokens > 0, "attention_mask: tokens must be positive, got ", tokens);
  std::vector<uint8_t> m(static_cast<size_t>(tokens * tokens));
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j < tokens; ++j) m[static_cast<size_t>(i * tokens + j)] = attends(p, i, j) ? 1 : 0;
  }
  return ne(from_vector(m, {tokens, tokens}), 0.0).to(device);
}

Tensor block_keep_mask(const std::vector<bool>& keep, int64_t block, int64_t tokens, bool causal, Device device) {
  const int64_t nb = (tokens + block - 1) / block;
  COPPICE_CHECK(block > 0 && static_cast<int64_t>(keep.size()) == nb * nb, "block_keep_mask: ", keep.size(),
                " kept flags for ", nb, " x ", nb, " blocks of ", block, " tokens");
  std::vector<uint8_t> m(static_cast<size_t>(tokens * tokens));
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j < tokens; ++j) {
      m[static_cast<size_t>(i * tokens + j)] =
          (!causal || j <= i) && keep[static_cast<size_t>(i / block * nb + j / block)];
    }
  }
  return ne(from_vector(m, {tokens, tokens}), 0.0).to(device);
}

Tensor attention_pattern(const AttentionPattern& p, int64_t tokens, TensorOptions options) {
  check_fixed_pattern(p, "attention_pattern");
  COPPICE_CHECK(tokens > 0, "attention_pattern: tokens must be positive, got ", tokens);
  std::vector<int32_t> crow{0}, col;
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j < tokens; ++j) {
      if (attends(p, i, j)) col.push_back(static_cast<int32_t>(j));
    }
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  const int64_t nnz = static_cast<int64_t>(col.size());
  Tensor values = zeros({nnz}, TensorOptions(options.dtype, Device::cpu()));
  Tensor csr = sparse_csr(from_vector(crow, {tokens + 1}), from_vector(col, {nnz}), values, {tokens, tokens});
  return to_device(csr, options.device);
}

Tensor block_diagonal_pattern(const Tensor& pattern, int64_t copies) {
  const CompressedImpl& c = csr_of(pattern, "block_diagonal_pattern");
  COPPICE_CHECK(copies > 0, "block_diagonal_pattern: copies must be positive, got ", copies);
  if (copies == 1) return pattern;
  const int64_t m = pattern.size(0), n = pattern.size(1), nnz = c.nnz();
  COPPICE_CHECK(copies * nnz < (int64_t{1} << 31) && copies * (m + n) < (int64_t{1} << 31),
                "block_diagonal_pattern: ", copies, " copies of ", nnz, " entries overflow i32 indices");
  const std::vector<int32_t> crow = c.pointers().to(Device::cpu()).to_vector<int32_t>();
  const std::vector<int32_t> col = c.indices().to(Device::cpu()).to_vector<int32_t>();
  std::vector<int32_t> big_crow{0}, big_col;
  big_crow.reserve(static_cast<size_t>(copies * m + 1));
  big_col.reserve(static_cast<size_t>(copies * nnz));
  for (int64_t b = 0; b < copies; ++b) {
    for (int64_t r = 0; r < m; ++r) {
      for (int32_t i = crow[r]; i < crow[r + 1]; ++i) big_col.push_back(static_cast<int32_t>(b * n + col[i]));
      big_crow.push_back(static_cast<int32_t>(big_col.size()));
    }
  }
  const int64_t total = static_cast<int64_t>(big_col.size());
  Tensor csr = sparse_csr(from_vector(big_crow, {copies * m + 1}), from_vector(big_col, {total}),
                          zeros({total}, TensorOptions(pattern.dtype(), Device::cpu())), {copies * m, copies * n});
  return to_device(csr, pattern.device());
}

Variable sampled_scores(const Variable& q, const Variable& k, const Tensor& pattern) {
  csr_of(pattern, "sampled_scores");
  COPPICE_CHECK(q.dim() == 2 && k.dim() == 2 && q.size(1) == k.size(1), "sampled_scores: q [Tq, d] and k [Tk, d] ",
                "must be 2-D with one d");
  COPPICE_CHECK(pattern.size(0) == q.size(0) && pattern.size(1) == k.size(0), "sampled_scores: pattern [",
                pattern.size(0), ", ", pattern.size(1), "] does not match q's ", q.size(0), " and k's ", k.size(0),
                " tokens");
  Tensor qv = q.value().contiguous(), kv = k.value().contiguous();
  Tensor pat = to_dtype(pattern, qv.dtype());
  Tensor s = sddmm(qv, kv.t().contiguous(), pat);
  return record(s, "SampledScoresBackward", {q, k}, [qv, kv, s](const Tensor& g, const GradNeeds& n) {
    Tensor G = with_values(s, grad_values(g, s, "sampled_scores"));
    Tensor gq = n[0] ? matmul(G, kv) : Tensor();
    Tensor gk = n[1] ? matmul(transpose(G), qv) : Tensor();
    return std::vector<Tensor>{gq, gk};
  });
}

// The softmax runs where the values live (sparse/ops.h: csr_row_softmax and
// its backward have CPU and CUDA kernels), so a GPU step neither copies the
// scores to the host nor synchronizes, and can be captured in a CUDA graph.
Variable sparse_row_softmax(const Variable& x) {
  const Tensor xv = x.value();
  const CompressedImpl& c = csr_of(xv, "sparse_row_softmax");
  COPPICE_CHECK(is_floating(xv.dtype()), "sparse_row_softmax: values must be f32, f64, bf16 or f16, got ",
                dtype_name(xv.dtype()));
  const Tensor ptr = c.pointers();
  Tensor y = with_values(xv, csr_row_softmax(ptr, c.values()));
  return record(y, "SparseRowSoftmaxBackward", {x}, [y, ptr](const Tensor& g, const GradNeeds&) {
    Tensor gv = grad_values(g, y, "sparse_row_softmax");
    if (gv.dtype() != y.dtype()) gv = gv.to(y.dtype());
    return std::vector<Tensor>{with_values(y, csr_row_softmax_backward(ptr, values(y), gv))};
  });
}

}  // namespace coppice
