#include "sparsifiers/fused_relu.h"

#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/fusable.h"
#include "sparsifiers/mask_keys.h"
#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

constexpr const char* kOp = op::kReluToCsr;

bool fusable_input(const Tensor& x) {
  return x.is_dense() && x.dim() == 2 && is_floating(x.dtype()) && x.numel() <= INT32_MAX &&
         Dispatcher::instance().has_kernel(kOp, x.device().type);
}

// The CPU twin of sparsifiers/cuda/relu_to_csr.cu. One pass: each kept entry
// is appended to the column and value arrays as it is found, and each row's
// end becomes its pointer (the GPU needs a counting pass first).
template <typename T>
std::vector<Tensor> relu_csr_cpu(const Tensor& x, double threshold) {
  using C = std::conditional_t<sizeof(T) == sizeof(double), double, float>;
  const T* p = x.data<T>();
  const int64_t rows = x.size(0), cols = x.size(1);
  const C bound = sparsify_detail::relu_keep_bound<C>(threshold);
  std::vector<int32_t> crow(static_cast<size_t>(rows) + 1, 0);
  std::vector<int32_t> col;
  std::vector<T> val;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const T v = p[r * cols + c];
      if (sparsify_detail::relu_keeps(static_cast<C>(v), bound)) {  // then relu(v) = v
        col.push_back(static_cast<int32_t>(c));
        val.push_back(v);
      }
    }
    crow[static_cast<size_t>(r) + 1] = static_cast<int32_t>(col.size());
  }
  const int64_t nnz = static_cast<int64_t>(col.size());
  return {from_vector(crow, {rows + 1}), from_vector(col, {nnz}), from_vector(val, {nnz})};
}

std::vector<Tensor> relu_to_csr_cpu(const std::vector<Tensor>& in, const Attrs& a) {
  COPPICE_CHECK(in.size() == 1, kOp, ": expected 1 input, got ", in.size());
  return dispatch_floating(in[0].dtype(), kOp, [&](auto tag) {
    return relu_csr_cpu<typename decltype(tag)::type>(in[0], a.get_double("threshold"));
  });
}

const KernelRegistrar kReluToCsrCpu(kOp, DeviceType::kCpu, {"dense"}, relu_to_csr_cpu);

}  // namespace

Variable relu_to_csr(const Variable& x, double threshold) {
  COPPICE_CHECK(x.defined() && fusable_input(x.value()), kOp,
                ": needs a dense 2-D f32, f64, bf16 or f16 tensor (CPU or CUDA) of fewer than 2^31 elements, got ",
                x.defined() ? str_cat("format '", x.value().format(), "', shape ", shape_to_string(x.shape()), ", ",
                                      dtype_name(x.dtype()), " on ", x.device().to_string())
                            : std::string("an undefined Variable"));
  COPPICE_CHECK(threshold >= 0.0, kOp, ": the threshold must be >= 0 (a relu keeps no negative values), got ",
                threshold);
  Tensor xv = x.value();
  Attrs attrs;
  attrs.set("threshold", threshold);
  std::vector<Tensor> parts = dispatch(kOp, {xv.contiguous()}, attrs);
  Tensor y(std::make_shared<CompressedImpl>(Layout::kCsr, std::move(parts[0]), std::move(parts[1]), std::move(parts[2]),
                                            xv.shape(), new_pattern_version()));
  return record(y, "ReluToCsrBackward", {x}, [y](const Tensor& g, const GradNeeds&) {
    return std::vector<Tensor>{to_dense(project_grad(g, y, "relu_to_csr backward"))};
  });
}

FusedForward fused_relu() {
  return [](const std::vector<Variable>& in, const Sparsifier* s, const OutputFormat& format,
            const SparsifyContext&) -> Variable {
    double threshold = 0.0;
    if (in.size() != 1 || !in[0].defined() || format.name != "csr" || !fusable_input(in[0].value()) ||
        !fusable_threshold(s, &threshold) || threshold < 0.0) {
      return Variable();
    }
    return relu_to_csr(in[0], threshold);
  };
}

SparsifiedOp sparsified_relu(ValueSparsity output, ValueSparsity input_grad) {
  SingleOpFn op = [](const std::vector<Variable>& in) {
    COPPICE_CHECK(in.size() == 1, "sparsified relu: takes one input, got ", in.size());
    return relu(in[0]);
  };
  return SparsifiedOp(std::move(op), std::move(output), {std::move(input_grad)}, fused_relu());
}

}  // namespace coppice
