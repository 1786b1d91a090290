// BSR-of-2:4 (issue 35's hybrid, sparse/cuda/bsr_nm24.h: 128 x 64 blocks,
// 2:4 inside each) beside BSR and 2:4 alone at the MLP-4096 shapes: the
// forward product y = x W^T, W [H, I] (4096 x 4096, --hidden, --in), x
// [B, I] (B 4096, --batch), in bf16 and f16, each beside cuBLAS's dense
// product timed in the same run. For each fraction of blocks kept (50, 20
// and 10 %): the hybrid (half of those blocks' entries), BSR 64 x 64 with as
// many entries (its fastest route, wgmma) and BSR 64 x 64 keeping the whole
// blocks (the hybrid's pattern without 2:4 inside); and 2:4 alone; and the
// hybrid through the dispatcher (format bsr_nm24_declared: a declared
// format's tensor on the GPU, its weight form made per call). Rows carry
// dense_ms and speedup. CUDA only.
#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sparse/convert.h"
#include "sparse/levels/level_impl.h"
#include "sparse/nm.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"
#ifdef COPPICE_BENCH_CUDA
#include "sparse/cuda/bsr_nm24.h"
#endif

namespace coppice::bench {

#ifdef COPPICE_BENCH_CUDA
// The format name of the dispatcher's rows.
constexpr const char* kDeclaredHybrid = "bsr_nm24_declared";
#endif

void run_bsr_nm24(const Config& config, std::vector<Result>* results) {
  const auto [out, in] = linear_weight_shape(config);
  const int64_t batch = config.batch > 0 ? config.batch : kSparseSize;
  std::string skip = cuda_skip_reason();
#ifndef COPPICE_BENCH_CUDA
  if (skip.empty()) skip = "skipped: this build has no CUDA kernels";
#endif
  const TimingOptions opts = timing_options(config);
  const Device device = Device::cuda(0);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    if (!config.dtypes.empty() && std::find(config.dtypes.begin(), config.dtypes.end(), dtype) == config.dtypes.end())
      continue;
    auto row = [&](const std::string& format, double sparsity, int64_t nnz,
                   std::vector<std::pair<std::string, double>> extra) {
      Result r;
      r.suite = "bsr_nm24";
      r.op = format == "dense" ? "dense_linear" : "linear";
      r.device = "cuda:0";
      r.dtype = dtype_name(dtype);
      r.shape = {batch, in, out};
      r.format = format;
      r.sparsity = sparsity;
      r.nnz = nnz;
      r.flops = 2.0 * static_cast<double>(nnz) * static_cast<double>(batch);
      r.extra = std::move(extra);
      describe_device(true, dtype, "gflops", &r);
      if (!skip.empty()) r.status = skip;
      return r;
    };
    auto timed = [&](Result r, const std::function<void()>& fn, double dense_ms) {
      if (skip.empty()) {
        try {
          fill_timing(time_op(
                          fn, [&] { synchronize(device); }, opts),
                      &r);
          if (dense_ms > 0) {
            r.extra.push_back({"dense_ms", dense_ms});
            r.extra.push_back({"speedup", dense_ms / r.median_ms});
          }
        } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
      }
      log_result(r);
      results->push_back(r);
      return r.median_ms;
    };
    if (!skip.empty()) {
      timed(
          row("dense", 0.0, out * in, {}), [] {}, 0);
      continue;
    }
#ifdef COPPICE_BENCH_CUDA
    const Tensor x = random_input({batch, in}, DType::kF32, device).to(dtype);
    const Tensor values = random_input({out, in}, DType::kF32, Device::cpu()).to(dtype);
    const Tensor w_dense = values.to(device);
    const double dense_ms = timed(
        row("dense", 0.0, out * in, {}), [&] { Tensor y = linear(x, w_dense); }, 0);
    levels::register_level_format(kDeclaredHybrid, sparse_cuda::bsr_nm24_declaration(), "bench");
    const Tensor nm = nm_compress(w_dense);
    timed(
        row("nm", 0.5, nnz(nm), {}), [&] { Tensor y = linear(x, nm); }, dense_ms);
    // 2:4 by magnitude over the whole weight, on the host: what the hybrid's blocks keep inside.
    const std::vector<uint8_t> two_of_four = ne(to_dense(nm_compress(values)), 0.0).to(DType::kU8).to_vector<uint8_t>();
    for (double kept : {0.5, 0.2, 0.1}) {
      const std::vector<uint8_t> blocks = random_block_pattern(out, in, 128, 64, 1.0 - kept, pattern_seed(1.0 - kept));
      std::vector<uint8_t> both(blocks.size());
      for (size_t i = 0; i < both.size(); ++i) both[i] = blocks[i] != 0 && two_of_four[i] != 0 ? 1 : 0;
      const levels::LevelTensor lt = levels::level_from_mask(values, mask_tensor(both, out, in, Device::cpu()),
                                                             sparse_cuda::bsr_nm24_declaration(), "bench");
      const sparse_cuda::BsrNm24Weight hybrid = sparse_cuda::bsr_nm24_weight(lt, device, "bench");
      const int64_t hybrid_nnz = lt.values.numel();
      timed(
          row("bsr_nm24", 1.0 - kept / 2, hybrid_nnz, {{"blocks_kept", kept}}),
          [&] { Tensor y = sparse_cuda::bsr_nm24_linear(x, hybrid); }, dense_ms);
      // The same through the dispatcher, a format declared with the hybrid's levels on the GPU: the
      // level family's CUDA cell puts the weight in the kernel's form at every call.
      const Tensor declared = to_device(levels::level_format_tensor(kDeclaredHybrid, lt, "bench"), device);
      timed(
          row(kDeclaredHybrid, 1.0 - kept / 2, hybrid_nnz, {{"blocks_kept", kept}}),
          [&] { Tensor y = linear(x, declared); }, dense_ms);
      for (const double density : {kept / 2, kept}) {
        const std::vector<uint8_t> m =
            random_block_pattern(out, in, 64, 64, 1.0 - density, pattern_seed(1.0 - density));
        const Tensor bsr = sparse_from_mask(w_dense, mask_tensor(m, out, in, device), "bsr", FormatOptions::block(64));
        timed(
            row("bsr", 1.0 - density, nnz(bsr), {{"block", 64.0}, {"blocks_kept", density}}),
            [&] { Tensor y = linear(x, bsr); }, dense_ms);
      }
    }
#endif
  }
}

}  // namespace coppice::bench
