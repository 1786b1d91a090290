// Elementwise add of two contiguous tensors: reads 2, writes 1 element per
// element; and cat of one GPT block's gradients into a bucket (the gradient
// exchange's bucket fill, distributed/grad_sync.cc: reads 1, writes 1), the
// pieces sized as the GPT job's (width 1024, MLP 4096; 256 on the CPU;
// --size sets the width); and a mean over a sequence's tokens.
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

// One pre-norm GPT block's parameter sizes at width d (MLP 4d): LayerNorm
// weights and biases, qkv, proj, fc1, fc2 and their biases.
std::vector<int64_t> gpt_block_sizes(int64_t d) {
  return {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d};
}

// One bandwidth record: `op` over `numel` elements moving `moved` elements'
// bytes a call; `setup` makes the inputs on the device and returns the call
// timed.
void run_case(const Config& config, const DeviceCase& dc, DType dtype, const char* op, int64_t numel, double moved,
              const std::function<std::function<void()>(Device)>& setup, std::vector<Result>* results,
              std::vector<std::pair<std::string, double>> extra = {}) {
  Result r;
  r.suite = "elementwise";
  r.op = op;
  r.device = dc.label;
  r.dtype = std::string(dtype_name(dtype));
  r.shape = {numel};
  r.bytes = moved * static_cast<double>(dtype_size(dtype));
  describe_device(dc.cuda, dtype, "gbps", &r);
  r.extra = std::move(extra);
  std::string skip = dc.cuda ? cuda_skip_reason() : "";
  if (!skip.empty()) {
    r.status = skip;
  } else {
    try {
      const Device device = dc.cuda ? Device::cuda(0) : Device::cpu();
      const std::function<void()> call = setup(device);
      Timing t = time_op(
          call, [&] { synchronize(device); }, timing_options(config));
      fill_timing(t, &r);
    } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
  }
  log_result(r);
  results->push_back(std::move(r));
}

}  // namespace

void run_elementwise(const Config& config, std::vector<Result>* results) {
  const int64_t numel = config.numel > 0 ? config.numel : kElementwiseNumel;
  const std::vector<DType> dtypes = config.dtypes.empty() ? std::vector<DType>{DType::kF32} : config.dtypes;
  for (const DeviceCase& dc : devices_to_run(config)) {
    for (DType dtype : dtypes) {
      run_case(
          config, dc, dtype, "add", numel, 3.0 * static_cast<double>(numel),
          [&](Device device) -> std::function<void()> {
            Tensor a = random_input({numel}, dtype, device);
            Tensor b = random_input({numel}, dtype, device);
            return [a, b] { Tensor c = add(a, b); };
          },
          results);
      const int64_t width = config.size > 0 ? config.size : (dc.cuda ? 1024 : 256);  // the GPT's, or --size
      const std::vector<int64_t> sizes = gpt_block_sizes(width);
      int64_t bucket = 0;
      for (int64_t n : sizes) bucket += n;
      run_case(config, dc, dtype, "cat_bucket", bucket, 2.0 * static_cast<double>(bucket),
               [&](Device device) -> std::function<void()> {
                 std::vector<Tensor> parts;
                 for (int64_t n : sizes) parts.push_back(random_input({n}, dtype, device));
                 return [parts] { Tensor filled = cat(parts); };
               },
               results, {{"pieces", static_cast<double>(sizes.size())}});
      // A mean over a sequence's tokens, [32, 512, d] -> [32, d] (reads the
      // tensor once): as `mean` runs it (column sums of each sequence in
      // place), and as its rows path would (tokens moved last by a permuted
      // copy, then row sums), the route it replaced.
      const int64_t batch = 32, tokens = 512;
      const double read = static_cast<double>(batch * tokens * width + batch * width);
      run_case(
          config, dc, dtype, "token_mean", batch * tokens * width, read,
          [&](Device device) -> std::function<void()> {
            Tensor x = random_input({batch, tokens, width}, dtype, device);
            return [x] { Tensor m = mean(x, {1}); };
          },
          results);
      run_case(
          config, dc, dtype, "token_mean_rows", batch * tokens * width, read,
          [&](Device device) -> std::function<void()> {
            Tensor x = random_input({batch, tokens, width}, dtype, device);
            return [x] { Tensor m = mean(x.permute({0, 2, 1}).contiguous(), {2}); };
          },
          results);
    }
  }
}

}  // namespace coppice::bench
