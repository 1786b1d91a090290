#include "autograd/function.h"

#include <memory>
#include <string>

namespace coppice {

bool should_record(const Tensor& value, const std::vector<Variable>& inputs) {
  if (!GradMode::is_enabled() || !is_floating(value.dtype())) return false;
  for (const Variable& v : inputs) {
    if (v.defined() && v.requires_grad()) return true;
  }
  return false;
}

Variable attach(Tensor value, std::string_view name, const std::vector<Variable>& inputs, BackwardFn backward) {
  auto node = std::make_shared<FunctionNode>(std::string(name), std::move(backward));
  for (const Variable& v : inputs) {
    if (!v.defined()) {
      node->add_input(Edge{}, InputMeta{});
      continue;
    }
    node->add_input(v.gradient_edge(), InputMeta{v.shape(), v.dtype()});
  }
  node->finalize_needs();
  return Variable::from_node(std::move(value), std::move(node));
}

}  // namespace coppice
