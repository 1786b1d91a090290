#include "tools/bench/linear_products.h"

#include <cmath>
#include <string>
#include <vector>

#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tools/bench/suites.h"

namespace coppice::bench {

namespace {

struct Operands {
  Tensor x, dy;
  Tensor bias;  // [out], for linear_gelu
  Tensor z;     // [batch, in]: the gelu's input at linear_dx_gelu's output
};

// One product on the weight w (dense or sparse).
std::function<void()> product(const std::string& op, const Tensor& w, const Operands& o) {
  if (op == "linear" || op == "dense_linear") return [w, o] { Tensor y = linear(o.x, w); };
  if (op == "linear_gelu") return [w, o] { auto yz = linear_gelu(o.x, w, o.bias); };
  if (op == "linear_dx") return [w, o] { Tensor y = matmul(o.dy, w); };
  if (op == "linear_dx_gelu") return [w, o] { Tensor y = matmul_gelu_backward(o.dy, w, o.z); };
  return [w, o] { Tensor y = sddmm(o.dy.t(), o.x, w); };
}

// The dense elements a product moves (rows of x, dy, y, z and the bias
// aside): linear and linear_dx read one operand and write one; the gelu
// forms write z too (linear_gelu) or read it (linear_dx_gelu); linear_dw
// reads x and dy.
double dense_elements(const std::string& op, int64_t batch, int64_t in, int64_t out) {
  const auto b = static_cast<double>(batch);
  if (op == "linear_gelu") return b * static_cast<double>(in + 2 * out);
  if (op == "linear_dx_gelu") return b * static_cast<double>(out + 2 * in);
  return b * static_cast<double>(in + out);
}

}  // namespace

std::vector<LinearMode> modes_asked(const Config& config, const std::vector<LinearMode>& all) {
  if (config.dtypes.empty()) return all;
  std::vector<LinearMode> out;
  for (const LinearMode& m : all) {
    for (DType d : config.dtypes) {
      if (d == m.dtype) out.push_back(m);
    }
  }
  return out;
}

void run_linear_products(const Config& config, const std::string& suite, const std::vector<LinearMode>& modes,
                         const std::vector<SparseWeight>& weights, std::vector<Result>* results) {
  const auto [out, in] = linear_weight_shape(config);
  const int64_t batch = config.batch > 0 ? config.batch : kSparseSize;
  const TimingOptions opts = timing_options(config);
  const std::string skip = cuda_skip_reason();
  const Device device = Device::cuda(0);
  for (const LinearMode& mode : modes) {
    set_allow_tf32(mode.tf32);
    auto base = [&](const std::string& op, const std::string& format) {
      Result r;
      r.suite = suite;
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
      o.bias = random_input({out}, DType::kF32, device).to(mode.dtype);
      o.z = random_input({batch, in}, DType::kF32, device).to(mode.dtype);
    }
    // The byte floor's rate: a device copy of x (read once, written once), so
    // that a product's floor is its own bytes (its dense operand read once,
    // its output written once, the weight's values) at what HBM gives here.
    double copy_bytes_per_ms = std::nan("");
    if (skip.empty()) {
      Tensor copy = Tensor::empty(o.x.shape(), o.x.options());
      Result r = base("copy", "dense");
      time_into(r, [&] { copy.copy_(o.x); });
      copy_bytes_per_ms = 2.0 * static_cast<double>(o.x.numel() * dtype_size(mode.dtype)) / r.median_ms;
    }
    // The dense anchor: x W^T by cuBLAS (dy W and dy^T x are gemms of the same size).
    double dense_ms = std::nan("");
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
    for (const SparseWeight& weight : weights) {
      Tensor w;
      int64_t nnz = 0;
      if (skip.empty()) {
        w = weight.make(random_input({out, in}, DType::kF32, device).to(mode.dtype));
        nnz = sparse_impl(w, "bench").nnz();
      }
      for (const char* op : {"linear", "linear_gelu", "linear_dx", "linear_dx_gelu", "linear_dw"}) {
        Result r = base(op, weight.format);
        r.sparsity = weight.sparsity;
        r.nnz = nnz;
        r.flops = 2.0 * static_cast<double>(nnz) * static_cast<double>(batch);
        r.extra = weight.extra;
        if (skip.empty()) {
          time_into(r, product(op, w, o));
          const double speedup = dense_ms / r.median_ms;
          const double density = static_cast<double>(nnz) / static_cast<double>(out * in);
          r.extra.push_back({"dense_ms", dense_ms});
          r.extra.push_back({"speedup", speedup});
          r.extra.push_back({"fraction_of_ideal", speedup * density});
          // Each product moves its dense elements once and the nnz values
          // once: linear reads x, writes y and reads W; linear_dx reads dy,
          // writes dx and reads W; linear_dw reads x and dy and writes W's values.
          const double bytes = static_cast<double>(dtype_size(mode.dtype)) *
                               (dense_elements(op, batch, in, out) + static_cast<double>(nnz));
          const double floor_ms = bytes / copy_bytes_per_ms;
          r.extra.push_back({"byte_floor_ms", floor_ms});
          r.extra.push_back({"fraction_of_byte_floor", floor_ms / r.median_ms});
        }
        log_result(r);
        results->push_back(std::move(r));
      }
    }
  }
  set_allow_tf32(config.allow_tf32);
}

}  // namespace coppice::bench
