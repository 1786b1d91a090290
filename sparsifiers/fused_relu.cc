#include "sparsifiers/fused_relu.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/sparse.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/fusable.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

bool fusable_input(const Tensor& x) {
  return x.is_dense() && x.dim() == 2 && x.device().is_cpu() && (x.dtype() == DType::kF32 || x.dtype() == DType::kF64);
}

// One pass: each kept entry is appended to the column and value arrays as it
// is found, and each row's end becomes its pointer.
template <typename T>
Tensor relu_csr_kernel(const Tensor& x, double threshold) {
  Tensor xc = x.contiguous();
  const T* p = xc.data<T>();
  const int64_t rows = x.size(0), cols = x.size(1);
  const T t = static_cast<T>(threshold);
  std::vector<int32_t> crow(static_cast<size_t>(rows) + 1, 0);
  std::vector<int32_t> col;
  std::vector<T> val;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const T v = p[r * cols + c];
      if (v > t) {  // relu(v) > t >= 0 exactly when v > t
        col.push_back(static_cast<int32_t>(c));
        val.push_back(v);
      }
    }
    crow[static_cast<size_t>(r) + 1] = static_cast<int32_t>(col.size());
  }
  const int64_t nnz = static_cast<int64_t>(col.size());
  return Tensor(std::make_shared<CompressedImpl>(Layout::kCsr, from_vector(crow), from_vector(col, {nnz}),
                                                 from_vector(val, {nnz}), x.shape(), new_pattern_version()));
}

}  // namespace

Variable relu_to_csr(const Variable& x, double threshold) {
  COPPICE_CHECK(x.defined() && fusable_input(x.value()), "relu_to_csr: needs a dense 2-D f32 or f64 CPU tensor, got ",
                x.defined() ? str_cat("format '", x.value().format(), "', shape ", shape_to_string(x.shape()), ", ",
                                      dtype_name(x.dtype()), " on ", x.device().to_string())
                            : std::string("an undefined Variable"));
  COPPICE_CHECK(threshold >= 0.0, "relu_to_csr: the threshold must be >= 0 (a relu keeps no negative values), got ",
                threshold);
  Tensor xv = x.value();
  Tensor y = xv.dtype() == DType::kF32 ? relu_csr_kernel<float>(xv, threshold) : relu_csr_kernel<double>(xv, threshold);
  return record(y, "ReluToCsrBackward", {x}, [y](const Tensor& g, const GradNeeds&) {
    return std::vector<Tensor>{to_dense(autograd_detail::project_grad(g, y, "relu_to_csr backward"))};
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
