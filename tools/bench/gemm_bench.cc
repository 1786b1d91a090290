// Dense GEMM: matmul of two square [n, n] matrices, 2 n^3 flops per call.
#include <exception>

#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

void run_gemm(const Config& config, std::vector<Result>* results) {
  for (const DeviceCase& dc : devices_to_run(config)) {
    std::vector<DType> dtypes = config.dtypes;
    if (dtypes.empty()) {
      dtypes = dc.cuda ? std::vector<DType>{DType::kF32, DType::kF64, DType::kBF16, DType::kF16}
                       : std::vector<DType>{DType::kF32, DType::kF64};
    }
    const int64_t n = config.size > 0 ? config.size : (dc.cuda ? kCudaGemmSize : kCpuGemmSize);
    for (DType dtype : dtypes) {
      Result r;
      r.suite = "gemm";
      r.op = "matmul";
      r.device = dc.label;
      r.dtype = std::string(dtype_name(dtype));
      r.shape = {n, n, n};
      r.flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
      describe_device(dc.cuda, dtype, "gflops", &r);
      std::string skip = dc.cuda ? cuda_skip_reason() : "";
      if (!skip.empty()) {
        r.status = skip;
      } else {
        try {
          const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
          Tensor a = random_input({n, n}, dtype, device);
          Tensor b = random_input({n, n}, dtype, device);
          Timing t = time_op([&] { Tensor c = matmul(a, b); }, [&] { synchronize(device); }, timing_options(config));
          fill_timing(t, &r);
        } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
      }
      log_result(r);
      results->push_back(std::move(r));
    }
  }
}

}  // namespace coppice::bench
