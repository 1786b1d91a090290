// The products of a BSR linear layer (linear_products.h: linear,
// linear_gelu, linear_dx, linear_dx_gelu, linear_dw, beside cuBLAS dense) at blocks 16, 32, 64 and 128
// (--block N: N alone) and sparsity 90/95/98 % (--sparsity X: X alone), in
// bf16, f16 and TF32 (f32 data, allow_tf32). CUDA only.
#include <vector>

#include "sparse/convert.h"
#include "tools/bench/linear_products.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

void run_bsr(const Config& config, std::vector<Result>* results) {
  const auto [out, in] = linear_weight_shape(config);
  std::vector<SparseWeight> weights;
  const std::vector<int64_t> blocks =
      config.block_given ? std::vector<int64_t>{config.train_block} : std::vector<int64_t>{16, 32, 64, 128};
  const std::vector<double> sparsities =
      config.sparsity_given ? std::vector<double>{config.sparsity} : std::vector<double>{0.9, 0.95, 0.98};
  for (int64_t block : blocks) {
    for (double sparsity : sparsities) {
      SparseWeight w;
      w.format = "bsr";
      w.sparsity = sparsity;
      w.extra = {{"block", static_cast<double>(block)}};
      w.make = [=](const Tensor& values) {
        const std::vector<uint8_t> mask = random_block_pattern(out, in, block, block, sparsity, pattern_seed(sparsity));
        return sparse_from_mask(values, mask_tensor(mask, out, in, values.device()), "bsr",
                                FormatOptions::block(block));
      };
      weights.push_back(std::move(w));
    }
  }
  const std::vector<LinearMode> modes = {
      {"bf16", DType::kBF16, false}, {"f16", DType::kF16, false}, {"tf32", DType::kF32, true}};
  run_linear_products(config, "bsr", modes_asked(config, modes), weights, results);
}

}  // namespace coppice::bench
