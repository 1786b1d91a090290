#include "autograd/functions/straight_through.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "autograd/sparse_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

// A node of its own type, so that the products can tell a straight-through
// operand (wants_dense_gradient) from any other sparse one.
class StraightThroughNode final : public Node {
 public:
  explicit StraightThroughNode(std::string format) : Node("StraightThroughBackward"), format_(std::move(format)) {}

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    const Tensor& g = grad_outputs[0];
    COPPICE_CHECK(g.is_dense(), "straight_through backward: the gradient of the ", format_,
                  " projection reached it only at its stored positions (a ", g.format(),
                  " gradient), so it is no straight-through estimate; use the projection in linear, linear_relu, "
                  "matmul or to_dense, which give it its gradient at every position");
    return {g};
  }

 private:
  std::string format_;
};

}  // namespace

Variable straight_through(const Variable& dense, const Tensor& pattern) {
  COPPICE_CHECK(dense.defined() && dense.value().is_dense(), "straight_through: the weight must be dense, got ",
                dense.defined() ? str_cat("format '", dense.value().format(), "'") : std::string("undefined"));
  COPPICE_CHECK(pattern.defined() && pattern.is_sparse(), "straight_through: the pattern must be sparse, got ",
                pattern.defined() ? str_cat("format '", pattern.format(), "'") : std::string("undefined"));
  COPPICE_CHECK(dense.shape() == pattern.shape(), "straight_through: a weight of shape ",
                shape_to_string(dense.shape()), " for a pattern of shape ", shape_to_string(pattern.shape()));
  COPPICE_CHECK(dense.device() == pattern.device(), "straight_through: the weight is on ", dense.device().to_string(),
                ", the pattern on ", pattern.device().to_string());
  Tensor projected = with_values(pattern, sample_at(dense.value(), pattern).to(dense.dtype()).contiguous());
  if (!should_record(projected, {dense})) return Variable(std::move(projected));
  auto node = std::make_shared<StraightThroughNode>(std::string(pattern.format()));
  node->add_input(dense.gradient_edge(), InputMeta{dense.shape(), dense.dtype()});
  return Variable::from_node(std::move(projected), std::move(node));
}

bool wants_dense_gradient(const Variable& v) {
  return v.defined() && dynamic_cast<const StraightThroughNode*>(v.grad_fn().get()) != nullptr;
}

}  // namespace coppice
