// The three products of a BSR linear layer, W [out, in] block-sparse, x
// [batch, in], dy [batch, out] (all [4096, 4096] with batch 4096 by default;
// --hidden H and --batch B change them):
//
//   op "linear"     y = x W^T            linear(x, W)
//   op "linear_dx"  dx = dy W            matmul(dy, W)
//   op "linear_dw"  dW = dy^T x at W     sddmm(dy^T, x, W)
//
// at blocks 16, 32 and 64 and sparsity 90/95/98 %, in bf16, f16 and TF32
// (f32 data, allow_tf32), each beside the dense product of the same shape
// and type by cuBLAS (op "dense_linear", format "dense"), timed in the same
// run. Flops count the stored blocks (2 nnz batch), and each row carries
// the dense time and two ratios: speedup = dense ms / ms, and
// fraction_of_ideal = speedup * (1 - sparsity) — 1 is density-proportional
// time, the ideal the issue measures against. CUDA only.
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/ops.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

struct BsrMode {
  const char* name;  // the Result's dtype
  DType dtype;
  bool tf32;
};

const std::vector<BsrMode> kBsrModes = {
    {"bf16", DType::kBF16, false}, {"f16", DType::kF16, false}, {"tf32", DType::kF32, true}};

// The modes --dtype asks for (bf16, f16; f32 means TF32 here), or all three.
std::vector<BsrMode> modes_of(const Config& config) {
  if (config.dtypes.empty()) return kBsrModes;
  std::vector<BsrMode> out;
  for (const BsrMode& m : kBsrModes) {
    for (DType d : config.dtypes) {
      if (d == m.dtype) out.push_back(m);
    }
  }
  return out;
}

struct Operands {
  Tensor x, dy;
};

// One product on the weight w (dense or BSR).
std::function<void()> product(const std::string& op, const Tensor& w, const Operands& o) {
  if (op == "linear" || op == "dense_linear") return [w, o] { Tensor y = linear(o.x, w); };
  if (op == "linear_dx") return [w, o] { Tensor y = matmul(o.dy, w); };
  return [w, o] { Tensor y = sddmm(o.dy.t(), o.x, w); };
}

}  // namespace

void run_bsr(const Config& config, std::vector<Result>* results) {
  const int64_t out = config.hidden > 0 ? config.hidden : kSparseSize, in = out;
  const int64_t batch = config.batch > 0 ? config.batch : kSparseSize;
  const TimingOptions opts = timing_options(config);
  const std::string skip = cuda_skip_reason();
  const Device device = Device::cuda(0);
  for (const BsrMode& mode : modes_of(config)) {
    set_allow_tf32(mode.tf32);
    auto base = [&](const std::string& op, const std::string& format) {
      Result r;
      r.suite = "bsr";
      r.op = op;
      r.device = "cuda:0";
      r.dtype = mode.name;
      r.shape = {batch, in, out};
      r.format = format;
      describe_device(true, mode.dtype, "gflops", &r);
      if (!skip.empty()) r.status = skip;
      return r;
    };
    auto time_into = [&](Result& r, const std::function<void()>& fn) {
      try {
        fill_timing(time_op(
                        fn, [&] { synchronize(device); }, opts),
                    &r);
      } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
    };
    Operands o;
    if (skip.empty()) {
      o.x = random_input({batch, in}, DType::kF32, device).to(mode.dtype);
      o.dy = random_input({batch, out}, DType::kF32, device).to(mode.dtype);
    }
    // The dense anchor: x W^T by cuBLAS (dy W and dy^T x are gemms of the same size).
    double dense_ms = kNaN;
    {
      Result r = base("dense_linear", "dense");
      r.flops = dense_gemm_flops(batch, in, out);
      if (skip.empty()) {
        const Tensor w = random_input({out, in}, DType::kF32, device).to(mode.dtype);
        time_into(r, product(r.op, w, o));
        dense_ms = r.median_ms;
      }
      log_result(r);
      results->push_back(std::move(r));
    }
    for (int64_t block : {16, 32, 64}) {
      for (double sparsity : {0.9, 0.95, 0.98}) {
        Tensor w;
        int64_t nnz = 0;
        if (skip.empty()) {
          const std::vector<uint8_t> mask =
              random_block_pattern(out, in, block, block, sparsity, pattern_seed(sparsity));
          for (uint8_t v : mask) nnz += v;
          const Tensor values = random_input({out, in}, DType::kF32, device).to(mode.dtype);
          w = sparse_from_mask(values, mask_tensor(mask, out, in, device), "bsr", FormatOptions::block(block));
        }
        for (const char* op : {"linear", "linear_dx", "linear_dw"}) {
          Result r = base(op, "bsr");
          r.sparsity = sparsity;
          r.nnz = nnz;
          r.flops = 2.0 * static_cast<double>(nnz) * static_cast<double>(batch);
          r.extra = {{"block", static_cast<double>(block)}};
          if (skip.empty()) {
            time_into(r, product(op, w, o));
            const double speedup = dense_ms / r.median_ms;
            const double density = static_cast<double>(nnz) / static_cast<double>(out * in);
            r.extra.push_back({"dense_ms", dense_ms});
            r.extra.push_back({"speedup", speedup});
            r.extra.push_back({"fraction_of_ideal", speedup * density});
          }
          log_result(r);
          results->push_back(std::move(r));
        }
      }
    }
  }
  set_allow_tf32(config.allow_tf32);
}

}  // namespace coppice::bench
