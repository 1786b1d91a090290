#include "sparse/ops/value_kernels.h"

#include <memory>

#include "sparse/convert.h"
#include "tensor/ops.h"
#include "tensor/unary_ops.h"

namespace coppice::sparse_kernels {

const std::vector<std::string>& zero_preserving_unary_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> names;
    unary_ops::for_each([&](auto op) {
      if (decltype(op)::kZeroPreserving) names.emplace_back(decltype(op)::kName);
    });
    return names;
  }();
  return ops;
}

Kernel unary_on_values(std::string op) {
  return [op](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
    COPPICE_CHECK(in.size() == 1, op, ": expected 1 input, got ", in.size());
    return {with_values(in[0], dispatch(op, {values(in[0])}, attrs)[0])};
  };
}

namespace {

void check_two_floating(const std::vector<Tensor>& in, std::string_view op) {
  COPPICE_CHECK(in.size() == 2, op, ": expected 2 inputs, got ", in.size());
  for (size_t i = 0; i < 2; ++i) {
    COPPICE_CHECK(in[i].defined(), op, ": input ", i, " is undefined");
    COPPICE_CHECK(is_floating(in[i].dtype()), op, ": input ", i, " has dtype ", dtype_name(in[i].dtype()),
                  ", expected a floating type");
  }
  COPPICE_CHECK(in[0].dtype() == in[1].dtype(), op, ": inputs have different dtypes (", dtype_name(in[0].dtype()),
                " and ", dtype_name(in[1].dtype()), "); convert them first");
}

}  // namespace

SparseDensePair sparse_dense_pair(const std::vector<Tensor>& in, std::string_view op) {
  check_two_floating(in, op);
  SparseDensePair p{in[0], in[1], true};
  if (in[0].is_dense()) p = {in[1], in[0], false};
  const Shape out = broadcast_shapes(in[0].shape(), in[1].shape(), op);
  COPPICE_CHECK(out == p.sparse.shape(), op, ": the sparse operand ", shape_to_string(p.sparse.shape()),
                " would have to broadcast to ", shape_to_string(out),
                "; sparse operands do not broadcast (expand the dense one's shape, or convert to dense)");
  return p;
}

std::vector<Tensor> pow_on_values(const std::vector<Tensor>& in, const Attrs&) {
  const SparseDensePair p = sparse_dense_pair(in, "pow");
  COPPICE_CHECK(p.sparse_first && p.dense.numel() == 1 && p.dense.item() > 0,
                "pow: a sparse base takes one positive "
                "exponent (0 ** e is 0 only for e > 0); convert to dense for other exponents");
  return {with_values(p.sparse, pow(values(p.sparse), p.dense.reshape({})))};
}

std::vector<Tensor> coo_concat(const std::vector<Tensor>& in, bool subtract, std::string_view op) {
  check_two_floating(in, op);
  COPPICE_CHECK(in[0].shape() == in[1].shape(), op, ": sparse operands must have one shape (no broadcasting), got ",
                shape_to_string(in[0].shape()), " and ", shape_to_string(in[1].shape()));
  const CooImpl& a = coo_impl(in[0], op);
  const CooImpl& b = coo_impl(in[1], op);
  Tensor idx = cat({a.indices(), b.indices()}, 1);
  Tensor vals = cat({a.values(), subtract ? neg(b.values()) : b.values()}, 0);
  const bool coalesced = a.nnz() + b.nnz() <= 1;
  return {Tensor(std::make_shared<CooImpl>(idx, vals, in[0].shape(), coalesced, new_pattern_version()))};
}

std::vector<Tensor> transpose(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 1, "transpose: expected 1 input, got ", in.size());
  return {sparse_transpose(in[0])};
}

}  // namespace coppice::sparse_kernels
