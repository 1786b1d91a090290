// The op parity harness's rows for the dense-operand ops of the layers above
// tensor/ (op_problems.h says how a row reads): fused attention
// (sparse/attention), sparse/'s array kernels and 2:4 device twins, the
// sparsifiers' selection kernels (sparsifiers/mask_ops.h, fused_relu.h) and
// the optimizers' fused steps (optim/).
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sparse/attention/attention.h"
#include "sparse/attention/block_pattern.h"
#include "sparse/attention/block_walks.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "tests/sparse/op_problems.h"

namespace coppice::parity {

// ---- attention -------------------------------------------------------------

// q, k, v [2, 48, d]: d = 64 takes CUDA's tensor-core kernels for bf16/f16,
// d = 24 the per-query loops; causal or not; with the walks of a block
// pattern (16-token blocks, query block 1 sees no key block of its own) when
// the cell takes them ("dense"), else none. A query that sees no key has
// out 0 and lse -inf on every side.
struct AttentionCase {
  std::string name;
  std::vector<Tensor> qkv;    // on the device
  std::vector<Tensor> walks;  // kAttentionWalks, or as many undefined
  Attrs attrs;
};

inline std::vector<AttentionCase> attention_cases(bool pattern, DType t, const Device& d) {
  constexpr int64_t n = 2, tokens = 48, block = 16;
  std::vector<AttentionCase> out;
  for (int64_t dh : {64, 24}) {
    for (bool causal : {false, true}) {
      AttentionCase c;
      c.name = "d " + std::to_string(dh) + (causal ? ", causal" : "") + (pattern ? ", block pattern" : "");
      for (uint64_t s : {40, 41, 42}) c.qkv.push_back(on(full_values({n, tokens, dh}, s), t, d));
      c.walks.assign(kAttentionWalks, Tensor());
      if (pattern) {
        const std::vector<bool> keep = {true, false, true, true, false, false, true, true, true};
        const auto walks = attention_block_walks(attention_block_pattern(keep, block, d));
        c.walks = walks->in_order();
      }
      c.attrs.set("scale", 1.0 / std::sqrt(static_cast<double>(dh)))
          .set("causal", causal)
          .set("block", pattern ? block : 0);
      out.push_back(c);
    }
  }
  return out;
}

inline DType lse_dtype_of(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }

// Within the rounding of the largest magnitude, twice over: CUDA's tiled
// kernels round p (and the backward's ds) to the 16-bit input type before
// their products, as FlashAttention does (tests/sparse/attention/cuda/
// attention_test.cc allows 2 % of the largest value for bf16).
inline Expected attention_bound(const Tensor& want, int64_t terms) {
  Expected e = normwise(want, terms);
  e.lipschitz = 2.0;
  return e;
}

// attention_forward: out (q's dtype) and lse, against the CPU cell in f64.
inline std::vector<OpCase> attention_forward_cases(const std::vector<std::string>& f, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (const AttentionCase& a : attention_cases(f[3] != "none", t, d)) {
    OpCase c{a.name, a.qkv, a.attrs, {}, {}};
    c.inputs.insert(c.inputs.end(), a.walks.begin(), a.walks.end());
    const std::vector<Tensor> want = wide_cell(op::kAttentionForward, c);
    const int64_t terms = 48 + a.qkv[0].size(2);  // a row's scores, each a dot product
    Expected lse = normwise(want[1], terms);
    lse.dtype = lse_dtype_of(t);
    c.outputs = {attention_bound(want[0], terms), lse};
    out.push_back(c);
  }
  return out;
}

// attention_backward (in place into dq, dk, dv): out and lse are the CPU
// forward's in the run's dtype (as stored: the backward forms D from out as
// rounded), dout drawn; against the CPU cell in f64 on the same values.
inline std::vector<OpCase> attention_backward_cases(const std::vector<std::string>& f, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (const AttentionCase& a : attention_cases(f[9] != "none", t, d)) {
    std::vector<Tensor> forward_in = host_copies(a.qkv, false);
    for (const Tensor& w : a.walks) forward_in.push_back(host_copy(w, false));
    const std::vector<Tensor> fwd = cpu_cell(op::kAttentionForward, forward_in, a.attrs, {});
    OpCase c{a.name, a.qkv, a.attrs, {6, 7, 8}, {}};
    const Shape shape = a.qkv[0].shape();
    c.inputs.push_back(fwd[0].to(d));
    c.inputs.push_back(fwd[1].to(d));
    c.inputs.push_back(on(full_values(shape, 43), t, d));
    for (int i = 0; i < 3; ++i) c.inputs.push_back(zeros(shape, TensorOptions(t, d)));
    c.inputs.insert(c.inputs.end(), a.walks.begin(), a.walks.end());
    const int64_t terms = 48 + shape[2];
    for (const Tensor& g : wide_cell(op::kAttentionBackward, c)) c.outputs.push_back(attention_bound(g, terms));
    out.push_back(c);
  }
  return out;
}

// ---- sparse/'s arrays --------------------------------------------------------

// A CSR pattern of 5 rows, the second empty, one of 12 entries.
inline Tensor row_pointers(const Device& d) { return from_vector<int32_t>({0, 3, 3, 10, 11, 23}, {6}).to(d); }

inline std::vector<OpCase> csr_row_softmax_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "5 rows, one empty";
  c.inputs = {row_pointers(d), on(uniform_values({23}, 44, -4.0, 4.0), t, d)};
  c.outputs = {near(wide_cell(op::kCsrRowSoftmax, c)[0], 12)};
  return {c};
}

// y is the CPU softmax in the run's dtype; gx = y * (g - sum(g * y)) cancels.
inline std::vector<OpCase> csr_row_softmax_backward_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase s;
  s.inputs = {row_pointers(d), on(uniform_values({23}, 44, -4.0, 4.0), t, d)};
  OpCase c;
  c.name = "5 rows, one empty";
  c.inputs = {row_pointers(d), same_cell(op::kCsrRowSoftmax, s)[0].to(d), on(full_values({23}, 45), t, d)};
  c.outputs = {normwise(wide_cell(op::kCsrRowSoftmaxBackward, c)[0], 12)};
  return {c};
}

// dense_mask_to_csr: {crow, col, values} bit for bit, an empty row and an empty mask.
inline std::vector<OpCase> dense_mask_to_csr_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (bool empty : {false, true}) {
    OpCase c;
    c.name = empty ? "nothing kept" : "[5, 7], row 1 empty";
    Tensor keep = gt(uniform_values({5, 7}, 46, -1.0, 1.0), empty ? 2.0 : 0.0);
    if (!empty) keep.select(0, 1).zero_();
    c.inputs = {on(full_values({5, 7}, 47), t, d), on(keep, d)};
    c.outputs = all_exact(same_cell(op::kDenseMaskToCsr, c), t);
    out.push_back(c);
  }
  return out;
}

// Values for 2:4 selection: per group of four, distinct magnitudes (k / 8,
// exact in every dtype) with random signs, so the kept pair is not a tie.
inline Tensor nm_values(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t g = 0; g + 4 <= v.size(); g += 4) {
    std::vector<int> k = {1, 2, 3, 4};
    std::shuffle(k.begin(), k.end(), rng);
    const double base = static_cast<double>(1 + rng() % 8);
    for (size_t j = 0; j < 4; ++j) v[g + j] = ((rng() & 1) != 0 ? -1.0 : 1.0) * (base + k[j]) / 8.0;
  }
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

// nm24_compress, nm24_compress_masked, nm24_transposable_mask: CUDA's twins
// of CPU functions that run without the dispatcher (nm_compress,
// transposable_nm_mask); the CPU function on the same values is the
// reference, bit for bit.
inline std::vector<OpCase> nm24_compress_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[4, 16]";
  c.inputs = {on(nm_values({4, 16}, 48), t, d)};
  const Tensor nm = nm_compress(host_copy(c.inputs[0], false), 2, 4);
  c.outputs = {exact(nm_impl(nm, "parity").values()), exact(nm_impl(nm, "parity").indices(), DType::kU8)};
  return {c};
}

// A mask keeping two, one or none of each group: the groups that keep fewer
// hold explicit zeros at their lowest free positions.
inline std::vector<OpCase> nm24_compress_masked_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::mt19937_64 rng(49);
  std::vector<bool> keep(64, false);
  for (size_t g = 0; g < 16; ++g) {
    std::vector<size_t> at = {0, 1, 2, 3};
    std::shuffle(at.begin(), at.end(), rng);
    for (size_t j = 0; j < g % 3; ++j) keep[4 * g + at[j]] = true;
  }
  std::vector<uint8_t> bytes(keep.begin(), keep.end());
  OpCase c;
  c.name = "[4, 16], two, one or none kept a group";
  c.inputs = {on(nm_values({4, 16}, 50), t, d), from_vector(bytes, {4, 16}).to(DType::kBool).to(d)};
  const Tensor nm = nm_compress(host_copy(c.inputs[0], false), host_copy(c.inputs[1], false), 2, 4);
  c.outputs = {exact(nm_impl(nm, "parity").values()), exact(nm_impl(nm, "parity").indices(), DType::kU8),
               exact(from_vector<int64_t>({-1}, {1}), DType::kI64)};
  return {c};
}

inline std::vector<OpCase> nm24_transposable_mask_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "[8, 12]";
  c.inputs = {on(full_values({8, 12}, 51), t, d)};
  c.outputs = {exact(transposable_nm_mask(host_copy(c.inputs[0], false), 2, 4), DType::kBool)};
  return {c};
}

// ---- sparsifiers -------------------------------------------------------------
// The selection kernels give the same result bit for bit on every device
// (mask_ops.h, by mask_keys.h's rules): the CPU cell in the run's dtype.

// relu_to_csr: x > threshold as CSR; a value exactly at the threshold, zeros
// and an all-negative row.
inline std::vector<OpCase> relu_to_csr_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (double threshold : {0.0, 0.5}) {
    OpCase c;
    c.name = "threshold " + std::to_string(threshold);
    Tensor x = uniform_values({6, 9}, 52, -1.0, 1.0);
    x.select(0, 2).fill_(-0.25);
    x.select(0, 3).select(0, 4).fill_(0.5);
    x.select(0, 4).select(0, 0).zero_();
    c.inputs = {on(x, t, d)};
    c.attrs.set("threshold", threshold);
    c.outputs = all_exact(same_cell(op::kReluToCsr, c), t);
    out.push_back(c);
  }
  return out;
}

inline std::vector<OpCase> sparsify_stream_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (const char* mode : {"threshold", "random"}) {
    for (bool values : {false, true}) {
      OpCase c;
      c.name = std::string(mode) + (values ? ", values" : ", mask");
      c.inputs = {on(uniform_values({7, 9}, 53, -1.0, 1.0), t, d)};
      c.attrs.set("mode", std::string(mode))
          .set("threshold", 0.4)
          .set("p", 0.3)
          .set("seed", int64_t{77})
          .set("offset", int64_t{5})
          .set("scale", values ? 1.25 : 1.0)
          .set("values", values);
      c.outputs = all_exact(same_cell(op::kSparsifyStream, c), t);
      out.push_back(c);
    }
  }
  return out;
}

// Keys with ties (quarters) and a NaN (the largest), by value and by magnitude.
inline std::vector<OpCase> sparsify_topk_mask_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (bool magnitude : {false, true}) {
    OpCase c;
    c.name = magnitude ? "by magnitude" : "by value";
    Tensor keys = quarter_values({5, 13}, 54);
    keys.select(0, 3).select(0, 7).fill_(std::numeric_limits<double>::quiet_NaN());
    c.inputs = {on(keys, t, d)};
    c.attrs.set("k", int64_t{17}).set("magnitude", magnitude);
    c.outputs = all_exact(same_cell(op::kSparsifyTopkMask, c), t);
    out.push_back(c);
  }
  return out;
}

inline std::vector<OpCase> sparsify_block_scores_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (bool l1 : {false, true}) {
    OpCase c;
    c.name = l1 ? "l1, 2 x 3 blocks" : "squares, 2 x 3 blocks";
    c.inputs = {on(full_values({8, 12}, 55), t, d)};
    c.attrs.set("block_rows", int64_t{2}).set("block_cols", int64_t{3}).set("l1", l1);
    c.outputs = all_exact(same_cell(op::kSparsifyBlockScores, c), t);
    out.push_back(c);
  }
  return out;
}

// 2 of every 4 along dim 1 of [2, 8, 3], with ties (quarters).
inline std::vector<OpCase> sparsify_nm_mask_cases(const std::vector<std::string>&, DType t, const Device& d) {
  OpCase c;
  c.name = "2:4 along dim 1 of [2, 8, 3]";
  c.inputs = {on(quarter_values({2, 8, 3}, 56), t, d)};
  c.attrs.set("n", int64_t{2}).set("m", int64_t{4});
  c.outputs = all_exact(same_cell(op::kSparsifyNmMask, c), t);
  return {c};
}

// ---- optimizers ----------------------------------------------------------------
// The fused steps and the non-finite test agree bit for bit on every device
// (optim/sgd_step.h, adam_step.h: each product and sum rounded on its own):
// the CPU cell in the run's dtype. 5000 elements cross the CPU's 4096-element
// check blocks.

constexpr int64_t kStepSize = 5000;

// The flag (0, or undefined for a "none" cell) and the clip factor (0.75, or undefined).
inline Tensor flag_input(const std::string& format, const Device& d) {
  return format == "none" ? Tensor() : zeros({}, TensorOptions(DType::kF32, d));
}
inline Tensor factor_input(const std::string& format, const Device& d) {
  return format == "none" ? Tensor() : full({}, 0.75, TensorOptions(DType::kF32, d));
}

// A gradient, with an inf at `bad` (when >= 0), for the flag to find.
inline Tensor gradient(DType t, const Device& d, int64_t bad, uint64_t seed) {
  Tensor g = uniform_values({kStepSize}, seed, -1.0, 1.0);
  if (bad >= 0) g.select(0, bad).fill_(std::numeric_limits<double>::infinity());
  return on(g, t, d);
}

// The inputs a step writes: those at `positions` that are defined.
inline std::vector<int> written_of(const std::vector<Tensor>& in, std::vector<int> positions) {
  std::vector<int> out;
  for (int i : positions) {
    if (in[static_cast<size_t>(i)].defined()) out.push_back(i);
  }
  return out;
}

inline std::vector<OpCase> nonfinite_flag_cases(const std::vector<std::string>&, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (int64_t bad : {-1, 4999, 17}) {
    OpCase c;
    c.name = bad < 0 ? "finite" : "inf at " + std::to_string(bad);
    Tensor v = uniform_values({kStepSize}, 57, -1.0, 1.0);
    if (bad == 17) v.select(0, bad).fill_(std::numeric_limits<double>::quiet_NaN());
    if (bad == 4999) v.select(0, bad).fill_(-std::numeric_limits<double>::infinity());
    c.inputs = {on(v, t, d), zeros({}, TensorOptions(DType::kF32, d))};
    c.written = {1};
    c.outputs = all_exact(same_cell(op::kNonfiniteFlag, c), t);
    out.push_back(c);
  }
  return out;
}

// sgd_step (p, g, buf, flag, factor): momentum with a buffer (nesterov and
// not; `first` writes g into it), plain SGD without; weight decay always; an
// inf in the gradient where there is a flag.
inline std::vector<OpCase> sgd_step_cases(const std::vector<std::string>& f, DType t, const Device& d) {
  const bool momentum = f[2] != "none";
  std::vector<OpCase> out;
  for (int variant = 0; variant < (momentum ? 2 : 1); ++variant) {
    OpCase c;
    const bool nesterov = variant == 1;
    c.name = momentum ? (nesterov ? "nesterov, first" : "momentum") : "plain";
    const int64_t bad = f[3] == "none" ? -1 : 123;
    c.inputs = {on(full_values({kStepSize}, 58), t, d), gradient(t, d, bad, 59),
                momentum ? on(full_values({kStepSize}, 60), t, d) : Tensor(), flag_input(f[3], d),
                factor_input(f[4], d)};
    c.attrs.set("lr", 0.1)
        .set("momentum", momentum ? 0.9 : 0.0)
        .set("dampening", nesterov ? 0.0 : 0.1)
        .set("weight_decay", 0.01)
        .set("nesterov", nesterov)
        .set("first", nesterov);
    c.written = written_of(c.inputs, {0, 2, 3});
    c.outputs = all_exact(same_cell(op::kSgdStep, c), t);
    out.push_back(c);
  }
  return out;
}

// sgd_step_mixed (master f32, g16, buf f32, p16, flag, factor): the run's
// dtype is the 16-bit one.
inline std::vector<OpCase> sgd_step_mixed_cases(const std::vector<std::string>& f, DType t, const Device& d) {
  const bool momentum = f[2] != "none";
  OpCase c;
  c.name = momentum ? "momentum" : "plain";
  const Tensor master = full_values({kStepSize}, 61);
  c.inputs = {on(master, DType::kF32, d),
              gradient(t, d, f[4] == "none" ? -1 : 4000, 62),
              momentum ? on(full_values({kStepSize}, 63), DType::kF32, d) : Tensor(),
              on(master, t, d),
              flag_input(f[4], d),
              factor_input(f[5], d)};
  c.attrs.set("lr", 0.1)
      .set("momentum", momentum ? 0.9 : 0.0)
      .set("dampening", 0.0)
      .set("weight_decay", 0.01)
      .set("nesterov", false)
      .set("first", false);
  c.written = written_of(c.inputs, {0, 2, 3, 4});
  c.outputs = all_exact(same_cell(op::kSgdStepMixed, c), t);
  return {c};
}

// adam_step (p, g, m, v, flag, factor): Adam and AdamW with weight decay, at step 3.
inline std::vector<OpCase> adam_step_cases(const std::vector<std::string>& f, DType t, const Device& d) {
  std::vector<OpCase> out;
  for (bool decoupled : {false, true}) {
    OpCase c;
    c.name = decoupled ? "AdamW" : "Adam";
    c.inputs = {on(full_values({kStepSize}, 64), t, d),
                gradient(t, d, f[4] == "none" ? -1 : 2, 65),
                on(uniform_values({kStepSize}, 66, -0.1, 0.1), t, d),
                on(uniform_values({kStepSize}, 67, 0.0, 0.01), t, d),
                flag_input(f[4], d),
                factor_input(f[5], d)};
    c.attrs.set("lr", 1e-2)
        .set("beta1", 0.9)
        .set("beta2", 0.999)
        .set("eps", 1e-8)
        .set("weight_decay", 0.01)
        .set("decoupled", decoupled)
        .set("step", int64_t{3});
    c.written = written_of(c.inputs, {0, 2, 3, 4});
    c.outputs = all_exact(same_cell(op::kAdamStep, c), t);
    out.push_back(c);
  }
  return out;
}

}  // namespace coppice::parity
