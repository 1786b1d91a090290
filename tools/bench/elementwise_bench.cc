// Elementwise add of two contiguous tensors: reads 2, writes 1 element per element.
#include <exception>

#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

void run_elementwise(const Config& config, std::vector<Result>* results) {
  const int64_t numel = config.numel > 0 ? config.numel : kElementwiseNumel;
  const std::vector<DType> dtypes = config.dtypes.empty() ? std::vector<DType>{DType::kF32} : config.dtypes;
  for (const DeviceCase& dc : devices_to_run(config)) {
    for (DType dtype : dtypes) {
      Result r;
      r.suite = "elementwise";
      r.op = "add";
      r.device = dc.label;
      r.dtype = std::string(dtype_name(dtype));
      r.shape = {numel};
      r.bytes = 3.0 * static_cast<double>(numel) * static_cast<double>(dtype_size(dtype));
      describe_device(dc.cuda, dtype, "gbps", &r);
      std::string skip = dc.cuda ? cuda_skip_reason() : "";
      if (!skip.empty()) {
        r.status = skip;
      } else {
        try {
          const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
          Tensor a = random_input({numel}, dtype, device);
          Tensor b = random_input({numel}, dtype, device);
          Timing t = time_op([&] { Tensor c = add(a, b); }, [&] { synchronize(device); }, timing_options(config));
          fill_timing(t, &r);
        } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
      }
      log_result(r);
      results->push_back(std::move(r));
    }
  }
}

}  // namespace coppice::bench
