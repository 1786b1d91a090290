// attention: the fused attention kernels (sparse/attention/attention.h) at the GPT
// job's shape and two others, beside PyTorch's scaled_dot_product_attention
// (tools/bench/torch_reference.py attention, the same rows and counts).
//
// Shapes [B, H, T, d]: [32, 16, 512, 64] (configs/gpt_*.yaml), [8, 16, 2048,
// 64] and [16, 16, 1024, 128]; q, k, v [B*H, T, d] uniform in [0, 1), scale
// 1/sqrt(d). Formats, two dense and two block-sparse layouts of 64-token
// blocks (sparsity: the fraction of the (T/64)^2 blocks left out):
//   causal        causal self-attention;
//   block_sparse  causal, query block i seeing key block j iff j <= i and
//                 (i - j < 2 or (j + 1) % 4 == 0): itself and the block before
//                 (local) and every fourth block (strided); 71.9 % at T 512;
//   full          every query sees every key (not causal);
//   window        not causal, query block i seeing itself and the T/256 - 1
//                 blocks before it, wrapping around: a quarter of every row
//                 and column of blocks, 75 % sparse at every T. Issue 31's
//                 block-sparse target (2.5x PyTorch's dense SDPA at 75 %)
//                 compares it with PyTorch's full rows (tools/bench/compare.py
//                 puts each sparse row beside its dense peer's time).
// Ops: attention_fwd (forward alone) and attention_fwd_bwd (forward, then the
// backward pass from a fixed output gradient). Work counts the (query, key)
// pairs a query sees (T(T+1)/2 per head when causal, T^2 when full; causal
// layouts are causal inside their diagonal blocks too): 4 d FLOPs per pair
// forward, 3.5 times that forward and backward (the backward taken as 2.5
// forwards, as FlashAttention's papers count it).
#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "sparse/attention/attention.h"
#include "tensor/backend.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

constexpr int64_t kBlock = 64;

struct AttentionShape {
  int64_t b, h, t, d;
};
const std::vector<AttentionShape> kShapes = {{32, 16, 512, 64}, {8, 16, 2048, 64}, {16, 16, 1024, 128}};

// A layout: causal or not, and the (query block, key block) pairs it keeps of
// `blocks` x `blocks` (keeps == nullptr: every pair, a dense row).
struct Layout {
  const char* format;
  bool causal;
  bool (*keeps)(int64_t i, int64_t j, int64_t blocks);
};

bool local_strided(int64_t i, int64_t j, int64_t /*blocks*/) { return j <= i && (i - j < 2 || (j + 1) % 4 == 0); }
bool window(int64_t i, int64_t j, int64_t blocks) { return (i - j + blocks) % blocks < blocks / 4; }

const std::vector<Layout> kLayouts = {{"causal", true, nullptr},
                                      {"block_sparse", true, local_strided},
                                      {"full", false, nullptr},
                                      {"window", false, window}};

// The (query, key) pairs a layout sees per head at T = blocks x kBlock, and
// its pattern's kept blocks (all of them for a dense layout).
struct LayoutWork {
  std::vector<bool> keep;
  int64_t kept = 0, pairs = 0;
};

LayoutWork layout_work(const Layout& layout, int64_t blocks) {
  LayoutWork w;
  w.keep.assign(static_cast<size_t>(blocks * blocks), false);
  for (int64_t i = 0; i < blocks; ++i) {
    for (int64_t j = 0; j < blocks; ++j) {
      if (layout.causal && j > i) continue;
      if (layout.keeps != nullptr && !layout.keeps(i, j, blocks)) continue;
      w.keep[static_cast<size_t>(i * blocks + j)] = true;
      ++w.kept;
      w.pairs += layout.causal && i == j ? kBlock * (kBlock + 1) / 2 : kBlock * kBlock;
    }
  }
  return w;
}

}  // namespace

void run_attention(const Config& config, std::vector<Result>* results) {
  const TimingOptions opts = timing_options(config);
  const std::string skip = cuda_skip_reason();
  const Device device = Device::cuda(0);
  const std::vector<DType> dtypes =
      config.dtypes.empty() ? std::vector<DType>{DType::kBF16, DType::kF16} : config.dtypes;
  for (DType dtype : dtypes) {
    for (const AttentionShape& s : kShapes) {
      const int64_t n = s.b * s.h, blocks = s.t / kBlock;
      Tensor q, k, v, dout;
      if (skip.empty()) {
        q = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        k = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        v = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        dout = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
      for (const Layout& layout : kLayouts) {
        const bool is_sparse = layout.keeps != nullptr;
        const LayoutWork work = layout_work(layout, blocks);
        AttentionMask mask{layout.causal, {}};
        if (skip.empty() && is_sparse) mask.blocks = attention_block_pattern(work.keep, kBlock, device);
        for (const char* op : {"attention_fwd", "attention_fwd_bwd"}) {
          const bool backward = std::string(op) == "attention_fwd_bwd";
          Result r;
          r.suite = "attention";
          r.op = op;
          r.device = "cuda:0";
          r.dtype = dtype_name(dtype);
          r.shape = {s.b, s.h, s.t, s.d};
          r.format = layout.format;
          if (is_sparse) {
            r.sparsity = 1.0 - static_cast<double>(work.kept) / static_cast<double>(blocks * blocks);
            r.nnz = work.pairs;
            r.extra = {{"block", static_cast<double>(kBlock)}};
          }
          r.flops = (backward ? 3.5 : 1.0) * 4.0 * static_cast<double>(s.b * s.h * work.pairs * s.d);
          describe_device(true, dtype, "gflops", &r);
          if (!skip.empty()) r.status = skip;
          if (skip.empty()) {
            auto fn = [&] {
              AttentionOutput o = attention_forward(q, k, v, scale, mask);
              if (backward) attention_backward(q, k, v, o.out, o.lse, dout, scale, mask);
            };
            try {
              fill_timing(time_op(
                              fn, [&] { synchronize(device); }, opts),
                          &r);
            } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
          }
          log_result(r);
          results->push_back(std::move(r));
        }
      }
    }
  }
}

}  // namespace coppice::bench
