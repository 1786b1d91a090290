#include "sparse/cpu/util.h"

#include "sparse/convert.h"
#include "sparse/cpu/spmm_kernels.h"
#include "tensor/runtime_options.h"

namespace coppice::sparse_cpu {

bool use_avx2() {
  static const bool cpu_has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return cpu_has && runtime_options().cpu_simd == CpuSimd::kAuto;
}

DType accumulate_dtype(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }

Tensor contiguous_as(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

void check_matrix(const Tensor& t, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.dim() == 2, op, ": ", what, " must be 2-D, got shape ", shape_to_string(t.shape()), " (format ",
                t.format(), ")");
}

void check_inputs(const std::vector<Tensor>& in, size_t n, std::string_view op) {
  COPPICE_CHECK(in.size() == n, op, ": expected ", n, " inputs, got ", in.size());
  for (size_t i = 0; i < n; ++i) {
    COPPICE_CHECK(in[i].defined(), op, ": input ", i, " is undefined");
    COPPICE_CHECK(is_floating(in[i].dtype()), op, ": input ", i, " has dtype ", dtype_name(in[i].dtype()),
                  ", expected a floating type");
    COPPICE_CHECK(in[i].dtype() == in[0].dtype(), op, ": inputs have different dtypes (", dtype_name(in[0].dtype()),
                  " and ", dtype_name(in[i].dtype()), "); convert them first");
  }
}

void register_cpu(std::string_view op, const std::vector<std::vector<std::string>>& formats, const Kernel& kernel) {
  for (const std::vector<std::string>& f : formats) {
    Dispatcher::instance().register_kernel(std::string(op), DeviceType::kCpu, f, kernel);
  }
}

}  // namespace coppice::sparse_cpu
