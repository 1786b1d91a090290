// attention: the fused attention kernels (sparse/attention/attention.h) at the GPT
// job's shape and two others, beside PyTorch's scaled_dot_product_attention
// (tools/bench/torch_reference.py attention, the same rows and counts).
//
// Shapes [B, H, T, d]: [32, 16, 512, 64] (configs/gpt_*.yaml), [8, 16, 2048,
// 64] and [16, 16, 1024, 128]; q, k, v [B*H, T, d] uniform in [0, 1), scale
// 1/sqrt(d). Formats:
//   causal        causal self-attention;
//   block_sparse  causal, within a layout of 64-token blocks in which query
//                 block i sees key block j iff j <= i and (i - j < 2 or
//                 (j + 1) % 4 == 0): itself and the block before (local) and
//                 every fourth block (strided). sparsity is the fraction of the
//                 (T/64)^2 blocks left out.
// Ops: attention_fwd (forward alone) and attention_fwd_bwd (forward, then the
// backward pass from a fixed output gradient). Work counts the (query, key)
// pairs a query sees (T(T+1)/2 per head when causal): 4 d FLOPs per pair
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

bool keeps(int64_t i, int64_t j) { return j <= i && (i - j < 2 || (j + 1) % 4 == 0); }

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
      std::vector<bool> keep(static_cast<size_t>(blocks * blocks));
      int64_t kept = 0, pairs = 0;
      for (int64_t i = 0; i < blocks; ++i) {
        for (int64_t j = 0; j < blocks; ++j) {
          keep[static_cast<size_t>(i * blocks + j)] = keeps(i, j);
          if (!keeps(i, j)) continue;
          ++kept;
          pairs += i == j ? kBlock * (kBlock + 1) / 2 : kBlock * kBlock;
        }
      }
      Tensor q, k, v, dout;
      AttentionMask causal{true, {}}, sparse{true, {}};
      if (skip.empty()) {
        q = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        k = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        v = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        dout = random_input({n, s.t, s.d}, DType::kF32, device).to(dtype);
        sparse.blocks = attention_block_pattern(keep, kBlock, device);
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
      for (const char* format : {"causal", "block_sparse"}) {
        const bool is_sparse = std::string(format) == "block_sparse";
        const AttentionMask& mask = is_sparse ? sparse : causal;
        const int64_t seen = is_sparse ? pairs : s.t * (s.t + 1) / 2;
        for (const char* op : {"attention_fwd", "attention_fwd_bwd"}) {
          const bool backward = std::string(op) == "attention_fwd_bwd";
          Result r;
          r.suite = "attention";
          r.op = op;
          r.device = "cuda:0";
          r.dtype = dtype_name(dtype);
          r.shape = {s.b, s.h, s.t, s.d};
          r.format = format;
          if (is_sparse) {
            r.sparsity = 1.0 - static_cast<double>(kept) / static_cast<double>(blocks * blocks);
            r.nnz = pairs;
            r.extra = {{"block", static_cast<double>(kBlock)}};
          }
          r.flops = (backward ? 3.5 : 1.0) * 4.0 * static_cast<double>(s.b * s.h * seen * s.d);
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
